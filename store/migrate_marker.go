package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// mark marks key, just claimed in the new store as claimed, in the old
// store: a claim there under the same token and lease. A worker still
// running on the old store alone then finds the key in flight, and once
// the claim is done, done. If the old store holds the key already (such a
// worker took it since the first look), the new store's claim is undone
// with undo and the old store's record returned, unclaimed.
func (m *Migration) mark(ctx context.Context, key, fingerprint string, lease time.Duration, claimed Record,
	undo func(context.Context) error,
) (Record, bool, error) {
	rec, held, err := m.from.Claim(ctx, key, fingerprint, claimed.Owner.Token, lease)
	if err == nil && held {
		m.markers.Store(markerKey(key, claimed.Owner), rec.Owner.Fence)
		return claimed, true, nil
	}
	if err != nil {
		err = fmt.Errorf("store: migrate: mark the old store: %w", err)
	} else if rec.State != StateInFlight {
		err = m.copyDone(ctx, key, rec)
	}
	if undoErr := undo(ctx); undoErr != nil && err == nil {
		err = fmt.Errorf("store: migrate: undo the new store's claim: %w", undoErr)
	}
	return m.oldView(rec, fingerprint), false, err
}

// markerKey names owner's marker of key in markers.
func markerKey(key string, owner Lease) string {
	return owner.Token + "\x00" + strconv.FormatInt(owner.Fence, 10) + "\x00" + key
}

// marker returns owner's marker of key in the old store, ok false if this
// Migration holds none.
func (m *Migration) marker(key string, owner Lease) (Lease, bool) {
	fence, ok := m.markers.Load(markerKey(key, owner))
	if !ok {
		return Lease{}, false
	}
	return Lease{Token: owner.Token, Fence: fence.(int64)}, true
}

// markerDone ends owner's marker of key with end once the new store's
// call has ended the claim (err nil), and forgets it then or when the
// claim was not owner's (ErrNotOwner); after another error the caller may
// send the call again. The marker's own errors are not the caller's: a
// marker left in flight lapses with its lease, and the new store's record
// alone decides the key's outcome.
func (m *Migration) markerDone(key string, owner Lease, err error, end func(marker Lease) error) {
	marker, ok := m.marker(key, owner)
	switch {
	case !ok:
		return
	case err == nil:
		_ = end(marker)
	case !errors.Is(err, ErrNotOwner):
		return
	}
	m.markers.Delete(markerKey(key, owner))
}

// txMarkerLease is the lease of a TxMigration's markers: a transaction's
// claim has no lease of its own and is never renewed.
const txMarkerLease = time.Minute

// markedTx is a claim held by the new store's open transaction and marked
// in the old store, whose marker it ends with the transaction.
type markedTx struct {
	Tx
	m      *Migration
	key    string
	marker Lease
}

// Commit implements Tx, completing the marker after a commit. A marker of
// a failed commit is left to lapse, since the commit may have gone through
// if the connection was lost during it.
func (t *markedTx) Commit(ctx context.Context, resp *Response, retention time.Duration) error {
	if err := t.Tx.Commit(ctx, resp, retention); err != nil {
		return err
	}
	_ = t.m.from.Complete(ctx, t.key, t.marker, resp, retention) // see markerDone
	return nil
}

// Rollback implements Tx, releasing the marker.
func (t *markedTx) Rollback(ctx context.Context) error {
	err := t.Tx.Rollback(ctx)
	_ = t.m.from.Release(ctx, t.key, t.marker) // see markerDone
	return err
}
