package idempotency_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/idempotencytest"
	"github.com/seed43327c4c/idempotency/store"
)

// observations collects what an observer is told.
type observations struct {
	mu       sync.Mutex
	requests []idempotency.RequestEvent
	stores   []idempotency.StoreEvent
	leases   []idempotency.LeaseEvent
	waits    []idempotency.WaitEvent
}

func (o *observations) option() idempotency.Option {
	return idempotency.WithObserver(idempotency.Observer{
		Request:   appender(&o.mu, &o.requests),
		StoreCall: appender(&o.mu, &o.stores),
		Lease:     appender(&o.mu, &o.leases),
		Wait:      appender(&o.mu, &o.waits),
	})
}

// appender returns an observer function that appends its event to list
// under mu.
func appender[E any](mu *sync.Mutex, list *[]E) func(context.Context, E) {
	return func(_ context.Context, e E) {
		mu.Lock()
		defer mu.Unlock()
		*list = append(*list, e)
	}
}

// outcomes counts the outcomes told so far.
func (o *observations) outcomes() map[idempotency.Outcome]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := make(map[idempotency.Outcome]int)
	for _, e := range o.requests {
		n[e.Outcome]++
	}
	return n
}

// storeOps lists the store calls told so far, "op" or "op: error".
func (o *observations) storeOps() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var ops []string
	for _, e := range o.stores {
		op := string(e.Op)
		if e.Err != nil {
			op += ": error"
		}
		ops = append(ops, op)
	}
	return ops
}

func (o *observations) leaseResults() []idempotency.LeaseResult {
	o.mu.Lock()
	defer o.mu.Unlock()
	var results []idempotency.LeaseResult
	for _, e := range o.leases {
		results = append(results, e.Result)
	}
	return results
}

func (o *observations) lastRequest() idempotency.RequestEvent {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.requests[len(o.requests)-1]
}

// statusHandler answers status with an empty body.
func statusHandler(status int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(status) })
}

// TestObserverOutcomes sends the requests of each row of the outcomes table
// and checks that each decided request is told once, with its outcome, and
// whether its handler ran.
func TestObserverOutcomes(t *testing.T) {
	ok := statusHandler(http.StatusCreated)
	cases := []struct {
		name    string
		opts    []idempotency.Option
		handler http.Handler
		send    func(t *testing.T, mw http.Handler) // the requests; the last one is the case's own
		want    map[idempotency.Outcome]int
		ran     bool // whether the last request's handler ran
	}{
		{name: "executed", handler: ok, ran: true,
			send: func(t *testing.T, mw http.Handler) { post(mw, "k", "{}") },
			want: map[idempotency.Outcome]int{idempotency.OutcomeExecuted: 1}},
		{name: "executed, not replayable", handler: ok, ran: true,
			opts: []idempotency.Option{idempotency.WithMaxResponseBytes(1)},
			send: func(t *testing.T, mw http.Handler) { post(mw, "k", "{}") },
			want: map[idempotency.Outcome]int{idempotency.OutcomeExecuted: 1}},
		{name: "replayed", handler: ok,
			send: func(t *testing.T, mw http.Handler) { post(mw, "k", "{}"); post(mw, "k", "{}") },
			want: map[idempotency.Outcome]int{idempotency.OutcomeExecuted: 1, idempotency.OutcomeReplayed: 1}},
		{name: "key reused", handler: ok,
			send: func(t *testing.T, mw http.Handler) { post(mw, "k", "{}"); post(mw, "k", `{"a":1}`) },
			want: map[idempotency.Outcome]int{idempotency.OutcomeExecuted: 1, idempotency.OutcomeKeyReused: 1}},
		{name: "not replayable", handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte("longer than the limit"))
		}), opts: []idempotency.Option{idempotency.WithMaxResponseBytes(4)},
			send: func(t *testing.T, mw http.Handler) { post(mw, "k", "{}"); post(mw, "k", "{}") },
			want: map[idempotency.Outcome]int{idempotency.OutcomeExecuted: 1, idempotency.OutcomeNotReplayable: 1}},
		{name: "released: 5xx", handler: statusHandler(http.StatusBadGateway), ran: true,
			send: func(t *testing.T, mw http.Handler) { post(mw, "k", "{}") },
			want: map[idempotency.Outcome]int{idempotency.OutcomeReleased: 1}},
		{name: "released: policy", handler: ok, ran: true,
			opts: []idempotency.Option{idempotency.WithRecordPolicy(func(*http.Request, int) bool { return false })},
			send: func(t *testing.T, mw http.Handler) { post(mw, "k", "{}") },
			want: map[idempotency.Outcome]int{idempotency.OutcomeReleased: 1}},
		{name: "released: DoNotRecord", ran: true, handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			idempotency.DoNotRecord(r.Context())
			w.WriteHeader(http.StatusBadRequest)
		}),
			send: func(t *testing.T, mw http.Handler) { post(mw, "k", "{}") },
			want: map[idempotency.Outcome]int{idempotency.OutcomeReleased: 1}},
		{name: "released: panic", ran: true, handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
			panic("boom")
		}),
			send: func(t *testing.T, mw http.Handler) {
				require.PanicsWithValue(t, "boom", func() { post(mw, "k", "{}") })
			},
			want: map[idempotency.Outcome]int{idempotency.OutcomeReleased: 1}},
		{name: "released: cut short", ran: true, handler: http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			<-r.Context().Done()
		}),
			send: func(t *testing.T, mw http.Handler) { post(withDeadline(10*time.Millisecond, mw), "k", "{}") },
			want: map[idempotency.Outcome]int{idempotency.OutcomeReleased: 1}},
		{name: "key missing, required", handler: ok, opts: []idempotency.Option{idempotency.WithKeyRequired()},
			send: func(t *testing.T, mw http.Handler) { post(mw, "", "{}") },
			want: map[idempotency.Outcome]int{idempotency.OutcomeKeyMissing: 1}},
		{name: "key missing, passed through", handler: ok, ran: true,
			send: func(t *testing.T, mw http.Handler) { post(mw, "", "{}") },
			want: map[idempotency.Outcome]int{idempotency.OutcomeKeyMissing: 1}},
		{name: "key invalid", handler: ok,
			send: func(t *testing.T, mw http.Handler) { post(mw, "bad\x01key", "{}") },
			want: map[idempotency.Outcome]int{idempotency.OutcomeKeyInvalid: 1}},
		{name: "key refused", handler: ok,
			opts: []idempotency.Option{idempotency.WithKeyValidator(func(string) bool { return false })},
			send: func(t *testing.T, mw http.Handler) { post(mw, "k", "{}") },
			want: map[idempotency.Outcome]int{idempotency.OutcomeKeyInvalid: 1}},
		{name: "body too large", handler: ok, opts: []idempotency.Option{idempotency.WithMaxBodyBytes(1)},
			send: func(t *testing.T, mw http.Handler) { post(mw, "k", "{}") },
			want: map[idempotency.Outcome]int{idempotency.OutcomeBodyTooLarge: 1}},
		{name: "body unreadable", handler: ok,
			send: func(t *testing.T, mw http.Handler) {
				post(mw, "k", "", func(r *http.Request) { r.Body = failingBody{} })
			},
			want: map[idempotency.Outcome]int{idempotency.OutcomeRequestInterrupted: 1}},
		{name: "request interrupted", handler: ok, opts: []idempotency.Option{idempotency.WithStore(
			&claimFailingStore{Store: store.NewMemory(), fail: func(context.Context) error { return context.Canceled }})},
			send: func(t *testing.T, mw http.Handler) {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				post(mw, "k", "{}", func(r *http.Request) { *r = *r.WithContext(ctx) })
			},
			want: map[idempotency.Outcome]int{idempotency.OutcomeRequestInterrupted: 1}},
		{name: "scope missing", handler: ok, opts: []idempotency.Option{
			idempotency.WithScope(func(*http.Request) string { return "" }), idempotency.WithScopeRequired()},
			send: func(t *testing.T, mw http.Handler) { post(mw, "k", "{}") },
			want: map[idempotency.Outcome]int{idempotency.OutcomeScopeMissing: 1}},
		{name: "store unavailable", handler: ok, opts: []idempotency.Option{idempotency.WithStore(downStore())},
			send: func(t *testing.T, mw http.Handler) { post(mw, "k", "{}") },
			want: map[idempotency.Outcome]int{idempotency.OutcomeStoreUnavailable: 1}},
		{name: "fail open", handler: ok, ran: true,
			opts: []idempotency.Option{idempotency.WithStore(downStore()), idempotency.WithFailOpen()},
			send: func(t *testing.T, mw http.Handler) { post(mw, "k", "{}") },
			want: map[idempotency.Outcome]int{idempotency.OutcomeFailOpen: 1}},
		{name: "in transaction: executed", handler: ok,
			opts: []idempotency.Option{idempotency.WithStore(&txMemory{Memory: store.NewMemory()})},
			send: func(t *testing.T, mw http.Handler) { post(mw, "k", "{}"); post(mw, "k", "{}") },
			want: map[idempotency.Outcome]int{idempotency.OutcomeExecuted: 1, idempotency.OutcomeReplayed: 1}},
		{name: "in transaction: released", handler: statusHandler(http.StatusServiceUnavailable), ran: true,
			opts: []idempotency.Option{idempotency.WithStore(&txMemory{Memory: store.NewMemory()})},
			send: func(t *testing.T, mw http.Handler) { post(mw, "k", "{}") },
			want: map[idempotency.Outcome]int{idempotency.OutcomeReleased: 1}},
		{name: "in transaction: panic", ran: true, handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
			panic("boom")
		}),
			opts: []idempotency.Option{idempotency.WithStore(&txMemory{Memory: store.NewMemory()})},
			send: func(t *testing.T, mw http.Handler) {
				require.PanicsWithValue(t, "boom", func() { post(mw, "k", "{}") })
			},
			want: map[idempotency.Outcome]int{idempotency.OutcomeReleased: 1}},
		{name: "in transaction: commit failed", handler: ok, ran: true,
			opts: []idempotency.Option{idempotency.WithStore(failingCommits())},
			send: func(t *testing.T, mw http.Handler) { post(mw, "k", "{}") },
			want: map[idempotency.Outcome]int{idempotency.OutcomeStoreUnavailable: 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var seen observations
			opts := append([]idempotency.Option{seen.option(), idempotency.WithErrorHandler(func(*http.Request, error) {})}, tc.opts...)
			mw := idempotency.New(opts...)(tc.handler)
			tc.send(t, mw)
			require.Equal(t, tc.want, seen.outcomes())
			last := seen.lastRequest()
			require.Equal(t, tc.ran, last.HandlerRan)
			require.Empty(t, last.Key+last.Scope, "keys are observed only with WithObservedKeys")
		})
	}
}

// TestObserverKeyInFlight: a duplicate of a running request is told
// key_in_flight, then the first executed.
func TestObserverKeyInFlight(t *testing.T) {
	var seen observations
	h := &paymentHandler{gate: make(chan struct{})}
	mw := idempotency.New(seen.option())(h)
	done := startFirst(t, mw, h, "k", "{}")
	requireProblem(t, post(mw, "k", "{}"), http.StatusConflict, idempotency.ProblemKeyInFlight)
	require.Equal(t, map[idempotency.Outcome]int{idempotency.OutcomeKeyInFlight: 1}, seen.outcomes())
	close(h.gate)
	<-done
	require.Equal(t, map[idempotency.Outcome]int{
		idempotency.OutcomeKeyInFlight: 1, idempotency.OutcomeExecuted: 1}, seen.outcomes())
}

// TestObserverUnprotectedMethod: a method the middleware does not protect
// is no decision of its.
func TestObserverUnprotectedMethod(t *testing.T) {
	var seen observations
	mw := idempotency.New(seen.option())(statusHandler(http.StatusOK))
	serve(mw, http.MethodGet, "/payments", "k", "")
	require.Empty(t, seen.outcomes())
}

// TestObserverStoreCalls checks each store call told, and its error.
func TestObserverStoreCalls(t *testing.T) {
	cases := []struct {
		name    string
		store   store.Store
		handler http.Handler
		want    []string
	}{
		{"completed", store.NewMemory(), statusHandler(http.StatusCreated), []string{"claim", "complete"}},
		{"released", store.NewMemory(), statusHandler(http.StatusInternalServerError), []string{"claim", "release"}},
		{"store down", downStore(), statusHandler(http.StatusCreated), []string{"claim: error"}},
		{"committed", &txMemory{Memory: store.NewMemory()}, statusHandler(http.StatusCreated), []string{"claim", "commit"}},
		{"rolled back", &txMemory{Memory: store.NewMemory()}, statusHandler(http.StatusInternalServerError), []string{"claim", "rollback"}},
		{"commit failed", failingCommits(), statusHandler(http.StatusCreated), []string{"claim", "commit: error"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var seen observations
			mw := idempotency.New(seen.option(), idempotency.WithStore(tc.store),
				idempotency.WithErrorHandler(func(*http.Request, error) {}))(tc.handler)
			post(mw, "k", "{}")
			require.Equal(t, tc.want, seen.storeOps())
			for _, e := range seen.stores {
				require.Positive(t, e.Duration, "%s", e.Op)
			}
		})
	}
}

// TestObserverHandlerDuration: the handler's time is told with its outcome.
func TestObserverHandlerDuration(t *testing.T) {
	var seen observations
	mw := idempotency.New(seen.option())(&paymentHandler{delay: 20 * time.Millisecond})
	post(mw, "k", "{}")
	e := seen.lastRequest()
	require.True(t, e.HandlerRan)
	require.GreaterOrEqual(t, e.Handler, 20*time.Millisecond)
}

// TestObserverLeases: renewals of a running handler's lease are told as
// renewed, failed or lost, each with its store call. The handler runs until
// a renewal has been told (or 5 s), however slowly the machine schedules
// the renewals.
func TestObserverLeases(t *testing.T) {
	cases := []struct {
		name  string
		renew error
		want  idempotency.LeaseResult
	}{
		{"renewed", nil, idempotency.LeaseRenewed},
		{"failed", errStoreDown, idempotency.LeaseFailed},
		{"lost", store.ErrNotOwner, idempotency.LeaseLost},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var seen observations
			s := &renewingStore{Store: store.NewMemory(), err: tc.renew}
			mw := idempotency.New(seen.option(), idempotency.WithStore(s), idempotency.WithLease(30*time.Millisecond),
				idempotency.WithErrorHandler(func(*http.Request, error) {}))(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				for end := time.Now().Add(5 * time.Second); len(seen.leaseResults()) == 0 && time.Now().Before(end); {
					time.Sleep(5 * time.Millisecond)
				}
				w.WriteHeader(http.StatusCreated)
			}))
			post(mw, "k", "{}")
			results := seen.leaseResults()
			require.NotEmpty(t, results)
			require.Equal(t, tc.want, results[0])
			renewals := 0
			for _, op := range seen.storeOps() {
				if strings.HasPrefix(op, "renew") {
					renewals++
				}
			}
			require.Equal(t, len(results), renewals, "each renewal told as a store call too")
		})
	}
}

// TestObserverWaits checks how each wait for an in-flight key is told to
// have ended.
func TestObserverWaits(t *testing.T) {
	cases := []struct {
		name    string
		status  int // of the first request
		wait    time.Duration
		outcome idempotency.Outcome // of the waiting request
		want    idempotency.WaitResult
	}{
		{"answered", http.StatusCreated, 5 * time.Second, idempotency.OutcomeReplayed, idempotency.WaitAnswered},
		{"claimed", http.StatusInternalServerError, 5 * time.Second, idempotency.OutcomeReleased, idempotency.WaitClaimed},
		{"timed out", http.StatusCreated, 30 * time.Millisecond, idempotency.OutcomeKeyInFlight, idempotency.WaitTimedOut},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var seen observations
			h := &paymentHandler{gate: make(chan struct{}), status: tc.status}
			mw := idempotency.New(seen.option(), idempotency.WithWait(tc.wait))(h)
			done := startFirst(t, mw, h, "k", "{}")
			answered := make(chan struct{})
			go func() {
				defer close(answered)
				post(mw, "k", "{}")
			}()
			if tc.want != idempotency.WaitTimedOut {
				time.Sleep(30 * time.Millisecond) // the duplicate is waiting
				close(h.gate)
			}
			<-answered
			if tc.want == idempotency.WaitTimedOut {
				close(h.gate)
			}
			<-done
			seen.mu.Lock()
			defer seen.mu.Unlock()
			require.Len(t, seen.waits, 1)
			require.Equal(t, tc.want, seen.waits[0].Result)
			require.Positive(t, seen.waits[0].Duration)
			outcomes := map[idempotency.Outcome]int{}
			for _, e := range seen.requests {
				outcomes[e.Outcome]++
			}
			require.Equal(t, 2, len(seen.requests), "one outcome each")
			require.Positive(t, outcomes[tc.outcome], "the waiting request's outcome")
		})
	}
}

// TestObservedKeys: the key and scope reach the observer only when asked.
func TestObservedKeys(t *testing.T) {
	for _, observeKeys := range []bool{false, true} {
		var seen observations
		opts := []idempotency.Option{seen.option(), idempotency.WithScope(func(*http.Request) string { return "acct-1" })}
		if observeKeys {
			opts = append(opts, idempotency.WithObservedKeys())
		}
		post(idempotency.New(opts...)(statusHandler(http.StatusCreated)), "key-1", "{}")
		e := seen.lastRequest()
		if observeKeys {
			require.Equal(t, [2]string{"key-1", "acct-1"}, [2]string{e.Key, e.Scope})
		} else {
			require.Equal(t, [2]string{"", ""}, [2]string{e.Key, e.Scope})
		}
	}
}

// TestObserverAllocations: observing adds no allocation to a request, and
// without an observer none is made for it. The counts are means over many
// requests, compared within half an allocation: under the race detector
// sync.Pool drops some of what is put back, so a request's count varies.
func TestObserverAllocations(t *testing.T) {
	const runs = 1000
	allocs := func(opts ...idempotency.Option) (first, replay float64) {
		mw := idempotency.New(opts...)(statusHandler(http.StatusCreated))
		n := 0
		first = meanAllocs(runs, func() {
			n++
			mw.ServeHTTP(httptest.NewRecorder(), idempotencytest.Request(n))
		})
		replay = meanAllocs(runs, func() { mw.ServeHTTP(httptest.NewRecorder(), idempotencytest.Request(1)) })
		return first, replay
	}
	nop := idempotency.WithObserver(idempotency.Observer{
		Request:   func(context.Context, idempotency.RequestEvent) {},
		StoreCall: func(context.Context, idempotency.StoreEvent) {},
	})
	bareFirst, bareReplay := allocs()
	observedFirst, observedReplay := allocs(nop)
	require.InDelta(t, bareFirst, observedFirst, 0.5, "first requests")
	require.InDelta(t, bareReplay, observedReplay, 0.5, "replays")
}

// meanAllocs is testing.AllocsPerRun without its rounding down: the mean
// number of heap allocations a call of f makes, over runs calls after one
// to warm up, on one P.
func meanAllocs(runs int, f func()) float64 {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	f()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		f()
	}
	runtime.ReadMemStats(&after)
	return float64(after.Mallocs-before.Mallocs) / float64(runs)
}

// failingCommits is a transactional store whose commits fail.
func failingCommits() *txMemory {
	s := &txMemory{Memory: store.NewMemory()}
	s.failCommit.Store(true)
	return s
}

// renewingStore answers every renewal with err, or as its store does if
// err is nil.
type renewingStore struct {
	store.Store
	err error
}

func (s *renewingStore) Renew(ctx context.Context, key string, owner store.Lease, lease time.Duration) error {
	if s.err != nil {
		return s.err
	}
	return s.Store.Renew(ctx, key, owner, lease)
}

// failingBody is a request body whose reads fail, as a client's that hung
// up mid-body does.
type failingBody struct{}

func (failingBody) Read([]byte) (int, error) { return 0, errors.New("connection reset") }
func (failingBody) Close() error             { return nil }

// TestObserverPanicAfterTheClaimReleasesTheKey: an observer that panics
// when told of a won claim is the application's bug, as a panicking
// handler is: the panic goes on, and the key is released (in a store's
// transaction, rolled back), so a retry runs. The released request's
// event says the handler did not run.
func TestObserverPanicAfterTheClaimReleasesTheKey(t *testing.T) {
	for name, s := range bothModes() {
		t.Run(name, func(t *testing.T) {
			var panicking atomic.Bool
			panicking.Store(true)
			var events []idempotency.RequestEvent
			observer := idempotency.Observer{StoreCall: func(_ context.Context, e idempotency.StoreEvent) {
				if e.Op == idempotency.StoreClaim && e.Err == nil && panicking.Load() {
					panic("observer bug")
				}
			}, Request: func(_ context.Context, e idempotency.RequestEvent) { events = append(events, e) }}
			h := &paymentHandler{}
			mw := idempotency.New(idempotency.WithStore(s), idempotency.WithObserver(observer))(h)
			require.PanicsWithValue(t, "observer bug", func() { post(mw, "k", "{}") })
			require.Len(t, events, 1)
			require.Equal(t, idempotency.OutcomeReleased, events[0].Outcome)
			require.False(t, events[0].HandlerRan, "the observer panicked before the handler started")
			panicking.Store(false)
			resp := post(mw, "k", "{}")
			require.Equal(t, http.StatusCreated, resp.StatusCode)
			require.Empty(t, resp.Header.Get("Idempotent-Replayed"), "the retry ran: the key was released")
			require.EqualValues(t, 1, h.runs.Load())
		})
	}
}
