package mysqlstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/storetest"
)

// TestTombstoneConformance runs storetest.RunTombstones against the plain
// store, the transactional one, and the plain store swept before each
// claim.
func TestTombstoneConformance(t *testing.T) {
	keep := WithTombstones(storetest.TombstoneTime)
	for _, c := range []struct {
		name     string
		newStore func(t *testing.T) store.Store
	}{
		{"Store", func(t *testing.T) store.Store { return newTestStore(t, keep) }},
		{"TxStore", func(t *testing.T) store.Store { return newTestTxStore(t, keep) }},
		{"Store swept", func(t *testing.T) store.Store {
			s := newTestStore(t, keep)
			return storetest.SweptBeforeClaims(s, s.DeleteExpired)
		}},
	} {
		t.Run(c.name, func(t *testing.T) { storetest.RunTombstones(t, c.newStore) })
	}
}

// TestSweepEntombs: the sweeper drops the response of a done row past its
// retention, keeps the row while it is a tombstone, and deletes it once
// the tombstone's time ends; without WithTombstones it deletes it at once.
func TestSweepEntombs(t *testing.T) {
	ctx := context.Background()
	for _, tombstones := range []time.Duration{0, time.Second} {
		var opts []Option
		if tombstones > 0 {
			opts = append(opts, WithTombstones(tombstones))
		}
		s := newTestStore(t, opts...)
		rec := mustClaim(t, s, "k", "fp", time.Minute)
		resp := &store.Response{Status: 201, Body: []byte(strings.Repeat("b", 4096))}
		require.NoError(t, s.Complete(ctx, "k", rec.Owner, resp, time.Millisecond))
		time.Sleep(10 * time.Millisecond)

		n, err := s.DeleteExpired(ctx, 10)
		require.NoError(t, err)
		if tombstones == 0 {
			assert.Equal(t, 1, n, "without tombstones a done row past its retention is deleted")
			continue
		}
		assert.Equal(t, 1, n, "the done row's response is dropped")
		n, err = s.DeleteExpired(ctx, 10)
		require.NoError(t, err)
		assert.Zero(t, n, "a tombstone within its time stays")
		var rows, bodies int
		require.NoError(t, s.db.QueryRow(s.sql.rewrite.Replace(
			"SELECT COUNT(*), COUNT(body) FROM `idempotency_keys`")).Scan(&rows, &bodies))
		assert.Equal(t, 1, rows)
		assert.Zero(t, bodies, "a tombstone keeps no response")
		lost, claimed, err := s.Claim(ctx, "k", "fp", newToken(), time.Minute)
		require.NoError(t, err)
		require.False(t, claimed, "a tombstone is not claimed")
		assert.Equal(t, store.StateExpired, lost.State)
		assert.WithinDuration(t, time.Now(), lost.Completed, 10*time.Second, "when the key completed")

		time.Sleep(tombstones)
		n, err = s.DeleteExpired(ctx, 10)
		require.NoError(t, err)
		assert.Equal(t, 1, n, "a tombstone past its time is deleted")
	}
}

func TestWithTombstonesRejectsNonPositive(t *testing.T) {
	assert.PanicsWithValue(t, "mysqlstore: WithTombstones expects d > 0", func() { WithTombstones(0) })
}

// TestTombstoneRefusesBeginClaim: the transactional claim meets the
// tombstone too, and opens no transaction.
func TestTombstoneRefusesBeginClaim(t *testing.T) {
	s := newTestTxStore(t, WithTombstones(time.Minute))
	ctx := context.Background()
	rec := mustClaim(t, s, "k", "fp", time.Minute)
	require.NoError(t, s.Complete(ctx, "k", rec.Owner, &store.Response{Status: 201}, time.Millisecond))
	time.Sleep(10 * time.Millisecond)
	_, got, tx, err := s.BeginClaim(ctx, "k", "fp", newToken())
	require.NoError(t, err)
	assert.Nil(t, tx)
	assert.Equal(t, store.StateExpired, got.State)
	assert.False(t, got.Completed.IsZero())
}

// TestTombstoneBytes measures what n tombstones cost the table (data and
// indexes, as InnoDB reports them after OPTIMIZE TABLE), each from a
// request with a 64-character fingerprint and a 1 KiB response that the
// sweeper dropped, and logs the bytes per tombstone.
func TestTombstoneBytes(t *testing.T) {
	const n = 2000
	s := newTestStore(t, WithTombstones(time.Hour))
	ctx := context.Background()
	size := func() int64 {
		var b int64
		_, err := s.db.ExecContext(ctx, s.sql.rewrite.Replace("OPTIMIZE TABLE `idempotency_keys`"))
		require.NoError(t, err)
		require.NoError(t, s.db.QueryRowContext(ctx, "SELECT DATA_LENGTH + INDEX_LENGTH FROM information_schema.TABLES"+
			" WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?", s.table).Scan(&b))
		return b
	}
	empty := size()
	fp := strings.Repeat("f", 64)
	resp := &store.Response{Status: 201, Header: map[string][]string{"Content-Type": {"application/json"}}, Body: []byte(strings.Repeat("b", 1024))}
	for i := range n {
		key := "key-" + strings.Repeat("0", 30) + time.Duration(i).String()
		rec := mustClaim(t, s, key, fp, time.Minute)
		require.NoError(t, s.Complete(ctx, key, rec.Owner, resp, time.Millisecond))
	}
	time.Sleep(10 * time.Millisecond)
	s.sweep(ctx)
	var tombs, bodies int
	require.NoError(t, s.db.QueryRow(s.sql.rewrite.Replace(
		"SELECT COUNT(*), COUNT(body) FROM `idempotency_keys`")).Scan(&tombs, &bodies))
	require.Equal(t, n, tombs)
	require.Zero(t, bodies)
	t.Logf("%d tombstones: %.1f bytes a tombstone in table and indexes", n, float64(size()-empty)/n)
}
