package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seed43327c4c/idempotency/store"
)

// claimSQL claims key $1 for fingerprint $2 under token $3 for a lease of
// $4 microseconds, in one statement and one round trip:
//
//   - inserted: the key is free, so the row is created (fence 1);
//   - taken: the row exists but has expired on the database's clock, so it
//     is taken over; an in-flight row's fence is raised, a finished row past
//     its retention starts again at 1;
//   - otherwise the existing row is read and nothing changes.
//
// All three parts see one snapshot taken when the statement starts, and
// none sees the others' writes, which decides two races:
//
//   - Two claims of one expired row: both UPDATEs find it, one locks it
//     first and commits; the other then re-checks its WHERE against the
//     committed row, which is no longer expired, and updates nothing. Its
//     fallback SELECT still shows the old, expired row from the snapshot.
//   - A row inserted by a claim that commits after this statement's
//     snapshot: ON CONFLICT waits for it and does nothing, yet neither the
//     UPDATE nor the SELECT can see the row, so no row is returned.
//
// Both cases (an expired row returned unclaimed, or no row at all) mean the
// snapshot is stale; Claim runs the statement again with a fresh one.
const claimSQL = `
WITH inserted AS (
    INSERT INTO idempotency_keys AS t (key, fingerprint, state, token, fence, expires_at)
    VALUES ($1, $2, 1, $3, 1, statement_timestamp() + $4::bigint * interval '1 microsecond')
    ON CONFLICT (key) DO NOTHING
    RETURNING t.state, t.fingerprint, t.fence, t.status, t.header, t.body, t.expires_at
), taken AS (
    UPDATE idempotency_keys AS t
    SET fingerprint = $2, state = 1, token = $3,
        fence = CASE WHEN t.state = 1 THEN t.fence + 1 ELSE 1 END,
        status = NULL, header = NULL, body = NULL,
        expires_at = statement_timestamp() + $4::bigint * interval '1 microsecond'
    WHERE t.key = $1 AND t.expires_at <= statement_timestamp()
      AND NOT EXISTS (SELECT FROM inserted)
    RETURNING t.state, t.fingerprint, t.fence, t.status, t.header, t.body, t.expires_at
)
SELECT r.claimed, r.state, r.fingerprint, r.fence, r.status, r.header, r.body,
       (extract(epoch FROM r.expires_at - statement_timestamp()) * 1000000)::bigint
FROM (
    SELECT true AS claimed, * FROM inserted
    UNION ALL
    SELECT true, * FROM taken
    UNION ALL
    SELECT false, t.state, t.fingerprint, t.fence, t.status, t.header, t.body, t.expires_at
    FROM idempotency_keys AS t
    WHERE t.key = $1 AND NOT EXISTS (SELECT FROM inserted) AND NOT EXISTS (SELECT FROM taken)
) AS r`

// claimAttempts bounds how often Claim re-runs its statement after seeing a
// stale snapshot. Each re-run follows a commit by another claim of the same
// key, so more than two are rare.
const claimAttempts = 10

// errStaleSnapshot means the claim statement ran on a snapshot that a
// concurrent commit made stale, and must run again.
var errStaleSnapshot = errors.New("snapshot made stale by a concurrent commit on the same key")

// Claim implements store.Store. It costs one round trip, and one more for
// each concurrent commit on the same key that makes its snapshot stale (see
// claimSQL). The lease is counted in whole microseconds from the database's
// statement_timestamp(). A record past its retention counts as absent: it
// is overwritten by the claim, with fence 1.
func (s *Store) Claim(ctx context.Context, key, fingerprint, token string, lease time.Duration) (store.Record, bool, error) {
	for range claimAttempts {
		rec, claimed, err := s.claimOnce(ctx, key, fingerprint, token, lease)
		if errors.Is(err, errStaleSnapshot) {
			continue
		}
		if err != nil {
			return store.Record{}, false, fmt.Errorf("pgstore: claim: %w", err)
		}
		return rec, claimed, nil
	}
	return store.Record{}, false, fmt.Errorf("pgstore: claim: %w %d times in a row", errStaleSnapshot, claimAttempts)
}

func (s *Store) claimOnce(ctx context.Context, key, fingerprint, token string, lease time.Duration) (store.Record, bool, error) {
	var (
		claimed bool
		state   int16
		fp      []byte
		fence   int64
		status  *int32
		header  [][]byte
		body    []byte
		ttl     int64
	)
	err := s.retry(ctx, func() error {
		return s.db.QueryRow(ctx, s.sql.claim, []byte(key), []byte(fingerprint), []byte(token), lease.Microseconds()).
			Scan(&claimed, &state, &fp, &fence, &status, &header, &body, &ttl)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Record{}, false, errStaleSnapshot
	}
	if err != nil {
		return store.Record{}, false, err
	}
	if !claimed && ttl <= 0 {
		return store.Record{}, false, errStaleSnapshot
	}
	rec := store.Record{
		State:       store.State(state),
		Fingerprint: string(fp),
		Owner:       store.Lease{Fence: fence},
		TTL:         time.Duration(ttl) * time.Microsecond,
	}
	if claimed {
		rec.Owner.Token = token
	}
	if rec.State == store.StateCompleted && status != nil {
		rec.Response = &store.Response{Status: int(*status), Header: decodeHeader(header), Body: body}
	}
	return rec, claimed, nil
}
