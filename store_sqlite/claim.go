package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/headercodec"
	"github.com/seed43327c4c/idempotency/store/stepcodec"
)

// claimSQL claims key ?1 for fingerprint ?2 under token ?3 for ?4 ms, a
// done row being free only ?5 ms (the tombstones' time) after it expired,
// and reported as a tombstone (state 4) until then. A
// live row gets its own values back, so that RETURNING reports it: SQLite
// writes nothing for unchanged bytes, and no index holds a column set
// here. A takeover of an in-flight row for the same fingerprint keeps its
// steps, which only a claim gets back. One writing statement runs at a
// time per file, so two claims never both see the key free.
var claimSQL = strings.ReplaceAll(onSQLiteClock(`
INSERT INTO idempotency_keys AS t (key, fingerprint, state, token, fence, expires_at, sweep_at)
VALUES (?1, ?2, 1, ?3, 1, NOW + ?4, NOW + ?4)
ON CONFLICT (key) DO UPDATE SET
    fingerprint = iif(FREE, excluded.fingerprint, t.fingerprint),
    state       = iif(FREE, 1, t.state),
    token       = iif(FREE, excluded.token, t.token),
    fence       = iif(FREE, iif(t.state = 1, t.fence + 1, 1), t.fence),
    status      = iif(FREE, NULL, t.status),
    header      = iif(FREE, NULL, t.header),
    body        = iif(FREE, NULL, t.body),
    steps       = iif(FREE, iif(t.state = 1 AND t.fingerprint = excluded.fingerprint, t.steps, NULL), t.steps),
    expires_at  = iif(FREE, excluded.expires_at, t.expires_at)
RETURNING state = 1 AND token = ?3, iif(state <> 1 AND expires_at <= NOW, 4, state), fingerprint, fence, status, header, body,
    expires_at + iif(state <> 1 AND expires_at <= NOW, ?5, 0) - NOW, iif(state = 1 AND token = ?3, steps, NULL), completed_at`),
	"FREE", "t.expires_at + iif(t.state = 1, 0, ?5) <= "+nowMS)

// liveSQL reads key ?1 as claimSQL returns it for token ?2, if it is not
// free (?3 ms of tombstones), without the write lock: a replay or a
// duplicate never waits for a writer.
var liveSQL = onSQLiteClock(`
SELECT state = 1 AND token = ?2, iif(expires_at <= NOW, 4, state), fingerprint, fence, status, header, body,
    expires_at + iif(expires_at <= NOW, ?3, 0) - NOW, iif(state = 1 AND token = ?2, steps, NULL), completed_at
FROM idempotency_keys WHERE key = ?1 AND expires_at + iif(state <> 1, ?3, 0) > NOW`)

// Claim implements store.Store: a read of a live record, then, if there is
// none, claimSQL. The lease counts in whole milliseconds. A key it cannot
// decide within ctx's deadline or the busy timeout, as the file's write
// lock stayed taken or owners' writes waited for it, is answered in flight
// for fingerprint with no owner and a TTL of 0, claimed false: the caller
// answers 409, and the client's retry decides it.
func (s *Store) Claim(ctx context.Context, key, fingerprint, token string, lease time.Duration) (store.Record, bool, error) {
	if token == "" {
		return store.Record{}, false, fmt.Errorf("sqlitestore: claim: %w", store.ErrEmptyToken)
	}
	var (
		claimed bool
		state   int
		fp      []byte
		fence   int64
		status  sql.NullInt64
		header  []byte
		body    []byte
		ttl     int64
		steps   []byte
		done    sql.NullInt64 // completed_at
	)
	tombs := s.tombs.Milliseconds()
	row := store.HashKey(key)
	// The read waits for the turn too: duplicates answered outside it come
	// back sooner and take the CPU that the owners' renewals need. It is
	// made again on each try, so that a duplicate whose first request
	// claimed the key meanwhile is answered at once.
	err := s.otherWrite(ctx, "claim", func(conn *sql.Conn) error {
		err := conn.QueryRowContext(ctx, liveSQL, row, []byte(token), tombs).
			Scan(&claimed, &state, &fp, &fence, &status, &header, &body, &ttl, &steps, &done)
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if s.openGate(ctx, conn).ownerWaiting() {
			return errOwnerWaiting
		}
		return conn.QueryRowContext(ctx, claimSQL, row, []byte(fingerprint), []byte(token), lease.Milliseconds(), tombs).
			Scan(&claimed, &state, &fp, &fence, &status, &header, &body, &ttl, &steps, &done)
	})
	switch {
	case errors.Is(err, ErrBusy), err != nil && deadlinePassed(ctx):
		return store.Record{State: store.StateInFlight, Fingerprint: fingerprint}, false, nil
	case err != nil:
		return store.Record{}, false, err
	}
	rec, err := rowRecord(state, fp, fence, status, header, body, ttl)
	if err == nil {
		rec.Steps, err = stepcodec.Decode(steps)
	}
	if rec.State == store.StateExpired && done.Valid {
		rec.Completed = time.UnixMilli(done.Int64)
	}
	if err != nil {
		return store.Record{}, false, fmt.Errorf("sqlitestore: claim: %w", err)
	}
	if claimed {
		rec.Owner.Token = token
	}
	return rec, claimed, nil
}

// deadlinePassed reports whether ctx has a deadline and it has passed,
// whichever error ctx then reports: a parent's timer may fire first.
func deadlinePassed(ctx context.Context) bool {
	deadline, ok := ctx.Deadline()
	return ok && !time.Now().Before(deadline)
}

// rowRecord is the record a row's columns hold, ttl in milliseconds; a
// header that does not decode is an error.
func rowRecord(state int, fp []byte, fence int64, status sql.NullInt64, header, body []byte, ttl int64) (store.Record, error) {
	rec := store.Record{
		State:       store.State(state),
		Fingerprint: string(fp),
		Owner:       store.Lease{Fence: fence},
		TTL:         time.Duration(ttl) * time.Millisecond,
	}
	if rec.State == store.StateCompleted && status.Valid {
		h, err := headercodec.Decode(header)
		if err != nil {
			return store.Record{}, err
		}
		rec.Response = &store.Response{Status: int(status.Int64), Header: h, Body: body}
	}
	return rec, nil
}
