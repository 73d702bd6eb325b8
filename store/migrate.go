package store

import (
	"context"
	"crypto/rand"
	"fmt"
	"reflect"
	"sync"
	"time"
)

// Migration is the Store an application runs while it moves from one store
// (old) to another (new), built by Migrate. A claim looks the key up in the
// old store first: a key in flight there stays in flight, and a done one is
// answered from there and copied over. Otherwise the key is claimed in the
// new store, and marked in the old one under the same token, so that
// workers still running on the old store alone see it in flight, then
// done. docs/migrating.md says what it guarantees and what not.
type Migration struct {
	from, to Admin // the old store and the new one
	// markers holds the old store's fence of each claim's marker, by
	// markerKey, from the claim until its Complete or Release.
	markers sync.Map
}

var (
	_ Admin   = (*Migration)(nil)
	_ Pinger  = (*Migration)(nil)
	_ Watcher = (*Migration)(nil)
)

// Migrate returns the store to run while moving from the store from to the
// store to: a *TxMigration when to is a TxStore (so the middleware keeps
// its transactional mode), else a *Migration. Both stores must be Admins,
// for from is read by HashKey. It panics if either is nil or both are one
// store.
func Migrate(from, to Admin) Admin {
	if from == nil || to == nil {
		panic("store: Migrate expects two stores, got nil")
	}
	if t := reflect.TypeOf(from); t == reflect.TypeOf(to) && t.Comparable() && from == to {
		panic("store: Migrate expects two different stores, got one store twice")
	}
	m := &Migration{from: from, to: to}
	if tx, ok := to.(TxStore); ok {
		return &TxMigration{Migration: m, tx: tx}
	}
	return m
}

// Claim implements Store. A key done in the old store is not claimed: its
// record there is returned, copied into the new store first. A key in
// flight there is not claimed either unless the lease is the caller's (a
// claim sent again). Otherwise the key is claimed in the new store and
// marked in the old one (see mark); the lease and fence are the new
// store's.
func (m *Migration) Claim(ctx context.Context, key, fingerprint, token string, lease time.Duration) (Record, bool, error) {
	if token == "" {
		return Record{}, false, ErrEmptyToken
	}
	old, found, err := m.oldRecord(ctx, key, fingerprint)
	switch {
	case err != nil || found && old.State != StateInFlight:
		return old, false, err
	case found:
		if rec, mine, err := m.inFlightInOld(ctx, key, fingerprint, token, lease); err != nil || !mine {
			return rec, false, err
		}
	}
	rec, claimed, err := m.to.Claim(ctx, key, fingerprint, token, lease)
	if err != nil || !claimed {
		return rec, claimed, err
	}
	return m.mark(ctx, key, fingerprint, lease, rec, func(ctx context.Context) error {
		return m.to.Release(ctx, key, rec.Owner)
	})
}

// inFlightInOld reports whether key, in flight in the old store, is so
// under the caller's own marker (a claim sent again), which it then
// claims again. Otherwise it returns the record that answers the caller:
// the new store's if done there (the marker outlived its claim, whose
// Complete could not reach the old store), else the old store's.
func (m *Migration) inFlightInOld(ctx context.Context, key, fingerprint, token string, lease time.Duration) (Record, bool, error) {
	old, mine, err := m.from.Claim(ctx, key, fingerprint, token, lease)
	if err != nil || mine {
		return Record{}, mine, err
	}
	rec, found, err := m.to.Inspect(ctx, HashKey(key))
	if err != nil || found && rec.State != StateInFlight {
		return rec, false, err
	}
	return m.oldView(old, fingerprint), false, nil
}

// oldRecord returns key's live record in the old store, found false if it
// has none. A done record is copied into the new store before it is
// returned, so that the old store can be dropped once it holds no record
// the new one lacks.
func (m *Migration) oldRecord(ctx context.Context, key, fingerprint string) (Record, bool, error) {
	rec, found, err := m.from.Inspect(ctx, HashKey(key))
	if err != nil {
		return Record{}, false, fmt.Errorf("store: migrate: look in the old store: %w", err)
	}
	if found && rec.State != StateInFlight {
		if err := m.copyDone(ctx, key, rec); err != nil {
			return Record{}, false, err
		}
	}
	return m.oldView(rec, fingerprint), found, nil
}

// oldView returns rec, read from the old store, as a losing Claim returns
// it: without the owner's token, and an in-flight record without a
// fingerprint (held by an open transaction, whose row cannot be seen)
// with the caller's, as a TxStore's Claim reports it.
func (*Migration) oldView(rec Record, fingerprint string) Record {
	if rec.State == StateInFlight && rec.Fingerprint == "" {
		rec.Fingerprint = fingerprint
	}
	rec.Owner.Token = ""
	return rec
}

// copyLease is the lease of a copy's claim, which needs to outlast only
// the Complete sent right after it.
const copyLease = 10 * time.Second

// copyDone puts rec, a done record of key read from the old store, into
// the new store for the retention it has left, unless the new store holds
// key already (copied by another worker, being copied, or done there). The
// copy is claimed under a token of its own and completed at once; a failed
// copy is an error, so that the caller is answered 503 and retries rather
// than leave a record behind that only the old store holds.
func (m *Migration) copyDone(ctx context.Context, key string, rec Record) error {
	if rec.TTL <= 0 || rec.State == StateExpired {
		return nil // a tombstone is answered from the old store, not copied
	}
	copied, claimed, err := m.to.Claim(ctx, key, rec.Fingerprint, rand.Text(), copyLease)
	if err != nil {
		return fmt.Errorf("store: migrate: copy into the new store: %w", err)
	}
	if !claimed {
		return nil
	}
	if err := m.to.Complete(ctx, key, copied.Owner, rec.Response, rec.TTL); err != nil {
		// Left in flight, the copy would hold the key off for a lease.
		_ = m.to.Release(ctx, key, copied.Owner)
		return fmt.Errorf("store: migrate: copy into the new store: %w", err)
	}
	return nil
}

// Renew implements Store: it renews the new store's lease, then the
// marker's.
func (m *Migration) Renew(ctx context.Context, key string, owner Lease, lease time.Duration) error {
	if err := m.to.Renew(ctx, key, owner, lease); err != nil {
		return err
	}
	if marker, ok := m.marker(key, owner); ok {
		_ = m.from.Renew(ctx, key, marker, lease) // see markerDone
	}
	return nil
}

// Complete implements Store: it completes the new store's record, then
// the marker with the same response.
func (m *Migration) Complete(ctx context.Context, key string, owner Lease, resp *Response, retention time.Duration) error {
	err := m.to.Complete(ctx, key, owner, resp, retention)
	m.markerDone(key, owner, err, func(marker Lease) error {
		return m.from.Complete(ctx, key, marker, resp, retention)
	})
	return err
}

// Release implements Store: it releases the new store's record, then the
// marker.
func (m *Migration) Release(ctx context.Context, key string, owner Lease) error {
	err := m.to.Release(ctx, key, owner)
	m.markerDone(key, owner, err, func(marker Lease) error {
		return m.from.Release(ctx, key, marker)
	})
	return err
}
