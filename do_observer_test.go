package idempotency_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
)

// jobEvents collects what Do tells an observer.
type jobEvents struct {
	mu     sync.Mutex
	jobs   []idempotency.JobEvent
	leases []idempotency.LeaseResult
}

func (e *jobEvents) option() idempotency.DoOption {
	return idempotency.DoObserver(idempotency.Observer{
		Job: func(_ context.Context, ev idempotency.JobEvent) {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.jobs = append(e.jobs, ev)
		},
		Lease: func(_ context.Context, ev idempotency.LeaseEvent) {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.leases = append(e.leases, ev.Result)
		},
	})
}

// events returns the events told so far, Durations zeroed once checked:
// positive when fn ran, else 0.
func (e *jobEvents) events(t *testing.T) []idempotency.JobEvent {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []idempotency.JobEvent
	for _, ev := range e.jobs {
		require.Equal(t, ev.Ran, ev.Duration > 0, "%+v", ev)
		ev.Duration = 0
		out = append(out, ev)
	}
	return out
}

func ran(o idempotency.Outcome) idempotency.JobEvent {
	return idempotency.JobEvent{Outcome: o, Ran: true}
}

func answered(o idempotency.Outcome) idempotency.JobEvent { return idempotency.JobEvent{Outcome: o} }

type jobFn = func(ctx context.Context) ([]byte, error)

// TestDoObserver: each call of Do tells the observer its outcome, and how
// long fn ran when it ran, on a plain store and a transactional one.
func TestDoObserver(t *testing.T) {
	const took = 20 * time.Millisecond
	result := func(context.Context) ([]byte, error) { time.Sleep(took); return []byte("done"), nil }
	for _, tc := range []struct {
		name  string
		calls []jobFn // each a call of Do on one key
		want  []idempotency.JobEvent
	}{
		{"a result, then its replay", []jobFn{result, result},
			[]idempotency.JobEvent{ran(idempotency.OutcomeExecuted), answered(idempotency.OutcomeReplayed)}},
		{"a final error, then its replay", []jobFn{
			func(context.Context) ([]byte, error) { return nil, idempotency.Final(errors.New("no such card")) }, result},
			[]idempotency.JobEvent{ran(idempotency.OutcomeExecuted), answered(idempotency.OutcomeReplayed)}},
		{"an error, then a run", []jobFn{
			func(context.Context) ([]byte, error) { return nil, errors.New("smtp: 451") }, result},
			[]idempotency.JobEvent{ran(idempotency.OutcomeReleased), ran(idempotency.OutcomeExecuted)}},
		{"DoNotRecord", []jobFn{func(ctx context.Context) ([]byte, error) { idempotency.DoNotRecord(ctx); return nil, nil }},
			[]idempotency.JobEvent{ran(idempotency.OutcomeReleased)}},
		{"a panic", []jobFn{func(context.Context) ([]byte, error) { panic("boom") }},
			[]idempotency.JobEvent{ran(idempotency.OutcomeReleased)}},
		{"another fingerprint", []jobFn{result, nil},
			[]idempotency.JobEvent{ran(idempotency.OutcomeExecuted), answered(idempotency.OutcomeKeyReused)}},
	} {
		for mode, s := range bothModes() {
			t.Run(tc.name+"/"+mode, func(t *testing.T) {
				var events jobEvents
				for _, fn := range tc.calls {
					func() {
						defer func() { _ = recover() }()
						_, _ = idempotency.Do(t.Context(), s, "job", fn, events.option(), idempotency.DoFingerprint(strconv.FormatBool(fn == nil)))
					}()
				}
				if tc.name == "a result, then its replay" {
					require.GreaterOrEqual(t, events.jobs[0].Duration, took)
				}
				require.Equal(t, tc.want, events.events(t))
			})
		}
	}
}

// TestDoObserverWithoutARun: a call that finds the key in flight, at once
// or after its wait, or done but not stored, and one whose claim fails,
// each tell their outcome, and that fn did not run.
func TestDoObserverWithoutARun(t *testing.T) {
	t.Run("in flight", func(t *testing.T) {
		s := store.NewMemory()
		release := make(chan struct{})
		running := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = idempotency.Do(context.Background(), s, "job", func(context.Context) ([]byte, error) {
				close(running)
				<-release
				return nil, nil
			})
		}()
		<-running
		var events jobEvents
		_, err := idempotency.Do(t.Context(), s, "job", nil, events.option())
		require.ErrorIs(t, err, idempotency.ErrInFlight)
		_, err = idempotency.Do(t.Context(), s, "job", nil, events.option(), idempotency.DoWait(50*time.Millisecond))
		require.ErrorIs(t, err, idempotency.ErrInFlight)
		close(release)
		<-done
		require.Equal(t, []idempotency.JobEvent{answered(idempotency.OutcomeKeyInFlight), answered(idempotency.OutcomeKeyInFlight)},
			events.events(t))
	})
	t.Run("not stored", func(t *testing.T) {
		s := store.NewMemory(store.WithMaxBytes(64))
		big := func(context.Context) ([]byte, error) { return make([]byte, 1024), nil }
		var events jobEvents
		_, err := idempotency.Do(t.Context(), s, "job", big, events.option())
		require.NoError(t, err)
		_, err = idempotency.Do(t.Context(), s, "job", big, events.option())
		require.ErrorIs(t, err, idempotency.ErrNotStored)
		require.Equal(t, []idempotency.JobEvent{ran(idempotency.OutcomeExecuted), answered(idempotency.OutcomeNotReplayable)},
			events.events(t))
	})
	t.Run("store down", func(t *testing.T) {
		s := newFlakyStore()
		var events jobEvents
		s.down.Store(true)
		_, err := idempotency.Do(t.Context(), s, "job", nil, events.option())
		require.ErrorIs(t, err, errStoreDown)
		s.down.Store(false)
		_, err = idempotency.Do(t.Context(), s, "job", func(context.Context) ([]byte, error) {
			s.down.Store(true)
			return nil, nil
		}, events.option(), idempotency.DoRecordTimeout(50*time.Millisecond))
		require.ErrorIs(t, err, errStoreDown)
		require.Equal(t, []idempotency.JobEvent{answered(idempotency.OutcomeStoreUnavailable), ran(idempotency.OutcomeStoreUnavailable)},
			events.events(t))
	})
}

// TestDoObserverLeases: renewals of fn's lease reach the observer, and a
// lost lease releases the job's outcome.
func TestDoObserverLeases(t *testing.T) {
	const lease = 150 * time.Millisecond
	for _, tc := range []struct {
		name   string
		store  store.Store
		fn     jobFn
		want   idempotency.JobEvent
		result idempotency.LeaseResult
	}{
		{"renewed", store.NewMemory(), func(context.Context) ([]byte, error) { time.Sleep(lease); return nil, nil },
			ran(idempotency.OutcomeExecuted), idempotency.LeaseRenewed},
		{"lost", renewRefusingStore{store.NewMemory()}, func(ctx context.Context) ([]byte, error) { <-ctx.Done(); return nil, ctx.Err() },
			ran(idempotency.OutcomeReleased), idempotency.LeaseLost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var events jobEvents
			_, _ = idempotency.Do(t.Context(), tc.store, "job", tc.fn, events.option(),
				idempotency.DoLease(lease), idempotency.DoErrorHandler(func(context.Context, error) {}))
			require.Equal(t, []idempotency.JobEvent{tc.want}, events.events(t))
			events.mu.Lock()
			defer events.mu.Unlock()
			require.NotEmpty(t, events.leases)
			require.Equal(t, tc.result, events.leases[0])
		})
	}
}
