package batch

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// call is an Item that records what happened to it.
type call struct {
	n       int
	sent    atomic.Int32 // times send got it
	settled error
}

func (c *call) Settle(err error) { c.settled = err }

// sendEither returns a Sender that hands every call it sends to send, a
// call sent alone as a batch of one, and sends nothing again.
func sendEither(lanes int, send func(ctx context.Context, items []*call)) *Sender[*call] {
	return New(lanes, func(ctx context.Context, c *call) { send(ctx, []*call{c}) },
		func(ctx context.Context, items []*call) []*call { send(ctx, items); return nil })
}

// waitQueued waits until n calls wait for a lane.
func waitQueued(t *testing.T, s *Sender[*call], n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.waiting) == n
	}, 5*time.Second, time.Millisecond)
}

func TestDoSendsAloneOnAFreeLane(t *testing.T) {
	var batches [][]*call
	s := sendEither(1, func(_ context.Context, items []*call) { batches = append(batches, items) })
	c := &call{}
	require.NoError(t, s.Do(context.Background(), c))
	assert.Equal(t, [][]*call{{c}}, batches)
	assert.Zero(t, s.busy, "the lane is free again")
}

func TestDoBatchesTheCallsThatWaitedForALane(t *testing.T) {
	release := make(chan struct{})
	var (
		mu    sync.Mutex
		sizes []int
	)
	s := sendEither(1, func(_ context.Context, items []*call) {
		mu.Lock()
		sizes = append(sizes, len(items))
		first := len(sizes) == 1
		mu.Unlock()
		for _, c := range items {
			c.sent.Add(1)
		}
		if first {
			<-release
		}
	})
	var wg sync.WaitGroup
	wg.Go(func() { assert.NoError(t, s.Do(context.Background(), &call{})) })
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(sizes) == 1 }, 5*time.Second, time.Millisecond)
	waiting := make([]*call, 5)
	for i := range waiting {
		waiting[i] = &call{n: i}
		wg.Go(func() { assert.NoError(t, s.Do(context.Background(), waiting[i])) })
	}
	waitQueued(t, s, len(waiting))
	close(release)
	wg.Wait()
	assert.Equal(t, []int{1, len(waiting)}, sizes, "the five waiting calls went out together")
	for _, c := range waiting {
		assert.EqualValues(t, 1, c.sent.Load())
	}
}

// TestDoUnderARace has many goroutines race through a Sender: every call is
// sent once, and never more batches than lanes are in flight.
func TestDoUnderARace(t *testing.T) {
	const lanes, goroutines, calls = 2, 64, 200
	var inFlight, most, batches, sent atomic.Int32
	s := sendEither(lanes, func(_ context.Context, items []*call) {
		n := inFlight.Add(1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		for _, c := range items {
			c.sent.Add(1)
			sent.Add(1)
		}
		batches.Add(1)
		time.Sleep(20 * time.Microsecond)
		inFlight.Add(-1)
	})
	all := make([]*call, goroutines*calls)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range calls {
				c := &call{n: g*calls + i}
				all[c.n] = c
				assert.NoError(t, s.Do(context.Background(), c))
				assert.EqualValues(t, 1, c.sent.Load(), "a call returned before it was sent")
			}
		})
	}
	wg.Wait()
	for _, c := range all {
		assert.EqualValues(t, 1, c.sent.Load())
	}
	assert.EqualValues(t, len(all), sent.Load())
	assert.LessOrEqual(t, most.Load(), int32(lanes))
	assert.Less(t, batches.Load(), int32(len(all)), "no two calls ever shared a round trip")
	t.Logf("%d calls in %d batches", len(all), batches.Load())
}

func TestDoTakesBackACallWhoseContextEndsWhileItWaits(t *testing.T) {
	release := make(chan struct{})
	var got []*call
	s := sendEither(1, func(_ context.Context, items []*call) {
		got = append(got, items...)
		if len(got) == 1 {
			<-release
		}
	})
	first := &call{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		assert.NoError(t, s.Do(context.Background(), first))
	}()
	require.Eventually(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.busy == 1 }, 5*time.Second, time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	late := &call{}
	err := s.Do(ctx, late)
	require.ErrorIs(t, err, context.DeadlineExceeded, "the caller waited for the busy lane past its deadline")
	assert.Zero(t, s.Waiting(), "the call is still queued")
	close(release)
	<-done
	require.Eventually(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.busy == 0 }, 5*time.Second, time.Millisecond)
	assert.Equal(t, []*call{first}, got, "a call taken back was sent")
}

type valueKey struct{}

// seen is what a batch's send saw of its context.
type seen struct {
	deadline time.Time
	bounded  bool
	value    any
	err      error
}

// heldBatch returns a Sender with one lane whose first call (n 0) holds
// the lane until release is closed, and whose next batch reports its
// context on batches once sent is closed (after inBatch closes).
func heldBatch() (s *Sender[*call], release, inBatch, sent chan struct{}, batches chan seen) {
	release, inBatch, sent = make(chan struct{}), make(chan struct{}), make(chan struct{})
	batches = make(chan seen, 1)
	s = sendEither(1, func(ctx context.Context, items []*call) {
		if items[0].n == 0 {
			<-release
			return
		}
		close(inBatch)
		<-sent
		d, ok := ctx.Deadline()
		batches <- seen{d, ok, ctx.Value(valueKey{}), ctx.Err()}
	})
	return s, release, inBatch, sent, batches
}

func TestABatchOutlivesItsCallersCancellationUntilTheFirstDeadline(t *testing.T) {
	s, release, inBatch, sent, batches := heldBatch()
	var wg sync.WaitGroup
	wg.Go(func() { assert.NoError(t, s.Do(context.Background(), &call{n: 0})) })
	require.Eventually(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.busy == 1 }, 5*time.Second, time.Millisecond)

	now := time.Now()
	early, cancelEarly := context.WithDeadline(context.WithValue(context.Background(), valueKey{}, "early"), now.Add(time.Hour))
	late, cancelLate := context.WithDeadline(context.Background(), now.Add(2*time.Hour))
	defer cancelLate()
	earlyDone := make(chan error, 1)
	go func() { earlyDone <- s.Do(early, &call{n: 1}) }()
	waitQueued(t, s, 1)
	wg.Go(func() { assert.NoError(t, s.Do(late, &call{n: 2})) })
	waitQueued(t, s, 2)
	close(release)
	<-inBatch
	cancelEarly() // while the batch is out
	select {
	case err := <-earlyDone:
		t.Fatalf("Do returned %v while its call was out in a batch", err)
	case <-time.After(20 * time.Millisecond):
	}
	close(sent)
	assert.NoError(t, <-earlyDone, "a call out in a batch has the batch's outcome")
	wg.Wait()
	got := <-batches
	assert.True(t, got.bounded)
	assert.WithinDuration(t, now.Add(time.Hour), got.deadline, time.Millisecond, "the batch ends at the first deadline")
	assert.Equal(t, "early", got.value, "the batch carries the first caller's values")
	assert.NoError(t, got.err, "a caller's cancellation cut the batch")
}

func TestABatchEndsAtTheDeadlineOfTheCallersThatHaveOne(t *testing.T) {
	s, release, inBatch, sent, batches := heldBatch()
	var wg sync.WaitGroup
	wg.Go(func() { assert.NoError(t, s.Do(context.Background(), &call{n: 0})) })
	require.Eventually(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.busy == 1 }, 5*time.Second, time.Millisecond)
	bounded, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	wg.Go(func() { assert.NoError(t, s.Do(bounded, &call{n: 1})) })
	waitQueued(t, s, 1)
	wg.Go(func() { assert.NoError(t, s.Do(context.Background(), &call{n: 2})) })
	waitQueued(t, s, 2)
	close(release)
	<-inBatch
	close(sent)
	wg.Wait()
	got := <-batches
	assert.True(t, got.bounded, "a caller without a deadline left the batch unbounded")
	want, _ := bounded.Deadline()
	assert.Equal(t, want, got.deadline)
}

// TestACallOfAFailedBatchGoesAloneFromItsCaller: the calls a batch leaves
// unsettled are sent again alone, each under its caller's own context, and
// the others are not.
func TestACallOfAFailedBatchGoesAloneFromItsCaller(t *testing.T) {
	release := make(chan struct{})
	var (
		mu    sync.Mutex
		alone = map[int]any{} // call n: the value of the context it went alone with
	)
	s := New(1, func(ctx context.Context, c *call) {
		if c.n == 0 {
			<-release
		}
		mu.Lock()
		defer mu.Unlock()
		alone[c.n] = ctx.Value(valueKey{})
	}, func(_ context.Context, items []*call) []*call {
		var again []*call
		for _, c := range items {
			c.sent.Add(1)
			if c.n%2 == 1 {
				again = append(again, c)
			}
		}
		return again
	})
	var wg sync.WaitGroup
	wg.Go(func() { assert.NoError(t, s.Do(context.Background(), &call{n: 0})) })
	require.Eventually(t, func() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.busy == 1 }, 5*time.Second, time.Millisecond)
	calls := make([]*call, 4)
	for i := range calls {
		calls[i] = &call{n: i + 1}
		ctx := context.WithValue(context.Background(), valueKey{}, calls[i].n)
		wg.Go(func() { assert.NoError(t, s.Do(ctx, calls[i])) })
		waitQueued(t, s, i+1)
	}
	close(release)
	wg.Wait()
	for _, c := range calls {
		assert.EqualValues(t, 1, c.sent.Load(), "call %d went out in the batch", c.n)
	}
	assert.Equal(t, map[int]any{0: nil, 1: 1, 3: 3}, alone, "the calls left unsettled went alone, each with its own context")
}

func TestNewRefusesNoLanes(t *testing.T) {
	assert.PanicsWithValue(t, "batch: New expects lanes >= 1", func() {
		New(0, func(context.Context, *call) {}, func(context.Context, []*call) []*call { return nil })
	})
}
