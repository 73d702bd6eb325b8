package mysqlstore

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStatementsNameTheTable: every statement names the configured table
// and its procedure, never the default.
func TestStatementsNameTheTable(t *testing.T) {
	s := newStatements(nil, "payments_keys")
	for _, sql := range []string{s.schema, s.claimProcedure, s.claim.query, s.renew.query, s.complete.query, s.release.query, s.owned.query} {
		require.NotContains(t, sql, DefaultTable)
		require.Contains(t, sql, "payments_keys")
	}
	require.Contains(t, s.claimProcedure, "`payments_keys_claim`")
	require.True(t, strings.Contains(s.claimProcedure, "'.payments_keys.'"), "the lock name names the table")
}

// TestPreparedWaitsWithinItsContext: a call waiting for another's
// preparation gives up when its context ends.
func TestPreparedWaitsWithinItsContext(t *testing.T) {
	p := &prepared{lock: make(chan struct{}, 1)}
	p.lock <- struct{}{}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := p.get(ctx)
	require.ErrorIs(t, err, context.Canceled)
}
