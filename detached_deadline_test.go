package idempotency

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type valueKey struct{}

// TestDetachedDeadline: a record call's context keeps its parent's values but
// not its cancellation, ends at its own deadline (for the store and for any
// context derived from it), ends as cancelled when stopped, and costs no
// timer while nobody asks whether it has ended.
func TestDetachedDeadline(t *testing.T) {
	parent, cancelParent := context.WithCancel(context.WithValue(context.Background(), valueKey{}, "v"))

	t.Run("values, not cancellation", func(t *testing.T) {
		c := newDetachedDeadline(parent, time.Minute)
		defer c.stop()
		cancelParent()
		require.Equal(t, "v", c.Value(valueKey{}))
		require.NoError(t, c.Err())
		select {
		case <-c.Done():
			t.Fatal("the parent's cancellation reached the record call")
		default:
		}
		child, cancel := context.WithCancel(c)
		defer cancel()
		require.NoError(t, child.Err(), "a context derived from it does not inherit the parent's cancellation either")
		require.NoError(t, context.Cause(c))
	})

	t.Run("deadline", func(t *testing.T) {
		c := newDetachedDeadline(context.Background(), 30*time.Millisecond)
		defer c.stop()
		deadline, ok := c.Deadline()
		require.True(t, ok)
		require.WithinDuration(t, time.Now().Add(30*time.Millisecond), deadline, 20*time.Millisecond)
		child, cancel := context.WithCancel(c)
		defer cancel()
		select {
		case <-c.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("the deadline did not end the context")
		}
		require.ErrorIs(t, c.Err(), context.DeadlineExceeded)
		require.Eventually(t, func() bool { return child.Err() != nil }, 5*time.Second, time.Millisecond)
		require.ErrorIs(t, child.Err(), context.DeadlineExceeded)
	})

	t.Run("past its deadline before anyone looked", func(t *testing.T) {
		c := newDetachedDeadline(context.Background(), time.Nanosecond)
		defer c.stop()
		time.Sleep(time.Millisecond)
		require.ErrorIs(t, c.Err(), context.DeadlineExceeded)
		<-c.Done()
	})

	t.Run("stop", func(t *testing.T) {
		c := newDetachedDeadline(context.Background(), time.Minute)
		done := c.Done()
		c.stop()
		<-done
		require.ErrorIs(t, c.Err(), context.Canceled)
		c.stop() // twice is harmless
	})

	t.Run("no timer unless asked", func(t *testing.T) {
		c := newDetachedDeadline(context.Background(), time.Minute)
		c.stop()
		require.Nil(t, c.timer)
		allocs := testing.AllocsPerRun(100, func() {
			newDetachedDeadline(parent, time.Minute).stop()
		})
		require.LessOrEqual(t, allocs, 2.0, "the detached parent and the context itself")
	})
}
