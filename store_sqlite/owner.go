package sqlitestore

import (
	"context"
	"database/sql"
	"time"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/headercodec"
)

// The owner's statements change key ?1 only while it is in flight under
// token ?2 and fence ?3. Each sets sweep_at with expires_at.
var (
	renewSQL = onSQLiteClock(`
UPDATE idempotency_keys SET expires_at = NOW + ?4, sweep_at = NOW + ?4
WHERE key = ?1 AND token = ?2 AND fence = ?3 AND state = 1`)

	// completeSQL stores state ?4 and the response ?5-?7 for ?8 ms in
	// place of the steps. A row already done under ?2 and ?3 is rewritten
	// as it is, so that a Complete sent again counts one row.
	completeSQL = onSQLiteClock(`
UPDATE idempotency_keys
SET state = iif(state = 1, ?4, state), status = iif(state = 1, ?5, status),
    header = iif(state = 1, ?6, header), body = iif(state = 1, ?7, body), steps = iif(state = 1, NULL, steps),
    completed_at = iif(state = 1, NOW, completed_at),
    expires_at = iif(state = 1, NOW + ?8, expires_at), sweep_at = iif(state = 1, NOW + ?8, sweep_at)
WHERE key = ?1 AND token = ?2 AND fence = ?3`)

	// releaseSQL leaves the row in flight, so that the next claim takes it
	// over with a higher fence and its steps.
	releaseSQL = onSQLiteClock(`
UPDATE idempotency_keys SET token = X'', expires_at = NOW, sweep_at = NOW
WHERE key = ?1 AND token = ?2 AND fence = ?3 AND state = 1`)
)

// Renew implements store.Store. A lapsed lease not yet taken over or
// swept still holds the key.
func (s *Store) Renew(ctx context.Context, key string, owner store.Lease, lease time.Duration) error {
	return s.ownerExec(ctx, "renew", renewal, renewSQL, key, owner, lease.Milliseconds())
}

// Complete implements store.Store, with Renew's rule for a lapsed lease.
// It wakes this Store's watchers of key.
func (s *Store) Complete(ctx context.Context, key string, owner store.Lease, resp *store.Response, retention time.Duration) error {
	return s.endingExec(ctx, "complete", completeSQL, key, owner, completion(resp, retention)...)
}

// completion is completeSQL's arguments from ?4 on: resp (nil: not
// replayable) kept for retention.
func completion(resp *store.Response, retention time.Duration) []any {
	if resp == nil {
		return []any{int(store.StateUnreplayable), nil, nil, nil, retention.Milliseconds()}
	}
	return []any{int(store.StateCompleted), resp.Status, headercodec.Encode(resp.Header), resp.Body, retention.Milliseconds()}
}

// Release implements store.Store. It wakes this Store's watchers of key.
func (s *Store) Release(ctx context.Context, key string, owner store.Lease) error {
	return s.endingExec(ctx, "release", releaseSQL, key, owner)
}

// ownerExec runs an owner's statement. An empty token, which a released
// row keeps, is refused without a query.
func (s *Store) ownerExec(ctx context.Context, op string, k kind, sql, key string, owner store.Lease, args ...any) error {
	if owner.Token == "" {
		return store.ErrNotOwner
	}
	n, err := s.exec(ctx, op, k, sql, ownerArgs(key, owner, args)...)
	if err != nil {
		return err
	}
	if n == 0 {
		return store.ErrNotOwner
	}
	return nil
}

// ownerArgs is an owner's statement's arguments: key, token and fence,
// then args.
func ownerArgs(key string, owner store.Lease, args []any) []any {
	return append([]any{store.HashKey(key), []byte(owner.Token), owner.Fence}, args...)
}

// exec runs query in its turn (see write) and returns the rows it changed.
func (s *Store) exec(ctx context.Context, op string, k kind, query string, args ...any) (rows int64, err error) {
	err = s.write(ctx, op, k, func(conn *sql.Conn) error {
		res, err := conn.ExecContext(ctx, query, args...)
		if err == nil {
			rows, err = res.RowsAffected()
		}
		return err
	})
	return rows, err
}
