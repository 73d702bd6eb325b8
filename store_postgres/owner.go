package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/seed43327c4c/idempotency/store"
)

// The owner's statements touch key $1 only while it is in flight under
// token $2 and fence $3; no row means the caller no longer holds it (or,
// but for completeSQL, completed it). They take no advisory lock, which
// cannot tell a TxStore's takeover of a stale owner's row from a
// transactional duplicate that only looked at it: the stale owner waits
// for the takeover's transaction to end instead.
const (
	renewSQL = `
UPDATE idempotency_keys
SET expires_at = statement_timestamp() + $4::bigint * interval '1 microsecond'
WHERE key = $1 AND token = $2 AND fence = $3 AND state = 1`

	// completeSQL stores state $4 and the response ($5 status, $6 header,
	// $7 body, all NULL when not replayable) for $8 microseconds in place
	// of the steps, notes when it completed, and wakes the key's watchers (see wakeSQL).
	completeSQL = `
WITH done AS (
    UPDATE idempotency_keys
    SET state = $4, status = $5, header = $6, body = $7, steps = NULL, completed_at = statement_timestamp(),
        expires_at = statement_timestamp() + $8::bigint * interval '1 microsecond'
    WHERE key = $1 AND token = $2 AND fence = $3 AND state = 1
    RETURNING key
)` + wakeSQL

	// completedSQL finds key $1 done under token $2 and fence $3: a
	// Complete sent again after its reply was lost.
	completedSQL = `SELECT FROM idempotency_keys WHERE key = $1 AND token = $2 AND fence = $3 AND state <> 1`

	// releaseSQL ends the lease and clears the token. The row stays in
	// flight, so the next claim takes it over with a higher fence and its
	// steps.
	releaseSQL = `
WITH done AS (
    UPDATE idempotency_keys
    SET token = '', expires_at = statement_timestamp()
    WHERE key = $1 AND token = $2 AND fence = $3 AND state = 1
    RETURNING key
)` + wakeSQL
)

// Renew implements store.Store. A lapsed lease neither taken over nor
// swept is still the owner's.
func (s *Store) Renew(ctx context.Context, key string, owner store.Lease, lease time.Duration) error {
	return s.ownerExec(ctx, "renew", s.sql.renew, key, owner, lease.Microseconds())
}

// Complete implements store.Store: one UPDATE, one round trip, which also
// wakes the key's watchers (see Watch). The retention is counted from the
// database's statement_timestamp(). A lease that has lapsed but was
// neither taken over nor swept is still the owner's and may be completed;
// a row the owner completed already is left as it is, and Complete
// returns nil (after a second round trip that finds it).
func (s *Store) Complete(ctx context.Context, key string, owner store.Lease, resp *store.Response, retention time.Duration) error {
	if owner.Token == "" {
		return store.ErrNotOwner
	}
	state, status, header, body := completion(resp)
	call := &completeCall{args: []any{rowKey(key), []byte(owner.Token), owner.Fence,
		int16(state), status, header, body, retention.Microseconds()}}
	err := s.completes.Do(ctx, call)
	if err == nil {
		err = call.err
	}
	switch {
	case err != nil:
		return fmt.Errorf("pgstore: complete: %w", err)
	case call.found:
		return nil
	}
	return s.ownerExec(ctx, "complete", s.sql.completed, key, owner)
}

// completion is what completeSQL stores for resp.
func completion(resp *store.Response) (state store.State, status *int32, header [][]byte, body []byte) {
	if resp == nil {
		return store.StateUnreplayable, nil, nil, nil
	}
	code := int32(resp.Status)
	return store.StateCompleted, &code, encodeHeader(resp.Header), resp.Body
}

// Release implements store.Store. The row stays, in flight with its lease
// ended, so that the next claim gets a higher fencing number, until the
// sweeper removes it (see WithAbandonedRetention).
func (s *Store) Release(ctx context.Context, key string, owner store.Lease) error {
	return s.ownerExec(ctx, "release", s.sql.release, key, owner)
}

// ownerExec runs one of the owner's statements, args after $1 to $3. An
// empty token, which a released row keeps, is refused without asking the
// database.
func (s *Store) ownerExec(ctx context.Context, op, sql, key string, owner store.Lease, args ...any) error {
	if owner.Token == "" {
		return store.ErrNotOwner
	}
	args = append([]any{rowKey(key), []byte(owner.Token), owner.Fence}, args...)
	var tag pgconn.CommandTag
	err := s.retry(ctx, func() (err error) {
		tag, err = s.db.Exec(ctx, sql, args...)
		return err
	})
	if err != nil {
		return fmt.Errorf("pgstore: %s: %w", op, err)
	}
	if tag.RowsAffected() == 0 {
		return store.ErrNotOwner
	}
	return nil
}
