package store

import (
	"context"
	"crypto/rand"
	"fmt"
	"reflect"
	"time"
)

// Migration is the Store an application runs while it moves from one store
// (old) to another (new), built by Migrate. Claims live in the new store
// only: a claim first looks the key up in the old one, so that a key in
// flight there stays in flight and a done one is answered from there and
// copied over. docs/migrating.md says what it guarantees and what not.
type Migration struct {
	old, new Admin
}

var (
	_ Admin   = (*Migration)(nil)
	_ Pinger  = (*Migration)(nil)
	_ Watcher = (*Migration)(nil)
)

// Migrate returns the store to run while moving from old to new: a
// *TxMigration when new is a TxStore (so the middleware keeps its
// transactional mode), else a *Migration. Both stores must be Admins, for
// the old one is read by HashKey. It panics if either is nil or both are
// one store.
func Migrate(old, new Admin) Admin {
	if old == nil || new == nil {
		panic("store: Migrate expects two stores, got nil")
	}
	if t := reflect.TypeOf(old); t == reflect.TypeOf(new) && t.Comparable() && old == new {
		panic("store: Migrate expects two different stores, got one store twice")
	}
	m := &Migration{old: old, new: new}
	if tx, ok := new.(TxStore); ok {
		return &TxMigration{Migration: m, tx: tx}
	}
	return m
}

// Claim implements Store. A key live in the old store is not claimed: its
// record there is returned (in flight, or done and first copied into the
// new store). Otherwise the key is claimed in the new store, and the old
// one is looked at again (see recheck).
func (m *Migration) Claim(ctx context.Context, key, fingerprint, token string, lease time.Duration) (Record, bool, error) {
	if token == "" {
		return Record{}, false, ErrEmptyToken
	}
	if rec, found, err := m.oldRecord(ctx, key, fingerprint); err != nil || found {
		return rec, false, err
	}
	rec, claimed, err := m.new.Claim(ctx, key, fingerprint, token, lease)
	if err != nil || !claimed {
		return rec, claimed, err
	}
	return m.recheck(ctx, key, fingerprint, rec, func(ctx context.Context) error {
		return m.new.Release(ctx, key, rec.Owner)
	})
}

// recheck looks at key in the old store again after the new store gave
// claimed to the caller. A record found there now was written by a worker
// still running on the old store alone (one found before would have been
// found by the first look): the claim is undone with undo and that record
// returned, unclaimed. Otherwise claimed is returned as it is.
func (m *Migration) recheck(ctx context.Context, key, fingerprint string, claimed Record,
	undo func(context.Context) error,
) (Record, bool, error) {
	rec, found, err := m.oldRecord(ctx, key, fingerprint)
	if err == nil && !found {
		return claimed, true, nil
	}
	if undoErr := undo(ctx); undoErr != nil && err == nil {
		err = fmt.Errorf("store: migrate: undo the new store's claim: %w", undoErr)
	}
	return rec, false, err
}

// oldRecord returns key's live record in the old store, found false if it
// has none. A done record is copied into the new store before it is
// returned, so that the old store can be dropped once it holds no record
// the new one lacks. An in-flight record without a fingerprint (held by an
// open transaction, whose row cannot be seen) is given the caller's, as a
// TxStore's Claim reports it.
func (m *Migration) oldRecord(ctx context.Context, key, fingerprint string) (Record, bool, error) {
	rec, found, err := m.old.Inspect(ctx, HashKey(key))
	if err != nil {
		return Record{}, false, fmt.Errorf("store: migrate: look in the old store: %w", err)
	}
	switch {
	case !found:
		return Record{}, false, nil
	case rec.State == StateInFlight && rec.Fingerprint == "":
		rec.Fingerprint = fingerprint
	case rec.State != StateInFlight:
		if err := m.copyDone(ctx, key, rec); err != nil {
			return Record{}, false, err
		}
	}
	rec.Owner.Token = ""
	return rec, true, nil
}

// copyLease is the lease of a copy's claim, which needs to outlast only
// the Complete sent right after it.
const copyLease = 10 * time.Second

// copyDone puts rec, a done record of key read from the old store, into
// the new store for the retention it has left, unless the new store holds
// key already (copied by another worker, or being copied). The copy is
// claimed under a token of its own and completed at once; a failed copy
// is an error, so that the caller is answered 503 and retries rather than
// leave a record behind that only the old store holds.
func (m *Migration) copyDone(ctx context.Context, key string, rec Record) error {
	if rec.TTL <= 0 {
		return nil
	}
	copied, claimed, err := m.new.Claim(ctx, key, rec.Fingerprint, rand.Text(), copyLease)
	if err != nil {
		return fmt.Errorf("store: migrate: copy into the new store: %w", err)
	}
	if !claimed {
		return nil
	}
	if err := m.new.Complete(ctx, key, copied.Owner, rec.Response, rec.TTL); err != nil {
		// Left in flight, the copy would hold the key off for a lease.
		_ = m.new.Release(ctx, key, copied.Owner)
		return fmt.Errorf("store: migrate: copy into the new store: %w", err)
	}
	return nil
}

// Renew implements Store: the lease is the new store's.
func (m *Migration) Renew(ctx context.Context, key string, owner Lease, lease time.Duration) error {
	return m.new.Renew(ctx, key, owner, lease)
}

// Complete implements Store: the lease is the new store's.
func (m *Migration) Complete(ctx context.Context, key string, owner Lease, resp *Response, retention time.Duration) error {
	return m.new.Complete(ctx, key, owner, resp, retention)
}

// Release implements Store: the lease is the new store's.
func (m *Migration) Release(ctx context.Context, key string, owner Lease) error {
	return m.new.Release(ctx, key, owner)
}
