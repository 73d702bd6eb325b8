package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
)

// countingJob is a job under test: it counts its runs and returns result,
// or err.
type countingJob struct {
	runs   atomic.Int32
	result string
	err    error
}

func (j *countingJob) fn(context.Context) ([]byte, error) {
	j.runs.Add(1)
	if j.err != nil {
		return nil, j.err
	}
	return []byte(j.result), nil
}

// TestDoRunsOnceAndReturnsTheStoredResult: on every store, plain and
// transactional, the first call runs fn and later ones get its result,
// each its own copy: a caller that uses it as a buffer changes no later
// caller's.
func TestDoRunsOnceAndReturnsTheStoredResult(t *testing.T) {
	for name, s := range bothModes() {
		t.Run(name, func(t *testing.T) {
			job := &countingJob{result: "sent"}
			for range 3 {
				got, err := idempotency.Do(t.Context(), s, "email-42", job.fn)
				require.NoError(t, err)
				require.Equal(t, "sent", string(got))
				copy(got, "XXXX")
			}
			require.EqualValues(t, 1, job.runs.Load())
			got, err := idempotency.Do(t.Context(), s, "email-43", job.fn)
			require.NoError(t, err)
			require.Equal(t, "sent", string(got))
			require.EqualValues(t, 2, job.runs.Load(), "another key is another job")
		})
	}
}

// TestDoLeaseIsRenewedWhileFnRuns: fn runs for several leases; its key
// stays in flight all along, never taken over, and its result is stored.
func TestDoLeaseIsRenewedWhileFnRuns(t *testing.T) {
	s := store.NewMemory()
	lease := idempotency.DoLease(300 * time.Millisecond)
	done := make(chan error)
	go func() {
		_, err := idempotency.Do(t.Context(), s, "report", func(context.Context) ([]byte, error) {
			time.Sleep(time.Second)
			return []byte("long"), nil
		}, lease)
		done <- err
	}()
	probe := &countingJob{result: "probe"}
	for running := true; running; {
		select {
		case err := <-done:
			require.NoError(t, err)
			running = false
		case <-time.After(50 * time.Millisecond):
			if _, err := idempotency.Do(t.Context(), s, "report", probe.fn, lease); err != nil {
				require.ErrorIs(t, err, idempotency.ErrInFlight)
			}
		}
	}
	require.Zero(t, probe.runs.Load(), "the key was never taken over")
	got, err := idempotency.Do(t.Context(), s, "report", probe.fn, lease)
	require.NoError(t, err)
	require.Equal(t, "long", string(got))
}

// TestDoLeaseKeepersEndWithTheirLeases: 100 000 calls, each with a lease
// of its own length (as a lease derived from a deadline is) and fn run
// under it, leave under 1 MB of heap and no goroutine 2 s after the last
// returns: no keeper is kept per lease length, nor outlives its lease.
func TestDoLeaseKeepersEndWithTheirLeases(t *testing.T) {
	s := store.NewMemory()
	errRetry := errors.New("try again later") // releases the key: fn runs on every call
	call := func(lease time.Duration) {
		_, err := idempotency.Do(t.Context(), s, "report", func(context.Context) ([]byte, error) {
			return nil, errRetry
		}, idempotency.DoLease(lease))
		require.ErrorIs(t, err, errRetry)
	}
	call(2 * time.Hour)
	goroutines := runtime.NumGoroutine()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range 100_000 {
		call(time.Hour - time.Duration(i)*time.Millisecond)
	}
	for end := time.Now().Add(2 * time.Second); runtime.NumGoroutine() > goroutines && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond) // not require.Eventually: its goroutine would count
	}
	require.LessOrEqual(t, runtime.NumGoroutine(), goroutines)
	runtime.GC()
	runtime.ReadMemStats(&after)
	require.Less(t, int64(after.HeapAlloc)-int64(before.HeapAlloc), int64(1<<20), "heap retained")
}

// TestDoRacingCallersRunFnOnce: many goroutines call Do with one key at
// once; fn runs once. Those that wait all get its result; those that do
// not get the result or ErrInFlight.
func TestDoRacingCallersRunFnOnce(t *testing.T) {
	for name, wait := range map[string]time.Duration{"no wait": 0, "wait": 5 * time.Second} {
		t.Run(name, func(t *testing.T) {
			s := store.NewMemory()
			job := &countingJob{result: "done"}
			slow := func(ctx context.Context) ([]byte, error) {
				time.Sleep(20 * time.Millisecond)
				return job.fn(ctx)
			}
			var wg sync.WaitGroup
			var inFlight atomic.Int32
			for range 50 {
				wg.Go(func() {
					got, err := idempotency.Do(context.Background(), s, "k", slow, idempotency.DoWait(wait))
					if errors.Is(err, idempotency.ErrInFlight) {
						inFlight.Add(1)
						return
					}
					if err != nil || string(got) != "done" {
						t.Errorf("Do = %q, %v", got, err)
					}
				})
			}
			wg.Wait()
			require.EqualValues(t, 1, job.runs.Load())
			if wait > 0 {
				require.Zero(t, inFlight.Load())
			}
		})
	}
}

// TestDoErrorReleasesTheKey: an error, a panic or a DoNotRecord frees the
// key, so the next delivery runs fn again; the error and the panic reach
// the caller.
func TestDoErrorReleasesTheKey(t *testing.T) {
	for name, s := range bothModes() {
		t.Run(name, func(t *testing.T) {
			failed := errors.New("smtp: connection refused")
			_, err := idempotency.Do(t.Context(), s, "error", func(context.Context) ([]byte, error) { return nil, failed })
			require.ErrorIs(t, err, failed)
			require.False(t, idempotency.IsFinal(err))

			require.PanicsWithValue(t, "boom", func() {
				_, _ = idempotency.Do(t.Context(), s, "panic", func(context.Context) ([]byte, error) { panic("boom") })
			})

			got, err := idempotency.Do(t.Context(), s, "refused", func(ctx context.Context) ([]byte, error) {
				require.True(t, idempotency.DoNotRecord(ctx))
				return []byte("not recorded"), nil
			})
			require.NoError(t, err)
			require.Equal(t, "not recorded", string(got))

			for _, key := range []string{"error", "panic", "refused"} {
				job := &countingJob{result: "ran"}
				_, err := idempotency.Do(t.Context(), s, key, job.fn)
				require.NoError(t, err)
				require.EqualValues(t, 1, job.runs.Load(), "%s released its key", key)
			}
		})
	}
}

// TestDoFinalErrorIsStored: an error marked Final is kept; later callers
// get its message back as a final error, without running fn.
func TestDoFinalErrorIsStored(t *testing.T) {
	for name, s := range bothModes() {
		t.Run(name, func(t *testing.T) {
			invalid := errors.New("address does not exist")
			job := &countingJob{err: idempotency.Final(invalid)}
			_, err := idempotency.Do(t.Context(), s, "k", job.fn)
			require.ErrorIs(t, err, invalid, "the first caller gets fn's own error")
			for range 2 {
				_, err = idempotency.Do(t.Context(), s, "k", job.fn)
				require.True(t, idempotency.IsFinal(err))
				require.EqualError(t, err, "address does not exist")
			}
			require.EqualValues(t, 1, job.runs.Load())
		})
	}
	require.NoError(t, idempotency.Final(nil))
}

// TestDoInFlight: a caller that finds the key held gets ErrInFlight at
// once, or waits: for the stored result, or, if the holder releases the
// key, to run fn itself. A wait ends with its context.
func TestDoInFlight(t *testing.T) {
	s := store.NewMemory()
	started, finish := make(chan struct{}), make(chan error)
	holder := make(chan error, 1)
	go func() {
		_, err := idempotency.Do(context.Background(), s, "k", func(context.Context) ([]byte, error) {
			close(started)
			return []byte("first"), <-finish
		})
		holder <- err
	}()
	<-started
	job := &countingJob{result: "second"}

	_, err := idempotency.Do(t.Context(), s, "k", job.fn)
	require.ErrorIs(t, err, idempotency.ErrInFlight)
	_, err = idempotency.Do(t.Context(), s, "k", job.fn, idempotency.DoWait(30*time.Millisecond))
	require.ErrorIs(t, err, idempotency.ErrInFlight, "the wait times out")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Millisecond)
	defer cancel()
	_, err = idempotency.Do(ctx, s, "k", job.fn, idempotency.DoWait(time.Minute))
	require.ErrorIs(t, err, idempotency.ErrInFlight, "the wait ends with its context")
	require.ErrorIs(t, err, context.DeadlineExceeded)

	waited := make(chan string)
	go func() {
		got, err := idempotency.Do(context.Background(), s, "k", job.fn, idempotency.DoWait(5*time.Second))
		waited <- fmt.Sprint(string(got), err)
	}()
	time.Sleep(30 * time.Millisecond) // the waiter is polling
	finish <- errors.New("failed: released")
	require.Error(t, <-holder)
	require.Equal(t, "second<nil>", <-waited, "the waiter claims the released key and runs fn")
	require.EqualValues(t, 1, job.runs.Load())
}

// TestDoFingerprint: on every store, a call whose fingerprint differs from
// the holder's gets ErrKeyReused, whether the key is done or in flight, and
// even when it would wait; fn does not run for it.
func TestDoFingerprint(t *testing.T) {
	for name, s := range bothModes() {
		t.Run(name, func(t *testing.T) {
			job := &countingJob{result: "charged"}
			a, b := idempotency.DoFingerprint("amount=10"), idempotency.DoFingerprint("amount=20")
			_, err := idempotency.Do(t.Context(), s, "done", job.fn, a)
			require.NoError(t, err)
			got, err := idempotency.Do(t.Context(), s, "done", job.fn, a)
			require.NoError(t, err)
			require.Equal(t, "charged", string(got))
			_, err = idempotency.Do(t.Context(), s, "done", job.fn, b)
			require.ErrorIs(t, err, idempotency.ErrKeyReused)
			_, err = idempotency.Do(t.Context(), s, "done", job.fn)
			require.ErrorIs(t, err, idempotency.ErrKeyReused, "the default fingerprint is another")

			started, finish := make(chan struct{}), make(chan struct{})
			go func() {
				_, _ = idempotency.Do(context.Background(), s, "running", func(context.Context) ([]byte, error) {
					close(started)
					<-finish
					return nil, nil
				}, a)
			}()
			<-started
			_, err = idempotency.Do(t.Context(), s, "running", job.fn, b, idempotency.DoWait(time.Minute))
			require.ErrorIs(t, err, idempotency.ErrKeyReused)
			close(finish)
			require.EqualValues(t, 1, job.runs.Load())
		})
	}
}

// TestDoScope: one key in two scopes names two jobs, each its own result;
// fn's context carries the key as given.
func TestDoScope(t *testing.T) {
	s := store.NewMemory()
	for _, scope := range []string{"tenant-a", "tenant-b", "tenant-a"} {
		got, err := idempotency.Do(t.Context(), s, "k", func(ctx context.Context) ([]byte, error) {
			key, _ := idempotency.FromContext(ctx)
			return []byte(scope + " " + key.Client), nil
		}, idempotency.DoScope(scope))
		require.NoError(t, err)
		require.Equal(t, scope+" k", string(got))
	}
	_, err := idempotency.Do(t.Context(), s, "k", (&countingJob{result: "none"}).fn)
	require.NoError(t, err)
	got, err := idempotency.Do(t.Context(), s, "k", (&countingJob{result: "again"}).fn)
	require.NoError(t, err)
	require.Equal(t, "none", string(got), "no scope is a scope of its own")
}

// renewRefusingStore is a memory store whose renewals are all refused, as
// a store refuses the renewals of an owner whose lease was taken over.
type renewRefusingStore struct{ *store.Memory }

func (s renewRefusingStore) Renew(context.Context, string, store.Lease, time.Duration) error {
	return store.ErrNotOwner
}

// TestDoLostLease: a lease lost while fn runs is reported, ends fn's
// context with ErrLeaseLost, and Do returns ErrLeaseLost; the key is free
// for the next delivery. A late result of a taken-over key is refused.
func TestDoLostLease(t *testing.T) {
	t.Run("renewal refused", func(t *testing.T) {
		s := renewRefusingStore{store.NewMemory()}
		var reported []error
		var mu sync.Mutex
		report := idempotency.DoErrorHandler(func(_ context.Context, err error) {
			mu.Lock()
			defer mu.Unlock()
			reported = append(reported, err)
		})
		_, err := idempotency.Do(t.Context(), s, "k", func(ctx context.Context) ([]byte, error) {
			<-ctx.Done()
			require.ErrorIs(t, context.Cause(ctx), idempotency.ErrLeaseLost)
			return nil, ctx.Err()
		}, idempotency.DoLease(30*time.Millisecond), report)
		require.ErrorIs(t, err, idempotency.ErrLeaseLost)
		mu.Lock()
		require.NotEmpty(t, reported)
		require.ErrorIs(t, reported[0], store.ErrNotOwner)
		var re *idempotency.RecordError
		require.ErrorAs(t, reported[0], &re, "the handler is told which record")
		require.Equal(t, idempotency.DoStorageKey("", "k"), re.Key)
		require.Equal(t, int64(1), re.Fence)
		mu.Unlock()
	})
	t.Run("taken over", func(t *testing.T) {
		shared := store.NewMemory()
		stalled := &flakyStore{Store: shared}
		quiet := idempotency.DoErrorHandler(func(context.Context, error) {})
		lease := idempotency.DoLease(50 * time.Millisecond)
		started, resume := make(chan int64), make(chan struct{})
		late := make(chan error)
		go func() {
			_, err := idempotency.Do(context.Background(), stalled, "k", func(ctx context.Context) ([]byte, error) {
				key, _ := idempotency.FromContext(ctx)
				stalled.down.Store(true) // no renewal reaches the store
				started <- key.Fence
				<-resume
				stalled.down.Store(false)
				return []byte("late"), nil
			}, lease, quiet)
			late <- err
		}()
		firstFence := <-started
		var got []byte
		var fence int64
		require.Eventually(t, func() bool {
			var err error
			got, err = idempotency.Do(t.Context(), shared, "k", func(ctx context.Context) ([]byte, error) {
				key, _ := idempotency.FromContext(ctx)
				fence = key.Fence
				return []byte("new owner"), nil
			}, lease, quiet)
			return err == nil
		}, 5*time.Second, 10*time.Millisecond, "the lapsed lease is taken over")
		require.Equal(t, "new owner", string(got))
		close(resume)
		require.ErrorIs(t, <-late, idempotency.ErrLeaseLost)
		got, err := idempotency.Do(t.Context(), shared, "k", (&countingJob{}).fn)
		require.NoError(t, err)
		require.Equal(t, "new owner", string(got), "the late result did not overwrite the new owner's")
		require.Greater(t, fence, firstFence)
	})
}

// TestDoContextCarriesTheKey: fn sees its key through FromContext, and
// derives the same downstream key on every run.
func TestDoContextCarriesTheKey(t *testing.T) {
	s := store.NewMemory()
	var derived []string
	fn := func(ctx context.Context) ([]byte, error) {
		key, ok := idempotency.FromContext(ctx)
		require.True(t, ok)
		require.Equal(t, "order-7", key.Client)
		require.Positive(t, key.Fence)
		derived = append(derived, key.Derive("charge"))
		return nil, errors.New("retry me")
	}
	for range 2 {
		_, _ = idempotency.Do(t.Context(), s, "order-7", fn)
	}
	require.Len(t, derived, 2)
	require.Equal(t, derived[0], derived[1])
}

// TestDoKeysNeverMeetTheMiddlewares: a job and a request with the same
// key, in the same store, are two records.
func TestDoKeysNeverMeetTheMiddlewares(t *testing.T) {
	s := store.NewMemory()
	_, err := idempotency.Do(t.Context(), s, "k", (&countingJob{result: "job"}).fn)
	require.NoError(t, err)
	h := &paymentHandler{}
	resp := post(idempotency.New(idempotency.WithStore(s))(h), "k", "{}")
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	require.EqualValues(t, 1, h.runs.Load())
}

// TestDoMisconfigurationPanics: a nil store, a nil pointer to one, and
// out-of-range options panic.
func TestDoMisconfigurationPanics(t *testing.T) {
	var never *store.Memory
	for _, s := range []store.Store{nil, never} {
		require.PanicsWithValue(t, "idempotency: Do expects a store", func() {
			_, _ = idempotency.Do(t.Context(), s, "k", (&countingJob{}).fn)
		}, "store %#v", s)
	}
	for name, f := range map[string]func(){
		"lease":         func() { idempotency.DoLease(0) },
		"retention":     func() { idempotency.DoRetention(-time.Second) },
		"record":        func() { idempotency.DoRecordTimeout(0) },
		"wait":          func() { idempotency.DoWait(-time.Second) },
		"error handler": func() { idempotency.DoErrorHandler(nil) },
		"fingerprint":   func() { idempotency.DoFingerprint("") },
	} {
		t.Run(name, func(t *testing.T) { require.Panics(t, f) })
	}
}

// A job delivered twice runs once: the second delivery gets the stored
// result. Keyed by the business id, not by the queue's message id.
func ExampleDo() {
	s := store.NewMemory() // shared by every worker: a Redis or Postgres store
	send := func(ctx context.Context) ([]byte, error) {
		fmt.Println("sending the receipt of order 42")
		return []byte("receipt sent"), nil
	}
	for range 2 {
		result, err := idempotency.Do(context.Background(), s, "receipt:order-42", send)
		fmt.Println(string(result), err)
	}
	// Output:
	// sending the receipt of order 42
	// receipt sent <nil>
	// receipt sent <nil>
}

// TestDoWaitWithAWatcher: callers waiting (DoWait) on a key held by
// another watch it and all get the holder's result, fn running once; when
// the watch never fires or fails, the fallback polls answer them all the
// same, after the first (see TestWaitWithAWatcher).
func TestDoWaitWithAWatcher(t *testing.T) {
	for name, newStore := range watchStores() {
		t.Run(name, func(t *testing.T) {
			const waiters = 20
			s := newStore()
			job := &countingJob{result: "sent"}
			started, finish := make(chan struct{}), make(chan struct{})
			holder := make(chan error, 1)
			go func() {
				_, err := idempotency.Do(context.Background(), s, "k", func(ctx context.Context) ([]byte, error) {
					close(started)
					<-finish
					return job.fn(ctx)
				})
				holder <- err
			}()
			<-started
			results := make(chan string, waiters)
			for range waiters {
				go func() {
					got, err := idempotency.Do(t.Context(), s, "k", job.fn, idempotency.DoWait(10*time.Second))
					results <- fmt.Sprint(string(got), err)
				}()
			}
			awaitWatches(t, s, 2*waiters)
			close(finish)
			require.NoError(t, <-holder)
			for range waiters {
				select {
				case got := <-results:
					require.Equal(t, "sent<nil>", got)
				case <-time.After(5 * time.Second):
					t.Fatal("a waiter got no result")
				}
			}
			require.EqualValues(t, 1, job.runs.Load())
			requireWatchedClaimedKey(t, s)
		})
	}
}

// TestDoWaitStopsItsWatchWhenFnPanics: a waiting caller that claims the
// released key and whose fn panics has stopped every watch it started
// when the panic leaves Do.
func TestDoWaitStopsItsWatchWhenFnPanics(t *testing.T) {
	s := newWatchStore()
	started, finish := make(chan struct{}), make(chan struct{})
	holder := make(chan error, 1)
	go func() {
		_, err := idempotency.Do(context.Background(), s, "k", func(context.Context) ([]byte, error) {
			close(started)
			<-finish
			return nil, errors.New("failed: released")
		})
		holder <- err
	}()
	<-started
	panicked := make(chan any, 1)
	go func() {
		defer func() { panicked <- recover() }()
		_, _ = idempotency.Do(t.Context(), s, "k", func(context.Context) ([]byte, error) {
			panic("fn panicked")
		}, idempotency.DoWait(10*time.Second))
	}()
	awaitWatches(t, s, 1)
	close(finish)
	require.Error(t, <-holder)
	select {
	case p := <-panicked:
		require.Equal(t, "fn panicked", p)
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter did not claim the released key")
	}
	requireWatchedClaimedKey(t, s)
}

// TestDoAfterTheRetention: on a store that keeps tombstones, a call after
// the job's record expired gets ErrKeyExpired naming when the job
// completed, and fn does not run again.
func TestDoAfterTheRetention(t *testing.T) {
	s := store.NewMemory(store.WithTombstones(time.Hour))
	job := &countingJob{result: "receipt sent"}
	before := time.Now().Truncate(time.Second)
	_, err := idempotency.Do(t.Context(), s, "receipt-1", job.fn, idempotency.DoRetention(100*time.Millisecond))
	require.NoError(t, err)
	after := time.Now()
	time.Sleep(300 * time.Millisecond)
	_, err = idempotency.Do(t.Context(), s, "receipt-1", job.fn)
	require.ErrorIs(t, err, idempotency.ErrKeyExpired)
	_, at, ok := strings.Cut(err.Error(), "completed at ")
	require.True(t, ok, "%v names the completion", err)
	completed, perr := time.Parse(time.RFC3339, at)
	require.NoError(t, perr)
	require.WithinRange(t, completed, before, after)
	require.EqualValues(t, 1, job.runs.Load())
}
