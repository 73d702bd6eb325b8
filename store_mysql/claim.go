package mysqlstore

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/headercodec"
	"github.com/seed43327c4c/idempotency/store/stepcodec"
)

// maxToken is the token column's size.
const maxToken = 255

// staleAttempts bounds how often a claim runs again because the row it
// wrote or read changed between the procedure's statements.
const staleAttempts = 10

// errStale means the claim procedure read a row that another claim or the
// sweeper changed after its write: it runs again.
var errStale = errors.New("the key's row changed during the claim")

// Claim implements store.Store in one round trip, one CALL of the claim
// procedure, and one more for each concurrent change of the same row. The
// lease is counted in whole microseconds on the server's UTC clock. A key
// held by an open transaction is reported in flight with TTL 0.
func (s *Store) Claim(ctx context.Context, key, fingerprint, token string, lease time.Duration) (store.Record, bool, error) {
	rec, claimed, err := s.claim(ctx, key, fingerprint, token, lease)
	if err != nil {
		return store.Record{}, false, fmt.Errorf("mysqlstore: claim: %w", explain(err))
	}
	return rec, claimed, nil
}

func (s *Store) claim(ctx context.Context, key, fingerprint, token string, lease time.Duration) (store.Record, bool, error) {
	if err := checkToken(token); err != nil {
		return store.Record{}, false, err
	}
	if err := s.requireCurrent(ctx); err != nil {
		return store.Record{}, false, err
	}
	if err := s.claims.take(ctx); err != nil {
		return store.Record{}, false, err
	}
	defer s.claims.give()
	for range staleAttempts {
		row, err := s.sql.claim.queryRow(ctx, rowKey(key), []byte(fingerprint), []byte(token), lease.Microseconds(), false, s.tombstones.Microseconds())
		if err != nil {
			return store.Record{}, false, err
		}
		r, err := scanClaim(row)
		if errors.Is(err, errStale) {
			continue
		}
		if err != nil {
			return store.Record{}, false, err
		}
		rec, err := r.record(token)
		return rec, r.claimed, err
	}
	return store.Record{}, false, fmt.Errorf("%w %d times in a row", errStale, staleAttempts)
}

// checkToken refuses a token the store cannot keep.
func checkToken(token string) error {
	if token == "" {
		return store.ErrEmptyToken
	}
	if len(token) > maxToken {
		return fmt.Errorf("owner token of %d bytes, over the %d the table keeps", len(token), maxToken)
	}
	return nil
}

// claimRow is the row claim.sql returns.
type claimRow struct {
	claimed, live bool
	state         int
	fingerprint   []byte
	fence         int64
	status        sql.NullInt32
	header, body  []byte
	ttl           int64 // microseconds
	lockName      string
	lockedOut     bool          // another session holds the key's named lock
	steps         []byte        // store/stepcodec's
	completed     sql.NullInt64 // microseconds since the Unix epoch
}

// scanClaim reads a claim's row; errStale means the row it read was
// neither its own nor live, and a plain claim runs again.
func scanClaim(row *sql.Row) (claimRow, error) {
	var r claimRow
	err := row.Scan(&r.claimed, &r.state, &r.fingerprint, &r.fence, &r.status, &r.header, &r.body, &r.ttl, &r.live, &r.lockName, &r.lockedOut, &r.steps, &r.completed)
	if err != nil {
		return claimRow{}, err
	}
	if !r.claimed && !r.live {
		return r, errStale
	}
	return r, nil
}

// record is the store.Record of r, for a claim under token.
func (r claimRow) record(token string) (store.Record, error) {
	rec := store.Record{
		State:       store.State(r.state),
		Fingerprint: string(r.fingerprint),
		Owner:       store.Lease{Fence: r.fence},
		TTL:         max(0, time.Duration(r.ttl)*time.Microsecond),
	}
	if r.claimed {
		rec.Owner.Token = token
		steps, err := stepcodec.Decode(r.steps)
		if err != nil {
			return store.Record{}, err
		}
		rec.Steps = steps
	}
	if rec.State == store.StateExpired && r.completed.Valid {
		rec.Completed = time.UnixMicro(r.completed.Int64)
	}
	if rec.State == store.StateCompleted && r.status.Valid {
		header, err := headercodec.Decode(r.header)
		if err != nil {
			return store.Record{}, err
		}
		rec.Response = &store.Response{Status: int(r.status.Int32), Header: header, Body: r.body}
	}
	return rec, nil
}

// rowKey is the key column's value for key: store.HashKey(key)'s 32 bytes.
func rowKey(key string) []byte {
	sum := sha256.Sum256([]byte(key))
	return sum[:]
}
