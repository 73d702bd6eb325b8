package pgstore

import (
	"bytes"
	"context"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// batchLanes is how many batches of new claims, and of completions, a
// store has in flight at a time; a call that finds them all busy goes out
// in the next one, with every call that waited meanwhile (see
// store/batch).
const batchLanes = 2

// A batch is one implicit transaction: one round trip and one commit for
// all its statements, which run in the order of their rows' keys, so two
// batches never wait for each other's rows in a cycle. It waits at most
// batchLockTimeout for a row lock: a completion whose row a transactional
// claim took over waits for that transaction to end, and must not hold the
// batch's other calls with it. A batch that fails changes nothing, and
// store/batch then has each of its callers send its call alone, under its
// own deadline.

// batchLockTimeout is a batch's lock_timeout.
const batchLockTimeout = "100ms"

// newClaimCall is a claim of a new key: claimNewSQL's arguments, and
// whether it inserted the row.
type newClaimCall struct {
	row, fingerprint, token []byte
	leaseUs                 int64
	inserted                bool
	err                     error
}

// Settle implements batch.Item.
func (c *newClaimCall) Settle(err error) { c.err = err }

func (c *newClaimCall) args() []any {
	return []any{c.row, c.fingerprint, c.token, c.leaseUs, lockHash(c.row)}
}

// sendNewClaims runs claimNewSQL for calls in one batch, and returns them
// all if it failed.
func (s *Store) sendNewClaims(ctx context.Context, calls []*newClaimCall) (again []*newClaimCall) {
	tags, err := sendBatch(ctx, s.pool, s.sql.claimNew, calls, (*newClaimCall).args, func(c *newClaimCall) []byte { return c.row })
	if err != nil {
		return calls
	}
	for i, c := range calls {
		c.inserted = tags[i].RowsAffected() == 1
	}
	return nil
}

// claimNewAlone runs claimNewSQL for c in a statement of its own.
func (s *Store) claimNewAlone(ctx context.Context, c *newClaimCall) {
	c.err = s.retry(ctx, func() error {
		tag, err := s.db.Exec(ctx, s.sql.claimNew, c.args()...)
		c.inserted = tag.RowsAffected() == 1
		return err
	})
}

// completeCall is a Complete: completeSQL's arguments, the row's key
// first, and whether it found the row in flight under its owner.
type completeCall struct {
	args  []any
	found bool
	err   error
}

// Settle implements batch.Item.
func (c *completeCall) Settle(err error) { c.err = err }

// sendCompletes runs completeSQL for calls in one batch, and returns them
// all if it failed.
func (s *Store) sendCompletes(ctx context.Context, calls []*completeCall) (again []*completeCall) {
	args := func(c *completeCall) []any { return c.args }
	tags, err := sendBatch(ctx, s.pool, s.sql.complete, calls, args, func(c *completeCall) []byte { return c.args[0].([]byte) })
	if err != nil {
		return calls
	}
	for i, c := range calls {
		c.found = tags[i].RowsAffected() > 0
	}
	return nil
}

// completeAlone runs completeSQL for c in a statement of its own.
func (s *Store) completeAlone(ctx context.Context, c *completeCall) {
	c.err = s.retry(ctx, func() error {
		tag, err := s.db.Exec(ctx, s.sql.complete, c.args...)
		c.found = tag.RowsAffected() > 0
		return err
	})
}

// sendBatch runs sql once for each call, with its args, in one batch
// ordered by row; calls is sorted, and the tags follow it.
func sendBatch[C any](ctx context.Context, pool *pgxpool.Pool, sql string, calls []C, args func(C) []any, row func(C) []byte) ([]pgconn.CommandTag, error) {
	slices.SortFunc(calls, func(a, b C) int { return bytes.Compare(row(a), row(b)) })
	b := &pgx.Batch{}
	// Local to the batch's implicit transaction.
	b.Queue(`SELECT set_config('lock_timeout', '` + batchLockTimeout + `', true)`)
	for _, c := range calls {
		b.Queue(sql, args(c)...)
	}
	results := pool.SendBatch(ctx, b)
	_, err := results.Exec()
	tags := make([]pgconn.CommandTag, len(calls))
	for i := range calls {
		if err != nil {
			break
		}
		tags[i], err = results.Exec()
	}
	if closeErr := results.Close(); err == nil {
		err = closeErr
	}
	return tags, err
}
