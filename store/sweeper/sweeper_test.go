package sweeper

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestStart: the first round runs at once, later ones every interval, none
// after ctx is done, and the channel closes once the goroutine has stopped.
func TestStart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var rounds atomic.Int64
	done := Start(ctx, "test", 20*time.Millisecond, time.Hour, func(context.Context) { rounds.Add(1) })
	require.Eventually(t, func() bool { return rounds.Load() >= 1 }, time.Second, time.Millisecond, "the first round runs at once")
	require.Eventually(t, func() bool { return rounds.Load() >= 3 }, 5*time.Second, 5*time.Millisecond, "later rounds follow")
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the sweeper did not stop when its context ended")
	}
	stopped := rounds.Load()
	time.Sleep(60 * time.Millisecond)
	require.Equal(t, stopped, rounds.Load(), "no round after the sweeper stopped")
}

// TestStartInterval: an interval of 0 means the default, and a negative one
// panics, naming the store.
func TestStartInterval(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var rounds atomic.Int64
	Start(ctx, "test", 0, 20*time.Millisecond, func(context.Context) { rounds.Add(1) })
	require.Eventually(t, func() bool { return rounds.Load() >= 3 }, 5*time.Second, 5*time.Millisecond, "rounds at the default interval")
	require.PanicsWithValue(t, "test: StartSweeper expects interval >= 0", func() {
		Start(ctx, "test", -1, time.Minute, func(context.Context) {})
	})
}
