package idempotency_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
)

// TestWaitMode: with WithWait, a duplicate of a request in flight waits for
// its outcome.
func TestWaitMode(t *testing.T) {
	t.Run("replays when the first completes", func(t *testing.T) {
		h := &paymentHandler{delay: 200 * time.Millisecond}
		mw := idempotency.New(idempotency.WithWait(5 * time.Second))(h)
		var wg sync.WaitGroup
		responses := make([]*http.Response, 5)
		wg.Go(func() { responses[0] = post(mw, "k", `{"n":1}`) })
		require.Eventually(t, func() bool { return h.runs.Load() == 1 }, time.Second, time.Millisecond)
		for i := 1; i < len(responses); i++ {
			wg.Go(func() { responses[i] = post(mw, "k", `{"n":1}`) })
		}
		wg.Wait()
		require.Empty(t, responses[0].Header.Get("Idempotent-Replayed"))
		for _, resp := range responses[1:] {
			require.Equal(t, http.StatusCreated, resp.StatusCode)
			require.Equal(t, "true", resp.Header.Get("Idempotent-Replayed"))
			require.Equal(t, `{"n":1}`, readAll(t, resp))
		}
		require.EqualValues(t, 1, h.runs.Load())
	})

	t.Run("times out with 409", func(t *testing.T) {
		h := &paymentHandler{gate: make(chan struct{})}
		mw := idempotency.New(idempotency.WithWait(50 * time.Millisecond))(h)
		done := startFirst(t, mw, h, "k", "{}")
		dup := postWithin(t, 5*time.Second, mw, "k", "{}")
		require.NotEmpty(t, dup.Header.Get("Retry-After"))
		requireProblem(t, dup, http.StatusConflict, idempotency.ProblemKeyInFlight)
		close(h.gate)
		<-done
		require.EqualValues(t, 1, h.runs.Load())
	})

	t.Run("runs when the first is released", func(t *testing.T) {
		h := &paymentHandler{delay: 100 * time.Millisecond, status: http.StatusServiceUnavailable}
		mw := idempotency.New(idempotency.WithWait(5 * time.Second))(h)
		done := startFirst(t, mw, h, "k", "{}")
		post(mw, "k", "{}")
		<-done
		require.EqualValues(t, 2, h.runs.Load(), "the waiting duplicate claims the released key and runs")
	})

	// TestDeadlineWhileWaiting: a duplicate waiting (WithWait) for an
	// in-flight key whose own deadline passes gets 409, as when the wait times
	// out, not an empty 200.
	t.Run("deadline while waiting gets 409", func(t *testing.T) {
		h := &paymentHandler{gate: make(chan struct{})}
		mw := withDeadline(200*time.Millisecond, idempotency.New(idempotency.WithWait(5*time.Second))(h))
		done := startFirst(t, mw, h, "k", "{}")
		requireProblem(t, post(mw, "k", "{}"), http.StatusConflict, idempotency.ProblemKeyInFlight)
		close(h.gate)
		<-done
	})
}

// TestWaitPollErrorNeverFailsOpen: a waiting duplicate has seen its key in
// flight; when a poll then fails, running the handler unprotected would run
// it a second time while the first may still be running, so even with
// fail-open the duplicate gets 503 and the error handler is told.
func TestWaitPollErrorNeverFailsOpen(t *testing.T) {
	s := &claimFailingStore{Store: store.NewMemory(), answered: 2, // the first request's claim and the duplicate's
		fail: func(context.Context) error { return errStoreDown }}
	errs := &errorLog{}
	h := &paymentHandler{gate: make(chan struct{})}
	mw := idempotency.New(idempotency.WithStore(s), idempotency.WithFailOpen(),
		idempotency.WithWait(5*time.Second), errs.option())(h)
	done := startFirst(t, mw, h, "k", "{}")
	defer func() { <-done }()
	defer close(h.gate)
	requireProblem(t, postWithin(t, 5*time.Second, mw, "k", "{}"),
		http.StatusServiceUnavailable, idempotency.ProblemStoreUnavailable)
	require.EqualValues(t, 1, h.runs.Load(), "the handler ran again while the first request ran")
	require.Len(t, errs.all(), 1)
	require.ErrorIs(t, errs.all()[0], errStoreDown)
}

// TestWaitEndedDuringAPoll: a waiter whose own deadline passes while a poll
// is at the store ends its wait as when it passes between polls: 409
// key-in-flight, and its deadline is not reported as a store error.
func TestWaitEndedDuringAPoll(t *testing.T) {
	s := &claimFailingStore{Store: store.NewMemory(), answered: 2, fail: stall}
	errs := &errorLog{}
	h := &paymentHandler{gate: make(chan struct{})}
	mw := idempotency.New(idempotency.WithStore(s), idempotency.WithWait(5*time.Second), errs.option())(h)
	done := startFirst(t, mw, h, "k", "{}")
	requireProblem(t, post(withDeadline(200*time.Millisecond, mw), "k", "{}"),
		http.StatusConflict, idempotency.ProblemKeyInFlight)
	require.Empty(t, errs.all())
	close(h.gate)
	<-done
	require.EqualValues(t, 1, h.runs.Load())
}

// TestWaitsLooksReachTheStore: a waiter's looks are bounded by its
// request, not by its wait's end. Its last look, which falls at the wait's
// end, still reaches a store that honours its context, and finds the first
// request completed in the last interval; and a look whose claim the store
// made, but whose reply came after the wait's end, runs the handler
// rather than leaving the key claimed with nobody running it.
func TestWaitsLooksReachTheStore(t *testing.T) {
	t.Run("last look", func(t *testing.T) {
		// The looks come 10, 30, 70, 150, 310 and 560 ms into the wait: the
		// first request is done after the fifth and before the last, at the
		// wait's end.
		h := &paymentHandler{delay: 340 * time.Millisecond}
		mw := idempotency.New(idempotency.WithStore(deadlineStore{store.NewMemory()}), idempotency.WithWait(560*time.Millisecond))(h)
		done := startFirst(t, mw, h, "k", "{}")
		dup := postWithin(t, 5*time.Second, mw, "k", "{}")
		<-done
		require.Equal(t, http.StatusCreated, dup.StatusCode)
		require.Equal(t, "true", dup.Header.Get("Idempotent-Replayed"))
	})
	t.Run("claim answered late", func(t *testing.T) {
		s := &lateClaimStore{Memory: store.NewMemory(), answered: 2, delay: 300 * time.Millisecond}
		h := &paymentHandler{gate: make(chan struct{}), status: http.StatusServiceUnavailable} // released
		mw := idempotency.New(idempotency.WithStore(s), idempotency.WithWait(200*time.Millisecond))(h)
		done := startFirst(t, mw, h, "k", "{}")
		time.AfterFunc(50*time.Millisecond, func() { close(h.gate) }) // released while the duplicate waits
		dup := postWithin(t, 5*time.Second, mw, "k", "{}")
		<-done
		require.Equal(t, http.StatusServiceUnavailable, dup.StatusCode, "the waiter's claim ran the handler")
		require.EqualValues(t, 2, h.runs.Load())
	})
}

// deadlineStore is a store without Watch (its waiters poll) whose claims
// fail at once on a context that has ended or passed its deadline, as
// go-redis's and pgx's calls do.
type deadlineStore struct{ store.Store }

func (s deadlineStore) Claim(ctx context.Context, key, fp, token string, lease time.Duration) (store.Record, bool, error) {
	if deadline, ok := ctx.Deadline(); ctx.Err() != nil || ok && !time.Now().Before(deadline) {
		return store.Record{}, false, context.DeadlineExceeded
	}
	return s.Store.Claim(ctx, key, fp, token, lease)
}

// lateClaimStore makes each claim after the first answered at once, but
// answers one that wins only after delay, as over a slow link: a caller
// whose context ends first gets its error, though the claim was made.
type lateClaimStore struct {
	*store.Memory
	claims   atomic.Int64
	answered int64
	delay    time.Duration
}

func (s *lateClaimStore) Claim(ctx context.Context, key, fp, token string, lease time.Duration) (store.Record, bool, error) {
	rec, claimed, err := s.Memory.Claim(ctx, key, fp, token, lease)
	if s.claims.Add(1) <= s.answered || !claimed {
		return rec, claimed, err
	}
	select {
	case <-ctx.Done():
		return store.Record{}, false, ctx.Err()
	case <-time.After(s.delay):
		return rec, claimed, err
	}
}

// TestPollWokenByTheStore: with a store.Watcher and fallback polls an hour
// apart, loops waiting on one key are woken by its completion or release,
// every one of them: the wake-ups answer them, not the timer. A waiter
// looks once after a completion; after a release, one waiter claims the
// key and completes it, and the others look once more, woken by that.
func TestPollWokenByTheStore(t *testing.T) {
	const waiters = 20
	done := &store.Response{Status: http.StatusOK}
	for _, tc := range []struct {
		name     string
		finish   func(ctx context.Context, m *store.Memory, owner store.Lease) error
		maxLooks int64
	}{
		{"complete", func(ctx context.Context, m *store.Memory, owner store.Lease) error {
			return m.Complete(ctx, "k", owner, done, time.Hour)
		}, waiters},
		{"release", func(ctx context.Context, m *store.Memory, owner store.Lease) error {
			return m.Release(ctx, "k", owner)
		}, 2 * waiters},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			m := store.NewMemory()
			rec, _, err := m.Claim(ctx, "k", "fp", "owner", time.Hour)
			require.NoError(t, err)
			var looks atomic.Int64
			ended := make(chan bool, waiters)
			for i := range waiters {
				token := fmt.Sprint("waiter-", i)
				go func() {
					ended <- idempotency.PollEvery(ctx, time.Hour, time.Hour, m, "k", func() bool {
						looks.Add(1)
						rec, claimed, err := m.Claim(ctx, "k", "fp", token, time.Hour)
						if claimed {
							err = m.Complete(ctx, "k", rec.Owner, done, time.Hour)
						}
						return err == nil && (claimed || rec.State != store.StateInFlight)
					})
				}()
			}
			require.NoError(t, tc.finish(ctx, m, rec.Owner))
			for range waiters {
				select {
				case ok := <-ended:
					require.True(t, ok)
				case <-time.After(5 * time.Second):
					t.Fatal("a waiter was not woken")
				}
			}
			require.LessOrEqual(t, looks.Load(), tc.maxLooks)
		})
	}
}

// TestPollHoldsAfterSpuriousWakeUps: a store whose watches fire at once
// while the key stays in flight (as watches woken by a dropped connection
// do) cannot make the waiting loop spin: over a 300 ms wait, with fallback
// polls an hour apart, it looks a few times, each after a longer pause,
// not thousands. And each round's watch starts before the last one stops.
func TestPollHoldsAfterSpuriousWakeUps(t *testing.T) {
	ctx := t.Context()
	s := newWatchStore()
	s.jumpy = true
	_, _, err := s.Claim(ctx, "k", "fp", "owner", time.Hour)
	require.NoError(t, err)
	var looks atomic.Int64
	done := idempotency.PollEvery(ctx, time.Hour, 300*time.Millisecond, s, "k", func() bool {
		looks.Add(1)
		rec, _, err := s.Claim(ctx, "k", "fp", "waiter", time.Hour)
		return err == nil && rec.State != store.StateInFlight
	})
	require.False(t, done, "the key stayed in flight: the wait times out")
	require.GreaterOrEqual(t, looks.Load(), int64(5), "each wake-up is followed by a look")
	require.LessOrEqual(t, looks.Load(), int64(20), "the looks are held off, not back to back")
	s.mu.Lock()
	defer s.mu.Unlock()
	require.Equal(t, s.started, s.stopped, "watches started and stopped")
	for i, open := range s.openAtStart[1:] {
		require.Equal(t, 1, open, "watch %d started while the last one was open", i+1)
	}
}

// watchStore is a memory store whose watches are counted, with the keys
// they watch and the keys claimed, the watches started and stopped, and
// how many were open as each started. A silent one's watches never fire; a
// jumpy one's fire at once; a failing one's Watch returns fail.
type watchStore struct {
	*store.Memory
	silent, jumpy    bool
	fail             error
	mu               sync.Mutex
	watched          map[string]int
	claimed          map[string]bool
	started, stopped int
	openAtStart      []int
}

func newWatchStore() *watchStore {
	return &watchStore{Memory: store.NewMemory(), watched: map[string]int{}, claimed: map[string]bool{}}
}

func (s *watchStore) Claim(ctx context.Context, key, fp, token string, lease time.Duration) (store.Record, bool, error) {
	s.mu.Lock()
	s.claimed[key] = true
	s.mu.Unlock()
	return s.Memory.Claim(ctx, key, fp, token, lease)
}

func (s *watchStore) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.watched[key]++
	if s.fail != nil {
		return nil, nil, s.fail
	}
	changed, stop, err := s.Memory.Watch(ctx, key)
	switch {
	case s.silent:
		changed = make(chan struct{})
	case s.jumpy:
		fired := make(chan struct{})
		close(fired)
		changed = fired
	}
	s.openAtStart = append(s.openAtStart, s.started-s.stopped)
	s.started++
	return changed, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.stopped++
		stop()
	}, err
}

// requireWatchedClaimedKey requires s to have been watched, only on the
// keys claimed, and every watch started to have been stopped.
func requireWatchedClaimedKey(t *testing.T, s *watchStore) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	require.NotEmpty(t, s.watched, "the waiters watched the key")
	for key := range s.watched {
		require.True(t, s.claimed[key], "watched %q, which nobody claimed", key)
	}
	require.Equal(t, s.started, s.stopped, "watches started and stopped")
}

// awaitWatches waits until s has been watched n times.
func awaitWatches(t *testing.T, s *watchStore, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		watches := 0
		for _, w := range s.watched {
			watches += w
		}
		return watches >= n
	}, 5*time.Second, time.Millisecond, "%d watches", n)
}

// watchStores are the stores the waiting tests run on: a working watch,
// and two that leave the waiters to the fallback polls.
func watchStores() map[string]func() *watchStore {
	return map[string]func() *watchStore{
		"wake-ups":          newWatchStore,
		"watch never fires": func() *watchStore { s := newWatchStore(); s.silent = true; return s },
		"watch fails":       func() *watchStore { s := newWatchStore(); s.fail = errStoreDown; return s },
	}
}

// TestWaitWithAWatcher: with WithWait, many duplicates waiting on one key
// watch it and all replay the first request's response, the handler
// running once; when the watch never fires or fails, the fallback polls
// answer them all the same, after the first (the first request completes
// once each duplicate has watched twice: its first fallback poll is past).
// A failed watch is not reported to the error handler: the wait polls.
func TestWaitWithAWatcher(t *testing.T) {
	for name, newStore := range watchStores() {
		t.Run(name, func(t *testing.T) {
			const duplicates = 20
			s := newStore()
			h := &paymentHandler{gate: make(chan struct{})}
			errs := &errorLog{}
			mw := idempotency.New(idempotency.WithStore(s), idempotency.WithWait(10*time.Second), errs.option())(h)
			done := startFirst(t, mw, h, "k", `{"n":1}`)
			responses := make(chan *http.Response, duplicates)
			for range duplicates {
				go func() { responses <- post(mw, "k", `{"n":1}`) }()
			}
			awaitWatches(t, s, 2*duplicates)
			close(h.gate)
			<-done
			for range duplicates {
				select {
				case resp := <-responses:
					require.Equal(t, http.StatusCreated, resp.StatusCode)
					require.Equal(t, "true", resp.Header.Get("Idempotent-Replayed"))
				case <-time.After(5 * time.Second):
					t.Fatal("a duplicate was not answered")
				}
			}
			require.EqualValues(t, 1, h.runs.Load())
			requireWatchedClaimedKey(t, s)
			require.Empty(t, errs.all())
		})
	}
}
