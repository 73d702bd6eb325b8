package pgstore

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/seed43327c4c/idempotency/store"
)

// claimSQL claims key $1 for fingerprint $2 under token $3 for a lease of
// $4 microseconds, in one statement. The key's advisory lock number is the
// table's OID in the high 32 bits XOR $5 (lockHash), the same however a
// process names the table; $6 takes it exclusively (a TxStore's claim,
// held until its transaction ends) or shared (Claim).
//
// "Guard" tries the lock without waiting; without it the claim only reads
// the committed row. "Inserted" creates a free key's row, "Taken" takes
// over an expired one (raising an in-flight row's fence, and keeping its
// steps for a claim of the same request); otherwise the row is read, and a
// plain claim under the live owner's token reports it claimed again. Only
// a claim gets the row's steps.
//
// The guard is a materialised CTE that the INSERT and the UPDATE read
// before they look at a row, so no claim ever waits on a transactional
// claim's uncommitted row (as ON CONFLICT and UPDATE would) without the
// lock. The statement always returns one row: held, and NULLs when no row
// was claimed or read.
//
// All parts see one snapshot and none sees the others' writes. So two
// claims of one expired row both find it; the loser re-checks its WHERE
// against the winner's committed row and updates nothing, while its SELECT
// still shows the expired row. And a row a plain claim committed after the
// snapshot makes ON CONFLICT do nothing while neither the UPDATE nor the
// SELECT sees it: no row. With the lock held, either outcome (an expired
// row unclaimed, or no row) means the snapshot is stale, and the statement
// runs again.
//
// A read row's time left is counted from clock_timestamp(), later than the
// snapshot; statement_timestamp() is taken before it, and a claim that
// committed in between would show more time left than its lease. The WITH
// queries' mixed-case names are ones no table WithTable accepts can have.
const claimSQL = `
WITH "Guard" AS MATERIALIZED (
    SELECT CASE WHEN $6::boolean THEN pg_try_advisory_xact_lock(lock.number)
                ELSE pg_try_advisory_xact_lock_shared(lock.number) END AS held
    FROM (SELECT ` + claimLockSQL + `$5::bigint AS number) AS lock
), "Inserted" AS (
    INSERT INTO idempotency_keys AS t (key, fingerprint, state, token, fence, expires_at)
    SELECT $1::bytea, $2::bytea, 1, $3::bytea, 1, statement_timestamp() + $4::bigint * interval '1 microsecond'
    FROM "Guard" WHERE "Guard".held
    ON CONFLICT (key) DO NOTHING
    RETURNING t.state, t.fingerprint, t.fence, t.status, t.header, t.body, t.expires_at, t.steps, t.completed_at
), "Taken" AS (
    UPDATE idempotency_keys AS t
    SET fingerprint = $2, state = 1, token = $3,
        fence = CASE WHEN t.state = 1 THEN t.fence + 1 ELSE 1 END,
        status = NULL, header = NULL, body = NULL,
        steps = CASE WHEN t.state = 1 AND t.fingerprint = $2 THEN t.steps END, completed_at = NULL,
        expires_at = statement_timestamp() + $4::bigint * interval '1 microsecond'
    WHERE t.key = $1 AND ` + rowEndSQL + ` <= statement_timestamp()
      AND (SELECT held FROM "Guard") AND NOT EXISTS (SELECT FROM "Inserted")
    RETURNING t.state, t.fingerprint, t.fence, t.status, t.header, t.body, t.expires_at, t.steps, t.completed_at
)
SELECT "Guard".held, coalesce(r.claimed, false) AS claimed, coalesce(r.state, 0) AS state,
       r.fingerprint, coalesce(r.fence, 0) AS fence, r.status, r.header, r.body,
       CASE WHEN r.claimed THEN r.steps END AS steps, r.completed_at,
       coalesce((extract(epoch FROM r.expires_at - CASE WHEN r.claimed THEN statement_timestamp()
                                                         ELSE clock_timestamp() END) * 1000000)::bigint, 0) AS ttl
FROM "Guard" LEFT JOIN (
    SELECT true AS claimed, * FROM "Inserted"
    UNION ALL
    SELECT true, * FROM "Taken"
    UNION ALL
    SELECT NOT $6::boolean AND t.state = 1 AND t.token = $3::bytea AND t.expires_at > statement_timestamp(),
           ` + rowStateSQL + `, t.fingerprint, t.fence, t.status, t.header, t.body, ` + rowEndSQL + `, t.steps, t.completed_at
    FROM idempotency_keys AS t
    WHERE t.key = $1 AND NOT EXISTS (SELECT FROM "Inserted") AND NOT EXISTS (SELECT FROM "Taken")
) AS r ON true`

// claimLockSQL, followed by a lockHash parameter, is a key's advisory lock.
const claimLockSQL = `('idempotency_keys'::regclass::oid::bigint << 32) # `

// staleAttempts bounds how often a statement runs again because a
// concurrent commit on the same row made its snapshot stale.
const staleAttempts = 10

// errStaleSnapshot means the claim statement must run again on a fresh
// snapshot: under read committed it notices that itself (see claimSQL);
// under repeatable read or serializable the server aborts it with a
// serialization failure instead.
var errStaleSnapshot = errors.New("snapshot made stale by a concurrent commit on the same key")

// claimNewSQL claims key $1, if it has no row, for fingerprint $2 under
// token $3 for a lease of $4 microseconds; its lock number is claimSQL's
// ($5). It is claimSQL's "Inserted" alone, the whole work of a first
// request: with the shared lock held, no transaction holds the key, so ON
// CONFLICT waits at most for a plain claim's statement.
const claimNewSQL = `
INSERT INTO idempotency_keys (key, fingerprint, state, token, fence, expires_at)
SELECT $1::bytea, $2::bytea, 1, $3::bytea, 1, statement_timestamp() + $4::bigint * interval '1 microsecond'
WHERE pg_try_advisory_xact_lock_shared(` + claimLockSQL + `$5::bigint)
ON CONFLICT (key) DO NOTHING`

// claimLiveSQL reads key $1's row while it is live, and whether it is in
// flight under token $2 (with its steps then): claimSQL's read, without
// the lock. A row it does not return is left to claimSQL.
const claimLiveSQL = `
SELECT ` + rowStateSQL + `, t.fingerprint, t.fence, t.status, t.header, t.body, t.state = 1 AND t.token = $2::bytea,
       CASE WHEN t.state = 1 AND t.token = $2::bytea THEN t.steps END, t.completed_at,
       (extract(epoch FROM ` + rowEndSQL + ` - clock_timestamp()) * 1000000)::bigint
FROM idempotency_keys AS t
WHERE t.key = $1 AND ` + rowEndSQL + ` > statement_timestamp()`

// Claim implements store.Store. A new key costs one round trip
// (claimNewSQL), a live one two (claimLiveSQL); anything else (an expired
// row to take over, a key an open transaction holds) runs claimSQL, which
// takes one more for each concurrent commit that makes its snapshot stale.
// The lease is counted in whole microseconds on the database's clock. A
// key held by an open transaction is reported in flight at once, with TTL
// 0 and the caller's own fingerprint, since the holder's row cannot be
// seen.
func (s *Store) Claim(ctx context.Context, key, fingerprint, token string, lease time.Duration) (store.Record, bool, error) {
	if token == "" {
		return store.Record{}, false, fmt.Errorf("pgstore: claim: %w", store.ErrEmptyToken)
	}
	if err := s.requireCurrent(ctx); err != nil {
		return store.Record{}, false, fmt.Errorf("pgstore: claim: %w", err)
	}
	row := rowKey(key)
	call := &newClaimCall{row: row, fingerprint: []byte(fingerprint), token: []byte(token), leaseUs: lease.Microseconds()}
	err := s.newClaims.Do(ctx, call)
	if err == nil {
		err = call.err
	}
	if err != nil {
		return store.Record{}, false, fmt.Errorf("pgstore: claim: %w", err)
	}
	if call.inserted {
		rec := store.Record{State: store.StateInFlight, Fingerprint: fingerprint, Owner: store.Lease{Token: token, Fence: 1},
			TTL: lease.Truncate(time.Microsecond)}
		return rec, true, nil
	}
	var (
		rec     store.Record
		claimed bool
		live    bool
	)
	err = s.retry(ctx, func() (err error) {
		rec, claimed, live, err = s.readLive(ctx, row, token)
		return err
	})
	if err != nil {
		return store.Record{}, false, fmt.Errorf("pgstore: claim: %w", err)
	}
	if live {
		return rec, claimed, nil
	}
	return s.claimAny(ctx, key, fingerprint, token, lease)
}

// readLive runs claimLiveSQL; live is false when it found no live row.
func (s *Store) readLive(ctx context.Context, row []byte, token string) (rec store.Record, claimed, live bool, err error) {
	var r claimRow
	err = s.db.QueryRow(ctx, s.sql.claimLive, row, []byte(token)).
		Scan(&r.state, &r.fingerprint, &r.fence, &r.status, &r.header, &r.body, &r.claimed, &r.steps, &r.completed, &r.ttl)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return store.Record{}, false, false, nil
	case err != nil:
		return store.Record{}, false, false, err
	case r.ttl <= 0: // lapsed since the statement began
		return store.Record{}, false, false, nil
	}
	rec, err = r.record(token)
	return rec, r.claimed, err == nil, err
}

// claimAny is Claim by claimSQL alone.
func (s *Store) claimAny(ctx context.Context, key, fingerprint, token string, lease time.Duration) (store.Record, bool, error) {
	for range staleAttempts {
		var (
			rec     store.Record
			claimed bool
		)
		err := s.retry(ctx, func() (err error) {
			rec, claimed, err = s.claimOnce(ctx, s.db, key, fingerprint, token, lease, false)
			return err
		})
		if errors.Is(err, errStaleSnapshot) {
			continue
		}
		if err != nil {
			return store.Record{}, false, fmt.Errorf("pgstore: claim: %w", err)
		}
		return rec, claimed, nil
	}
	return store.Record{}, false, fmt.Errorf("pgstore: claim: %w %d times in a row", errStaleSnapshot, staleAttempts)
}

// claimOnce runs claimSQL once on db; errStaleSnapshot means run it again.
func (s *Store) claimOnce(ctx context.Context, db querier, key, fingerprint, token string, lease time.Duration, exclusive bool) (store.Record, bool, error) {
	var (
		held bool
		r    claimRow
	)
	row := rowKey(key)
	err := db.QueryRow(ctx, s.sql.claim, row, []byte(fingerprint), []byte(token), lease.Microseconds(),
		lockHash(row), exclusive).
		Scan(&held, &r.claimed, &r.state, &r.fingerprint, &r.fence, &r.status, &r.header, &r.body, &r.steps, &r.completed, &r.ttl)
	if serializationFailure(err) {
		return store.Record{}, false, errStaleSnapshot
	}
	if err != nil {
		return store.Record{}, false, err
	}
	live := r.state != 0 && r.ttl > 0
	switch {
	case !r.claimed && !live && held:
		return store.Record{}, false, errStaleSnapshot
	case !r.claimed && !live:
		// An open transaction holds the key; its row is not visible.
		return store.Record{State: store.StateInFlight, Fingerprint: fingerprint}, false, nil
	}
	rec, err := r.record(token)
	return rec, r.claimed, err
}

// claimRow is a key's row as claimSQL and claimLiveSQL return it.
type claimRow struct {
	claimed     bool
	state       int16
	fingerprint []byte
	fence       int64
	status      *int32
	header      [][]byte
	body        []byte
	steps       [][]byte   // see encodeStep
	completed   *time.Time // NULL until done, and on rows done before schema version 4
	ttl         int64      // microseconds
}

// record is r as a store.Record; token is the owner's if r was claimed.
func (r *claimRow) record(token string) (store.Record, error) {
	rec := store.Record{
		State:       store.State(r.state),
		Fingerprint: string(r.fingerprint),
		Owner:       store.Lease{Fence: r.fence},
		TTL:         time.Duration(r.ttl) * time.Microsecond,
	}
	if r.claimed {
		rec.Owner.Token = token
	}
	if rec.State == store.StateCompleted && r.status != nil {
		rec.Response = &store.Response{Status: int(*r.status), Header: decodeHeader(r.header), Body: r.body}
	}
	if rec.State == store.StateExpired && r.completed != nil {
		rec.Completed = *r.completed
	}
	var err error
	rec.Steps, err = decodeSteps(r.steps)
	return rec, err
}

// rowKey is the key column's value for key: store.HashKey(key)'s 32 bytes.
func rowKey(key string) []byte {
	sum := sha256.Sum256([]byte(key))
	return sum[:]
}

// lockHash is the low part of a row's advisory lock number: the first 64
// bits of its SHA-256, so nobody can choose a key whose lock is another's.
func lockHash(row []byte) int64 {
	return int64(binary.BigEndian.Uint64(row[:8]))
}
