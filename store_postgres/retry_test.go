package pgstore

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/storetest"
)

// TestRetryPolicy: retry runs a statement again after a dead connection (at
// most once per pooled connection) or a serialization failure (at most
// staleAttempts times), and never after any other error or once the
// context has ended. The errors are the ones pgx returns; the server's own
// are met in TestStaleOwnerUnderStricterIsolation and the tests below.
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

// terminatedPool returns a store whose pool holds conns connections that
// the server has just terminated, none of which the pool knows is dead.
func terminatedPool(t *testing.T, conns int32) *Store {
	t.Helper()
	ctx := context.Background()
	name := testTable(t)
	p := ownPool(t, func(cfg *pgxpool.Config) {
		cfg.ConnConfig.RuntimeParams["application_name"] = name
		cfg.MaxConns = conns
		cfg.ShouldPing = neverPing
	})
	s := newTestStoreOn(t, p, WithTable(name))

	// Open every connection the pool may hold.
	var held []*pgxpool.Conn
	var mu sync.Mutex
	storetest.Together(int(conns), func(int) {
		c, err := p.Acquire(ctx)
		require.NoError(t, err)
		mu.Lock()
		held = append(held, c)
		mu.Unlock()
	})
	for _, c := range held {
		c.Release()
	}
	var killed int32
	require.NoError(t, testPool(t).QueryRow(ctx, `
SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`, name).Scan(&killed))
	require.Equal(t, conns, killed)
	require.Eventually(t, func() bool {
		var left int
		require.NoError(t, testPool(t).QueryRow(ctx,
			`SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, name).Scan(&left))
		return left == 0
	}, 10*time.Second, 10*time.Millisecond)
	return s
}

// TestTerminatedConnectionsAreRetried: a statement that meets a connection
// the server terminated (pg_terminate_backend, a failover) did not run, so
// the store runs it again on another connection instead of failing. So
// does BeginClaim with its BEGIN, before any statement of the transaction.
func TestTerminatedConnectionsAreRetried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, op := range map[string]func(s *Store) error{
		"claim": func(s *Store) error {
			_, _, err := s.Claim(ctx, "k", "fp", "t", time.Minute)
			return err
		},
		"complete": func(s *Store) error {
			return s.Complete(ctx, "k", store.Lease{Token: "t", Fence: 1}, &store.Response{Status: 201}, time.Hour)
		},
		"begin claim": func(s *Store) error {
			_, _, tx, err := (&TxStore{Store: s}).BeginClaim(ctx, "k", "fp", "t")
			if err != nil {
				return err
			}
			return tx.Rollback(ctx)
		},
		"delete expired": func(s *Store) error {
			_, err := s.DeleteExpired(ctx, 10)
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := terminatedPool(t, 4)
			if name == "complete" {
				_, err := testPool(t).Exec(ctx, `INSERT INTO `+s.name+` (key, fingerprint, state, token, fence, expires_at)
VALUES ($1, 'fp', 1, 't', 1, now() + interval '1 minute')`, rowKey("k"))
				require.NoError(t, err)
			}
			require.NoError(t, op(s))
		})
	}
}

// TestConnectionsEndedForIdlenessAreRetried: a server that ends idle
// sessions (idle_session_timeout, FATAL 57P05) leaves the pool holding a
// connection it does not know is dead. The statement that meets it did not
// run, so the store runs it again on a new connection.
func TestConnectionsEndedForIdlenessAreRetried(t *testing.T) {
	t.Parallel()
	table := newTestStore(t).table
	p := ownPool(t, func(cfg *pgxpool.Config) {
		cfg.MaxConns = 1
		cfg.ShouldPing = neverPing
		cfg.ConnConfig.RuntimeParams["idle_session_timeout"] = "100ms"
	})
	s := New(p, WithTable(table))

	time.Sleep(400 * time.Millisecond) // the server ends the pool's one connection
	mustClaim(t, s, "k", "fp", "t", time.Minute)
}
