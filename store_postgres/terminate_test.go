package pgstore

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
)

// terminatedPool returns a store whose pool holds conns connections that
// the server has just terminated, none of which the pool knows is dead.
func terminatedPool(t *testing.T, conns int32) *Store {
	t.Helper()
	ctx := context.Background()
	cfg := testConfig(t)
	name := testTable(t)
	cfg.ConnConfig.RuntimeParams["application_name"] = name
	cfg.MaxConns = conns
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	p := connect(t, cfg)
	t.Cleanup(p.Close)
	s := New(p, WithTable(name))
	require.NoError(t, s.Migrate(ctx))
	t.Cleanup(func() { dropTable(t, s) })

	// Open every connection the pool may hold.
	var held []*pgxpool.Conn
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range conns {
		wg.Go(func() {
			c, err := p.Acquire(ctx)
			require.NoError(t, err)
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		})
	}
	wg.Wait()
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
VALUES ($1, 'fp', 1, 't', 1, now() + interval '1 minute')`, []byte(store.HashKey("k")))
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
	cfg := testConfig(t)
	cfg.MaxConns = 1
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	cfg.ConnConfig.RuntimeParams["idle_session_timeout"] = "100ms"
	p := connect(t, cfg)
	t.Cleanup(p.Close)
	s := New(p, WithTable(table))

	time.Sleep(400 * time.Millisecond) // the server ends the pool's one connection
	_, claimed, err := s.Claim(context.Background(), "k", "fp", "t", time.Minute)
	require.NoError(t, err)
	require.True(t, claimed)
}
