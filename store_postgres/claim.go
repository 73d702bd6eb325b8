package pgstore

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/seed43327c4c/idempotency/store"
)

// claimSQL claims key $1 for fingerprint $2 under token $3 for a lease of
// $4 microseconds, in one statement and one round trip. The key's advisory
// lock is the table's OID in the high 32 bits XOR $5, a hash of the key
// (see lockHash), so every process reaching the table locks the same number
// however it names the table; $6 says whether the lock is taken
// exclusively (a claim held by a transaction, see TxStore) or shared
// (Claim).
//
//   - "Guard": before anything touches the row, the statement tries the
//     transaction-level advisory lock of the key, without waiting. A
//     transactional claim holds it exclusively until its transaction ends,
//     so while one is open every other claim of the key fails to take it,
//     and then inserts and updates nothing: it only reads the committed
//     row, as the last part below does. Shared holders (plain claims) do
//     not exclude each other.
//   - "Inserted": the key is free, so the row is created (fence 1);
//   - "Taken": the row exists but has expired on the database's clock, so it
//     is taken over; an in-flight row's fence is raised, a finished row past
//     its retention starts again at 1;
//   - otherwise the existing row is read and nothing changes. A plain
//     claim that reads a row in flight under its own token and live lease
//     reports it claimed: it is a claim sent again after its reply was lost
//     (see Store.Claim in package store).
//
// The guard is a materialised CTE, evaluated once, and the INSERT's rows
// come from it through a WHERE on the lock's result, so the lock is tried
// before the INSERT looks for a conflicting row; the UPDATE's WHERE reads
// the same result before it locks a row. That order is what keeps a claim
// from waiting on a transactional claim's uncommitted row: ON CONFLICT
// waits for an uncommitted conflicting insert, and an UPDATE for a row
// another transaction has updated, but neither is reached without the
// lock. The statement always returns one row: held says whether the lock
// was taken, and the rest is NULL when no row was claimed or read.
//
// All parts see one snapshot taken when the statement starts, and none
// sees the others' writes, which decides two races:
//
//   - Two claims of one expired row: both UPDATEs find it, one locks it
//     first and commits; the other then re-checks its WHERE against the
//     committed row, which is no longer expired, and updates nothing. Its
//     fallback SELECT still shows the old, expired row from the snapshot.
//   - A row inserted by a claim that commits after this statement's
//     snapshot: ON CONFLICT waits for it (plain claims only: they hold the
//     lock shared, so both may have it) and does nothing, yet neither the
//     UPDATE nor the SELECT can see the row, so no row is returned. The
//     same happens when such a claim committed, and released the lock,
//     between the snapshot and the lock.
//
// Both cases (with the lock held: an expired row returned unclaimed, or no
// row at all) mean the snapshot is stale; the statement is run again with
// a fresh one.
//
// The time left on a claimed row is its lease exactly; on a row read, it is
// counted from clock_timestamp(), which is later than the snapshot. The
// statement's own statement_timestamp() is not: it is taken before the
// snapshot, and a claim that committed in between would show more time
// left than its lease.
//
// Its WITH queries have quoted names in mixed case, which no table
// WithTable accepts can have: a table named as one, unqualified, would
// otherwise be read as that query.
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
    RETURNING t.state, t.fingerprint, t.fence, t.status, t.header, t.body, t.expires_at
), "Taken" AS (
    UPDATE idempotency_keys AS t
    SET fingerprint = $2, state = 1, token = $3,
        fence = CASE WHEN t.state = 1 THEN t.fence + 1 ELSE 1 END,
        status = NULL, header = NULL, body = NULL,
        expires_at = statement_timestamp() + $4::bigint * interval '1 microsecond'
    WHERE t.key = $1 AND t.expires_at <= statement_timestamp()
      AND (SELECT held FROM "Guard") AND NOT EXISTS (SELECT FROM "Inserted")
    RETURNING t.state, t.fingerprint, t.fence, t.status, t.header, t.body, t.expires_at
)
SELECT "Guard".held, coalesce(r.claimed, false) AS claimed, coalesce(r.state, 0) AS state,
       r.fingerprint, coalesce(r.fence, 0) AS fence, r.status, r.header, r.body,
       coalesce((extract(epoch FROM r.expires_at - CASE WHEN r.claimed THEN statement_timestamp()
                                                         ELSE clock_timestamp() END) * 1000000)::bigint, 0) AS ttl
FROM "Guard" LEFT JOIN (
    SELECT true AS claimed, * FROM "Inserted"
    UNION ALL
    SELECT true, * FROM "Taken"
    UNION ALL
    SELECT NOT $6::boolean AND t.state = 1 AND t.token = $3::bytea AND t.expires_at > statement_timestamp(),
           t.state, t.fingerprint, t.fence, t.status, t.header, t.body, t.expires_at
    FROM idempotency_keys AS t
    WHERE t.key = $1 AND NOT EXISTS (SELECT FROM "Inserted") AND NOT EXISTS (SELECT FROM "Taken")
) AS r ON true`

// claimLockSQL, followed by a lockHash parameter, is the number of a
// key's advisory lock (see claimSQL).
const claimLockSQL = `('idempotency_keys'::regclass::oid::bigint << 32) # `

// staleAttempts bounds how often a statement runs again because a
// concurrent commit made its snapshot stale: Claim's statement when it
// notices that itself (see claimSQL), and any statement the server aborts
// with a serialization failure (see retry). Each re-run follows a commit
// by another request for the same key, or by a claim or sweep of the same
// row, so more than two are rare.
const staleAttempts = 10

// errStaleSnapshot means the claim statement ran on a snapshot that a
// concurrent commit made stale, and must run again. Under the read
// committed isolation level the statement notices it itself (see claimSQL);
// under repeatable read or serializable, the server's default for some
// databases, the server aborts the statement with a serialization failure
// instead, which claimOnce reports as errStaleSnapshot too.
var errStaleSnapshot = errors.New("snapshot made stale by a concurrent commit on the same key")

// Claim implements store.Store. It costs one round trip, and one more for
// each concurrent commit on the same key that makes its snapshot stale (see
// claimSQL). The lease is counted in whole microseconds from the database's
// statement_timestamp(). A record past its retention counts as absent: it
// is overwritten by the claim, with fence 1.
//
// A key held by an open transaction (a TxStore's claim, in this process or
// another) is reported in flight at once, never waited for: the record
// then has TTL 0 and, since the holder's row cannot be seen before it
// commits, the caller's own fingerprint.
func (s *Store) Claim(ctx context.Context, key, fingerprint, token string, lease time.Duration) (store.Record, bool, error) {
	if token == "" {
		return store.Record{}, false, fmt.Errorf("pgstore: claim: %w", store.ErrEmptyToken)
	}
	if err := s.requireCurrent(ctx); err != nil {
		return store.Record{}, false, fmt.Errorf("pgstore: claim: %w", err)
	}
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

// claimOnce runs claimSQL once on db, taking the key's advisory lock
// exclusively or shared. It returns errStaleSnapshot when the statement
// must run again.
func (s *Store) claimOnce(ctx context.Context, db querier, key, fingerprint, token string, lease time.Duration, exclusive bool) (store.Record, bool, error) {
	var (
		held, claimed bool
		state         int16
		fp            []byte
		fence         int64
		status        *int32
		header        [][]byte
		body          []byte
		ttl           int64
	)
	row := rowKey(key)
	err := db.QueryRow(ctx, s.sql.claim, row, []byte(fingerprint), []byte(token), lease.Microseconds(),
		lockHash(row), exclusive).
		Scan(&held, &claimed, &state, &fp, &fence, &status, &header, &body, &ttl)
	if serializationFailure(err) {
		return store.Record{}, false, errStaleSnapshot
	}
	if err != nil {
		return store.Record{}, false, err
	}
	live := state != 0 && ttl > 0
	switch {
	case !claimed && !live && held:
		return store.Record{}, false, errStaleSnapshot
	case !claimed && !live:
		// An open transaction holds the key; its row is not visible.
		return store.Record{State: store.StateInFlight, Fingerprint: fingerprint}, false, nil
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

// rowKey is the key column's value for key: the 32 bytes whose hex is
// store.HashKey(key), its SHA-256.
func rowKey(key string) []byte {
	sum := sha256.Sum256([]byte(key))
	return sum[:]
}

// lockHash is the low part of the advisory lock number of a row's key (a
// rowKey): its first 64 bits, so that nobody can choose a key whose lock is
// another key's (see claimSQL).
func lockHash(row []byte) int64 {
	return int64(binary.BigEndian.Uint64(row[:8]))
}
