package pgstore

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/storetest"
)

// TestTombstoneConformance runs storetest.RunTombstones against the plain
// store, the transactional one, and the plain store swept before each
// claim.
func TestTombstoneConformance(t *testing.T) {
	keep := WithTombstones(storetest.TombstoneTime)
	cases := []struct {
		name     string
		newStore func(t *testing.T) store.Store
	}{
		{"Store", func(t *testing.T) store.Store { return newTestStore(t, keep) }},
		{"TxStore", func(t *testing.T) store.Store { return &TxStore{Store: newTestStore(t, keep)} }},
		{"Store swept", func(t *testing.T) store.Store {
			s := newTestStore(t, keep)
			return storetest.SweptBeforeClaims(s, s.DeleteExpired)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { storetest.RunTombstones(t, c.newStore) })
	}
}

// TestSweepEntombs: the sweeper turns a done row past its retention into
// a tombstone without its response and token, deletes it once the
// tombstone's time ends, and Inspect shows the expired state meanwhile.
func TestSweepEntombs(t *testing.T) {
	s := newTestStore(t, WithTombstones(time.Second))
	ctx := context.Background()
	rec, claimed, err := s.Claim(ctx, "k", "fp", "tok", time.Minute)
	require.NoError(t, err)
	require.True(t, claimed)
	resp := &store.Response{Status: 201, Body: []byte(strings.Repeat("b", 4096))}
	require.NoError(t, s.Complete(ctx, "k", rec.Owner, resp, time.Millisecond))
	time.Sleep(10 * time.Millisecond)

	n, err := s.DeleteExpired(ctx, 10)
	require.NoError(t, err)
	assert.Equal(t, 1, n, "the done row is swept into a tombstone")
	var state int16
	var token, body []byte
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT state, token, body FROM `+s.name).Scan(&state, &token, &body))
	assert.Equal(t, int16(store.StateExpired), state)
	assert.Empty(t, token)
	assert.Nil(t, body, "a tombstone keeps no response")

	got, found, err := s.Inspect(ctx, store.HashKey("k"))
	require.NoError(t, err)
	assert.True(t, found)
	assert.Equal(t, store.StateExpired, got.State, "Inspect shows the tombstone")
	assert.False(t, got.Completed.IsZero(), "Inspect shows when it completed")

	n, err = s.DeleteExpired(ctx, 10)
	require.NoError(t, err)
	assert.Zero(t, n, "a tombstone within its time stays")
	time.Sleep(time.Second)
	n, err = s.DeleteExpired(ctx, 10)
	require.NoError(t, err)
	assert.Equal(t, 1, n, "a tombstone past its time is deleted")
	assert.Zero(t, count(t, s))
}

// TestTombstonesOffDeleteDoneRows: without WithTombstones a done row past
// its retention is deleted and its key claimed afresh.
func TestTombstonesOffDeleteDoneRows(t *testing.T) {
	s := newTestStore(t)
	ctx := context.Background()
	rec, _, err := s.Claim(ctx, "k", "fp", "tok", time.Minute)
	require.NoError(t, err)
	require.NoError(t, s.Complete(ctx, "k", rec.Owner, &store.Response{Status: 200}, time.Millisecond))
	time.Sleep(10 * time.Millisecond)
	_, claimed, err := s.Claim(ctx, "k", "fp", "tok2", time.Minute)
	require.NoError(t, err)
	assert.True(t, claimed)
}

func TestWithTombstonesRejectsNonPositive(t *testing.T) {
	assert.PanicsWithValue(t, "pgstore: WithTombstones expects d > 0", func() { WithTombstones(0) })
}

// TestTombstoneBytes measures what n tombstones cost the table (heap and
// key index, after VACUUM FULL), each from a request with a 64-character
// fingerprint and a 1 KiB response, and logs the bytes per tombstone.
func TestTombstoneBytes(t *testing.T) {
	const n = 2000
	s := newTestStore(t, WithTombstones(time.Hour))
	ctx := context.Background()
	size := func() int64 {
		_, err := s.pool.Exec(ctx, `VACUUM FULL `+s.name)
		require.NoError(t, err)
		var b int64
		require.NoError(t, s.pool.QueryRow(ctx, `SELECT pg_total_relation_size($1::regclass)`, s.name).Scan(&b))
		return b
	}
	empty := size()
	fp := strings.Repeat("f", 64)
	resp := &store.Response{Status: 201, Header: map[string][]string{"Content-Type": {"application/json"}}, Body: []byte(strings.Repeat("b", 1024))}
	for i := range n {
		key := "key-" + strings.Repeat("0", 30) + string(rune('a'+i%26)) + time.Duration(i).String()
		rec, claimed, err := s.Claim(ctx, key, fp, "token-of-32-characters-long-0000", time.Minute)
		require.NoError(t, err)
		require.True(t, claimed)
		require.NoError(t, s.Complete(ctx, key, rec.Owner, resp, time.Millisecond))
	}
	time.Sleep(10 * time.Millisecond)
	s.sweep(ctx)
	var tombs int
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT count(*) FROM `+s.name+` WHERE state = 4`).Scan(&tombs))
	require.Equal(t, n, tombs)
	var row float64
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT avg(pg_column_size(t.*)) FROM `+s.name+` AS t`).Scan(&row))
	t.Logf("%d tombstones: %.1f bytes a tombstone in table and index, %.1f bytes of row data", n, float64(size()-empty)/n, row)
}

// TestTombstoneRefusesBeginClaim: the transactional claim meets the
// tombstone too, and opens no transaction.
func TestTombstoneRefusesBeginClaim(t *testing.T) {
	s := &TxStore{Store: newTestStore(t, WithTombstones(time.Minute))}
	ctx := context.Background()
	rec, _, err := s.Claim(ctx, "k", "fp", "tok", time.Minute)
	require.NoError(t, err)
	require.NoError(t, s.Complete(ctx, "k", rec.Owner, &store.Response{Status: 201}, time.Millisecond))
	time.Sleep(10 * time.Millisecond)
	_, got, tx, err := s.BeginClaim(ctx, "k", "fp", "tok2")
	require.NoError(t, err)
	assert.Nil(t, tx)
	assert.Equal(t, store.StateExpired, got.State)
	assert.False(t, got.Completed.IsZero())
}

// TestTombstoneLateRetryThroughMiddleware: a retry after the retention
// gets 422 key-expired, and the handler does not run again.
func TestTombstoneLateRetryThroughMiddleware(t *testing.T) {
	s := newTestStore(t, WithTombstones(time.Minute))
	runs := 0
	h := idempotency.New(idempotency.WithStore(s), idempotency.WithRetention(50*time.Millisecond))(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs++
			w.WriteHeader(http.StatusCreated)
		}))
	require.Equal(t, http.StatusCreated, sendTo(h, "k", nil).Code)
	time.Sleep(100 * time.Millisecond)
	w := sendTo(h, "k", nil)
	assert.Equal(t, http.StatusUnprocessableEntity, w.Code)
	assert.Contains(t, w.Body.String(), "key-expired")
	assert.Equal(t, 1, runs)
}
