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
