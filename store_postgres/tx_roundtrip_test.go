package pgstore_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	pgstore "github.com/seed43327c4c/idempotency/store_postgres"
)

// TestTxRoundTripsPerRequest counts, through the real middleware, what the
// transactional mode asks of Postgres: a first request costs BEGIN, the
// claim, the complete and COMMIT, the plain store's two plus BEGIN and
// COMMIT; a request that claims nothing costs BEGIN, the claim and
// ROLLBACK. The handler's own INSERT, one statement and one round trip, is
// counted in the first request's figure.
func TestTxRoundTripsPerRequest(t *testing.T) {
	// Two connections: one held by a request in flight, one for its
	// duplicate.
	rt := &roundTrips{}
	pool := countedPool(t, rt, 2)
	s := pgstore.NewTx(pool, pgstore.WithTable(pgstore.TestTable(t)))
	ctx := context.Background()
	require.NoError(t, s.Migrate(ctx))
	t.Cleanup(func() { pgstore.DropTable(t, s.Store) })
	ledger := pgstore.TestTable(t)
	_, err := pool.Exec(ctx, `CREATE TABLE `+ledger+` (key text PRIMARY KEY)`)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := pool.Exec(context.Background(), `DROP TABLE `+ledger)
		require.NoError(t, err)
	})

	write := func(r *http.Request) error {
		tx, ok := pgstore.Tx(r.Context())
		if !ok {
			return errors.New("the request carries no transaction")
		}
		_, err := tx.Exec(r.Context(), `INSERT INTO `+ledger+` (key) VALUES ($1)`,
			r.URL.Path+" "+r.Header.Get("Idempotency-Key"))
		return err
	}
	requireCosts(t, rt, s, write, 2, requestCosts{
		first:    cost{5, "BEGIN, claim, the handler's INSERT, complete, COMMIT"},
		replay:   cost{3, "BEGIN, claim, ROLLBACK"},
		reused:   cost{3, "BEGIN, claim, ROLLBACK"},
		conflict: cost{3, "BEGIN, claim, ROLLBACK"},
	})
}
