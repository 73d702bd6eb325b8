package pgstore

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
)

// TestRetryPolicy: retry runs a statement again after a dead connection (at
// most once per pooled connection) or a serialization failure (at most
// staleAttempts times), and never after any other error or once the
// context has ended. The errors are the ones pgx returns; the server's own
// are met in TestStaleOwnerUnderStricterIsolation and terminate_test.go.
func TestRetryPolicy(t *testing.T) {
	stale := &pgconn.PgError{Code: "40001"}
	terminated := &pgconn.PgError{Code: "57P01"}
	other := &pgconn.PgError{Code: "23505"}
	s := &Store{maxConns: 3}
	cases := []struct {
		name     string
		failures []error // what the runs return, in order, before nil
		ctx      func() context.Context
		runs     int
		err      error
	}{
		{"serialization failures", []error{stale, stale, stale}, context.Background, 4, nil},
		{"dead connections", []error{terminated, terminated}, context.Background, 3, nil},
		{"both", []error{terminated, stale, terminated, stale}, context.Background, 5, nil},
		{"too many serialization failures", slices.Repeat([]error{stale}, staleAttempts+5), context.Background, staleAttempts + 1, stale},
		{"more dead connections than the pool holds", slices.Repeat([]error{terminated}, 10), context.Background, 4, terminated},
		{"any other error", []error{other, nil}, context.Background, 1, other},
		{"ended context", []error{stale, nil}, func() context.Context {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx
		}, 1, stale},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			runs := 0
			err := s.retry(c.ctx(), func() error {
				runs++
				if runs <= len(c.failures) {
					return c.failures[runs-1]
				}
				return nil
			})
			assert.Equal(t, c.runs, runs)
			assert.True(t, errors.Is(err, c.err), "got %v, want %v", err, c.err)
		})
	}
}
