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
// internal/batch).
const batchLanes = 2

// A batch is one implicit transaction: one round trip and one commit for
// all its statements, which run in the order of their rows' keys, so two
// batches never wait for each other's rows in a cycle. A batch that fails
// changes nothing, and each of its calls is then sent alone, as one
// without company is.

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

// sendNewClaims runs claimNewSQL for calls.
func (s *Store) sendNewClaims(ctx context.Context, calls []*newClaimCall) {
	if len(calls) > 1 {
		tags, err := sendBatch(ctx, s.pool, s.sql.claimNew, calls, (*newClaimCall).args, func(c *newClaimCall) []byte { return c.row })
		if err == nil {
			for i, c := range calls {
				c.inserted = tags[i].RowsAffected() == 1
			}
			return
		}
	}
	for _, c := range calls {
		c.err = s.retry(ctx, func() error {
			tag, err := s.db.Exec(ctx, s.sql.claimNew, c.args()...)
			c.inserted = tag.RowsAffected() == 1
			return err
		})
	}
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

// sendCompletes runs completeSQL for calls.
func (s *Store) sendCompletes(ctx context.Context, calls []*completeCall) {
	if len(calls) > 1 {
		args := func(c *completeCall) []any { return c.args }
		tags, err := sendBatch(ctx, s.pool, s.sql.complete, calls, args, func(c *completeCall) []byte { return c.args[0].([]byte) })
		if err == nil {
			for i, c := range calls {
				c.found = tags[i].RowsAffected() > 0
			}
			return
		}
	}
	for _, c := range calls {
		c.err = s.retry(ctx, func() error {
			tag, err := s.db.Exec(ctx, s.sql.complete, c.args...)
			c.found = tag.RowsAffected() > 0
			return err
		})
	}
}

// sendBatch runs sql once for each call, with its args, in one batch
// ordered by row; calls is sorted, and the tags follow it.
func sendBatch[C any](ctx context.Context, pool *pgxpool.Pool, sql string, calls []C, args func(C) []any, row func(C) []byte) ([]pgconn.CommandTag, error) {
	slices.SortFunc(calls, func(a, b C) int { return bytes.Compare(row(a), row(b)) })
	b := &pgx.Batch{}
	for _, c := range calls {
		b.Queue(sql, args(c)...)
	}
	results := pool.SendBatch(ctx, b)
	tags := make([]pgconn.CommandTag, len(calls))
	var err error
	for i := range calls {
		if tags[i], err = results.Exec(); err != nil {
			break
		}
	}
	if closeErr := results.Close(); err == nil {
		err = closeErr
	}
	return tags, err
}
