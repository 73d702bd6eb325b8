package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/headercodec"
)

// Renew implements store.Store. A lapsed lease neither taken over nor
// swept is still the owner's.
func (s *Store) Renew(ctx context.Context, key string, owner store.Lease, lease time.Duration) error {
	return s.ownerExec(ctx, "renew", s.sql.renew, key, owner, stillInFlight, lease.Microseconds())
}

// Complete implements store.Store: one UPDATE, one round trip. The
// retention is counted on the server's UTC clock. A lease that has lapsed
// but was neither taken over nor swept is still the owner's and may be
// completed; a row the owner completed already is left as it is, and
// Complete returns nil.
func (s *Store) Complete(ctx context.Context, key string, owner store.Lease, resp *store.Response, retention time.Duration) error {
	return s.ownerExec(ctx, "complete", s.sql.complete, key, owner, alreadyDone, completion(resp, retention)...)
}

// completion is what completeSQL sets for resp, in its order.
func completion(resp *store.Response, retention time.Duration) []any {
	if resp == nil {
		return []any{int(store.StateUnreplayable), nil, nil, nil, retention.Microseconds()}
	}
	body := resp.Body
	if body == nil {
		body = []byte{}
	}
	return []any{int(store.StateCompleted), resp.Status, headercodec.Encode(resp.Header), body, retention.Microseconds()}
}

// Release implements store.Store. The row stays, in flight with its lease
// ended, so that the next claim gets a higher fencing number, until the
// sweeper removes it (see WithAbandonedRetention).
func (s *Store) Release(ctx context.Context, key string, owner store.Lease) error {
	return s.ownerExec(ctx, "release", s.sql.release, key, owner, never)
}

// unchanged says which rows an owner statement that changed none may have
// found its own: the row may be still in flight (a renewal within the same
// microsecond changes no value, and a DSN without clientFoundRows counts
// it as no row), or already done (a Complete sent again).
type unchanged int

const (
	never unchanged = iota
	stillInFlight
	alreadyDone
)

// ownerExec runs one of the owner's statements, set being the values of
// its SET. An empty token, which a released row keeps, is refused without
// asking the server.
func (s *Store) ownerExec(ctx context.Context, op string, stmt *prepared, key string, owner store.Lease, ok unchanged, set ...any) error {
	if owner.Token == "" {
		return store.ErrNotOwner
	}
	row := rowKey(key)
	res, err := stmt.exec(ctx, append(set, row, []byte(owner.Token), owner.Fence)...)
	var n int64
	if err == nil {
		n, err = res.RowsAffected()
	}
	if err == nil && n == 0 {
		err = s.owns(ctx, row, owner, ok)
	}
	if err != nil && !errors.Is(err, store.ErrNotOwner) {
		return fmt.Errorf("mysqlstore: %s: %w", op, explain(err))
	}
	return err
}

// owns returns nil if owner's row is as ok says, store.ErrNotOwner if not.
func (s *Store) owns(ctx context.Context, row []byte, owner store.Lease, ok unchanged) error {
	if ok == never {
		return store.ErrNotOwner
	}
	var state, held int
	r, err := s.sql.owned.queryRow(ctx, row, []byte(owner.Token), owner.Fence)
	if err == nil {
		err = r.Scan(&state, &held)
	}
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return store.ErrNotOwner
	case err != nil:
		return err
	case ok == stillInFlight && state == int(store.StateInFlight) && held == 0,
		ok == alreadyDone && state != int(store.StateInFlight):
		return nil
	}
	return store.ErrNotOwner
}
