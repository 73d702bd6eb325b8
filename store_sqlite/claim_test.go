package sqlitestore

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
)

// TestLosingClaimWritesNothing: a claim of a live key, in flight or
// completed, reports the record and adds nothing to the write-ahead log,
// so replays and duplicates cost no disk write.
func TestLosingClaimWritesNothing(t *testing.T) {
	path := testFile(t)
	s := newTestStoreOn(t, path)
	ctx := context.Background()
	rec := mustClaim(t, s, "in-flight", "t", time.Minute)
	done := mustClaim(t, s, "completed", "t", time.Minute)
	require.NoError(t, s.Complete(ctx, "completed", done.Owner, &store.Response{Status: 201, Body: []byte("ok")}, time.Hour))
	walSize := func() int64 {
		info, err := os.Stat(path + "-wal")
		require.NoError(t, err)
		return info.Size()
	}
	before := walSize()
	for range 50 {
		for _, key := range []string{"in-flight", "completed"} {
			got, claimed, err := s.Claim(ctx, key, "fp", "other", time.Minute)
			require.NoError(t, err)
			require.False(t, claimed)
			require.Positive(t, got.TTL)
		}
	}
	assert.Equal(t, before, walSize(), "losing claims wrote to the log")
	require.NoError(t, s.Renew(ctx, "in-flight", rec.Owner, time.Minute), "the owner still holds its lease")
}

// TestClaimOfABusyFile: while another handle holds the file's write lock,
// a claim of a free key is answered in flight for its own fingerprint, with
// no owner, once its deadline passes (the caller's 409); a live key is
// still answered from its row; a claim whose context is cancelled fails.
func TestClaimOfABusyFile(t *testing.T) {
	path := testFile(t)
	s := newTestStoreOn(t, path)
	mustClaim(t, s, "live", "owner", time.Minute)
	conn, err := openTestDB(t, path).Conn(t.Context())
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(t.Context(), "BEGIN IMMEDIATE")
	require.NoError(t, err)
	defer rollback(t.Context(), conn)

	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	for _, c := range []struct {
		name    string
		key     string
		timeout time.Duration // 0: cancelled
		want    store.Record
	}{
		{"free key", "free", 100 * time.Millisecond, store.Record{State: store.StateInFlight, Fingerprint: "mine"}},
		{"live key", "live", 100 * time.Millisecond, store.Record{State: store.StateInFlight, Fingerprint: "fp", Owner: store.Lease{Fence: 1}}},
		{"cancelled", "free", 0, store.Record{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := cancelled
			if c.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(t.Context(), c.timeout)
				defer cancel()
			}
			rec, claimed, err := s.Claim(ctx, c.key, "mine", "other", time.Minute)
			if c.timeout == 0 {
				require.ErrorIs(t, err, context.Canceled)
				return
			}
			require.NoError(t, err)
			assert.False(t, claimed)
			rec.TTL = 0
			assert.Equal(t, c.want, rec)
		})
	}
}

// BenchmarkLosingClaim measures a claim of a key in flight under another
// token, what each duplicate of a request costs the store's turn.
func BenchmarkLosingClaim(b *testing.B) {
	s := newTestStore(b)
	ctx := context.Background()
	_, claimed, err := s.Claim(ctx, "in-flight", "fp", "t", time.Hour)
	require.True(b, claimed)
	require.NoError(b, err)
	for b.Loop() {
		if _, claimed, err := s.Claim(ctx, "in-flight", "fp", "other", time.Hour); err != nil || claimed {
			b.Fatalf("claimed %v, err %v", claimed, err)
		}
	}
}
