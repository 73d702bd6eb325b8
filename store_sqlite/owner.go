package sqlitestore

import (
	"context"
	"database/sql"
	"time"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/headercodec"
)

// The owner's statements touch key ?1 only while it is in flight under
// token ?2 and fence ?3; a row count of zero means the caller no longer
// holds it (or, but for completeSQL, completed it). Each sets sweep_at to
// the new expires_at, for the sweeper.
var (
	// renewSQL extends the lease to ?4 milliseconds from now.
	renewSQL = onSQLiteClock(`
UPDATE idempotency_keys SET expires_at = NOW + ?4, sweep_at = NOW + ?4
WHERE key = ?1 AND token = ?2 AND fence = ?3 AND state = 1`)

	// completeSQL stores state ?4 and the response (?5 status, ?6 header,
	// ?7 body, all NULL when not replayable) for ?8 milliseconds. A row
	// already done under token ?2 and fence ?3 (a Complete sent again
	// after its reply was lost) is written as it is, and so counts as one
	// row, unchanged.
	completeSQL = onSQLiteClock(`
UPDATE idempotency_keys
SET state = iif(state = 1, ?4, state), status = iif(state = 1, ?5, status),
    header = iif(state = 1, ?6, header), body = iif(state = 1, ?7, body),
    expires_at = iif(state = 1, NOW + ?8, expires_at), sweep_at = iif(state = 1, NOW + ?8, sweep_at)
WHERE key = ?1 AND token = ?2 AND fence = ?3`)

	// releaseSQL ends the lease now and clears the token. The row stays in
	// flight, so the next claim takes it over with a higher fence, until
	// the sweeper removes it (see WithAbandonedRetention).
	releaseSQL = onSQLiteClock(`
UPDATE idempotency_keys SET token = X'', expires_at = NOW, sweep_at = NOW
WHERE key = ?1 AND token = ?2 AND fence = ?3 AND state = 1`)
)

// Renew implements store.Store: one UPDATE. The lease is counted from
// SQLite's clock. A lease that has lapsed but was neither taken over nor
// swept is still the owner's and may be renewed.
func (s *Store) Renew(ctx context.Context, key string, owner store.Lease, lease time.Duration) error {
	return s.ownerExec(ctx, "renew", renewal, renewSQL, key, owner, lease.Milliseconds())
}

// Complete implements store.Store: one UPDATE. The retention is counted
// from SQLite's clock. A lease that has lapsed but was neither taken over
// nor swept is still the owner's and may be completed; a row the owner
// completed already is left as it is, and Complete returns nil. It wakes
// the store's watchers of key (see Watch).
func (s *Store) Complete(ctx context.Context, key string, owner store.Lease, resp *store.Response, retention time.Duration) error {
	if resp == nil {
		return s.endingExec(ctx, "complete", completeSQL, key, owner,
			int(store.StateUnreplayable), nil, nil, nil, retention.Milliseconds())
	}
	return s.endingExec(ctx, "complete", completeSQL, key, owner,
		int(store.StateCompleted), resp.Status, headercodec.Encode(resp.Header), resp.Body, retention.Milliseconds())
}

// Release implements store.Store: one UPDATE. The row is not deleted: it
// stays in flight with its lease ended and no token, so the next claim
// takes the key over with a higher fencing number than the releasing
// owner's, until the sweeper removes the row after the abandoned retention
// (see WithAbandonedRetention). It wakes the store's watchers of key (see
// Watch).
func (s *Store) Release(ctx context.Context, key string, owner store.Lease) error {
	return s.endingExec(ctx, "release", releaseSQL, key, owner)
}

// ownerExec runs one of the owner's statements for owner's lease of key,
// with the statement's own arguments after ?1 to ?3. An empty token holds
// nothing: a released row keeps an empty one, so such a lease is refused
// without asking the database.
func (s *Store) ownerExec(ctx context.Context, op string, k kind, sql, key string, owner store.Lease, args ...any) error {
	if owner.Token == "" {
		return store.ErrNotOwner
	}
	args = append([]any{store.HashKey(key), []byte(owner.Token), owner.Fence}, args...)
	n, err := s.exec(ctx, op, k, sql, args...)
	if err != nil {
		return err
	}
	if n == 0 {
		return store.ErrNotOwner
	}
	return nil
}

// exec runs query, a statement of kind k, in its turn (see write), and
// returns how many rows it changed. Errors are wrapped for op.
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
