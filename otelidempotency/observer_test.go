package otelidempotency_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/idempotencytest"
	"github.com/seed43327c4c/idempotency/otelidempotency"
	"github.com/seed43327c4c/idempotency/store"
)

// meter returns a real SDK MeterProvider and the reader that collects it.
func meter(t *testing.T) (*sdkmetric.MeterProvider, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	return mp, reader
}

// collect returns the metric named name, failing the test without it.
func collect(t *testing.T, reader *sdkmetric.ManualReader, name string) metricdata.Aggregation {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	for _, sm := range rm.ScopeMetrics {
		require.Equal(t, otelidempotency.ScopeName, sm.Scope.Name)
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m.Data
			}
		}
	}
	require.FailNow(t, "no metric", name)
	return nil
}

// counts returns a counter's values by the value of attribute key.
func counts(t *testing.T, reader *sdkmetric.ManualReader, name string, key attribute.Key) map[string]int64 {
	t.Helper()
	n := make(map[string]int64)
	for _, p := range collect(t, reader, name).(metricdata.Sum[int64]).DataPoints {
		v, _ := p.Attributes.Value(key)
		n[v.AsString()] += p.Value
	}
	return n
}

// post sends a POST /payments with key (none if "") and body through h
// (idempotencytest.Post).
var post = idempotencytest.Post

// slowCreated answers 201 after sleeping for d.
func slowCreated(d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(d)
		w.WriteHeader(http.StatusCreated)
	})
}

func answer(status int, body string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	})
}

var errDown = errors.New("connection refused")

// claimStore answers every claim with claim.
type claimStore struct {
	store.Store
	claim func(fingerprint string) (store.Record, bool, error)
}

func (s claimStore) Claim(_ context.Context, _, fingerprint, _ string, _ time.Duration) (store.Record, bool, error) {
	return s.claim(fingerprint)
}

var (
	inFlight = claimStore{Store: store.NewMemory(), claim: func(fp string) (store.Record, bool, error) {
		return store.Record{State: store.StateInFlight, Fingerprint: fp}, false, nil
	}}
	down = claimStore{Store: store.NewMemory(), claim: func(string) (store.Record, bool, error) {
		return store.Record{}, false, errDown
	}}
)

// TestRequests: each outcome of the outcomes table is counted under its
// name, once a request.
func TestRequests(t *testing.T) {
	cases := []struct {
		outcome idempotency.Outcome
		opts    []idempotency.Option
		handler http.Handler
		send    func(mw http.Handler)
	}{
		{idempotency.OutcomeExecuted, nil, answer(201, "{}"), func(mw http.Handler) { post(mw, "k", "a") }},
		{idempotency.OutcomeReplayed, nil, answer(201, "{}"), func(mw http.Handler) { post(mw, "k", "a") }},
		{idempotency.OutcomeKeyReused, nil, answer(201, "{}"), func(mw http.Handler) { post(mw, "k", "b") }},
		{idempotency.OutcomeNotReplayable, []idempotency.Option{idempotency.WithMaxResponseBytes(1)}, answer(201, "{}"),
			func(mw http.Handler) { post(mw, "n", "a"); post(mw, "n", "a") }},
		{idempotency.OutcomeReleased, nil, answer(500, ""), func(mw http.Handler) { post(mw, "r", "a") }},
		{idempotency.OutcomeKeyInFlight, []idempotency.Option{idempotency.WithStore(inFlight)}, answer(201, ""),
			func(mw http.Handler) { post(mw, "k", "a") }},
		{idempotency.OutcomeStoreUnavailable, []idempotency.Option{idempotency.WithStore(down)}, answer(201, ""),
			func(mw http.Handler) { post(mw, "k", "a") }},
		{idempotency.OutcomeFailOpen, []idempotency.Option{idempotency.WithStore(down), idempotency.WithFailOpen()},
			answer(201, ""), func(mw http.Handler) { post(mw, "k", "a") }},
		{idempotency.OutcomeKeyMissing, nil, answer(201, ""), func(mw http.Handler) { post(mw, "", "a") }},
		{idempotency.OutcomeKeyInvalid, nil, answer(201, ""), func(mw http.Handler) { post(mw, "a\x7fb", "a") }},
		{idempotency.OutcomeBodyTooLarge, []idempotency.Option{idempotency.WithMaxBodyBytes(1)}, answer(201, ""),
			func(mw http.Handler) { post(mw, "k", "too long") }},
		{idempotency.OutcomeRequestInterrupted, []idempotency.Option{idempotency.WithStore(down)}, answer(201, ""),
			func(mw http.Handler) {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				post(mw, "k", "a", func(r *http.Request) { *r = *r.WithContext(ctx) })
			}},
		{idempotency.OutcomeScopeMissing, []idempotency.Option{idempotency.WithScopeRequired(),
			idempotency.WithScope(func(*http.Request) string { return "" })}, answer(201, ""),
			func(mw http.Handler) { post(mw, "k", "a") }},
	}
	mp, reader := meter(t)
	observe := idempotency.WithObserver(otelidempotency.New(otelidempotency.WithMeterProvider(mp)))
	quiet := idempotency.WithErrorHandler(func(*http.Request, error) {})
	shared := store.NewMemory() // executed, replayed and reused share one key
	want := make(map[string]int64)
	for i, tc := range cases {
		opts := append([]idempotency.Option{observe, quiet, idempotency.WithStore(shared)}, tc.opts...)
		tc.send(idempotency.New(opts...)(tc.handler))
		want[string(tc.outcome)]++
		if tc.outcome == idempotency.OutcomeNotReplayable {
			want[string(idempotency.OutcomeExecuted)]++ // its first request
		}
		require.Equal(t, want, counts(t, reader, "idempotency.requests", "idempotency.outcome"), "after case %d, %s", i, tc.outcome)
	}
}

// TestDurations: the handler's time and each store call's are recorded,
// with the operation and, for a failed call, error.type.
func TestDurations(t *testing.T) {
	mp, reader := meter(t)
	observe := idempotency.WithObserver(otelidempotency.New(otelidempotency.WithMeterProvider(mp)))
	slow := slowCreated(10 * time.Millisecond)
	post(idempotency.New(observe)(slow), "k", "a")
	post(idempotency.New(observe, idempotency.WithStore(down), idempotency.WithErrorHandler(func(*http.Request, error) {}))(slow), "k", "a")

	handler := collect(t, reader, "idempotency.handler.duration").(metricdata.Histogram[float64]).DataPoints
	require.Len(t, handler, 1)
	require.Equal(t, uint64(1), handler[0].Count)
	require.GreaterOrEqual(t, handler[0].Sum, 0.010)

	calls := make(map[string]uint64)
	for _, p := range collect(t, reader, "idempotency.store.duration").(metricdata.Histogram[float64]).DataPoints {
		op, _ := p.Attributes.Value("idempotency.store.operation")
		name := op.AsString()
		if errType, failed := p.Attributes.Value("error.type"); failed {
			name += " " + errType.AsString()
		}
		calls[name] += p.Count
		require.Positive(t, p.Sum, name)
	}
	require.Equal(t, map[string]uint64{"claim": 1, "complete": 1, "claim _OTHER": 1}, calls)
}

// TestLeaseRenewals: a handler that outlasts its lease has it renewed, and
// each renewal is counted.
func TestLeaseRenewals(t *testing.T) {
	mp, reader := meter(t)
	observe := idempotency.WithObserver(otelidempotency.New(otelidempotency.WithMeterProvider(mp)))
	slow := slowCreated(60 * time.Millisecond)
	post(idempotency.New(observe, idempotency.WithLease(30*time.Millisecond))(slow), "k", "a")
	renewed := counts(t, reader, "idempotency.lease.renewals", "idempotency.lease.result")
	require.Positive(t, renewed["renewed"])
	require.Len(t, renewed, 1)
}

// TestJobs: each call of Do given the observer is counted by outcome, and
// the time its function ran is recorded under the outcome.
func TestJobs(t *testing.T) {
	mp, reader := meter(t)
	observe := idempotency.DoObserver(otelidempotency.New(otelidempotency.WithMeterProvider(mp)))
	ctx, s := t.Context(), store.NewMemory()
	sent := func(context.Context) ([]byte, error) { time.Sleep(10 * time.Millisecond); return []byte("sent"), nil }
	failed := func(context.Context) ([]byte, error) { return nil, errDown }
	for _, call := range []struct {
		store store.Store
		fn    func(context.Context) ([]byte, error)
	}{{s, sent}, {s, sent}, {s, sent}, {inFlight, sent}, {down, sent}} {
		_, _ = idempotency.Do(ctx, call.store, "receipt:1", call.fn, observe)
	}
	_, _ = idempotency.Do(ctx, s, "receipt:2", failed, observe)
	require.Equal(t, map[string]int64{"executed": 1, "replayed": 2, "key_in_flight": 1, "store_unavailable": 1, "released": 1},
		counts(t, reader, "idempotency.jobs", "idempotency.outcome"))

	ran := make(map[string]uint64)
	for _, p := range collect(t, reader, "idempotency.job.duration").(metricdata.Histogram[float64]).DataPoints {
		outcome, _ := p.Attributes.Value("idempotency.outcome")
		ran[outcome.AsString()] += p.Count
		if outcome.AsString() == "executed" {
			require.GreaterOrEqual(t, p.Sum, 0.010)
		}
	}
	require.Equal(t, map[string]uint64{"executed": 1, "released": 1}, ran, "only the calls that ran fn")
}

// TestSpan: the request's span gets the outcome and an event per store
// call; with WithStoreSpans, a child span per call too.
func TestSpan(t *testing.T) {
	for _, storeSpans := range []bool{false, true} {
		recorder := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
		opts := []otelidempotency.Option{otelidempotency.WithTracerProvider(tp)}
		if storeSpans {
			opts = append(opts, otelidempotency.WithStoreSpans())
		}
		mw := idempotency.New(idempotency.WithObserver(otelidempotency.New(opts...)))(answer(201, "{}"))
		server := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx, span := tp.Tracer("test").Start(r.Context(), "POST /payments")
			defer span.End()
			mw.ServeHTTP(w, r.WithContext(ctx))
		})
		post(server, "k", "a")
		post(server, "k", "a")

		var requests []sdktrace.ReadOnlySpan
		var children []string
		for _, s := range recorder.Ended() {
			if s.Name() == "POST /payments" {
				requests = append(requests, s)
			} else {
				children = append(children, s.Name())
				require.True(t, s.Parent().IsValid())
			}
		}
		require.Len(t, requests, 2)
		for i, want := range []struct {
			outcome string
			events  []string
		}{
			{"executed", []string{"idempotency claim", "idempotency complete"}},
			{"replayed", []string{"idempotency claim"}},
		} {
			require.Contains(t, requests[i].Attributes(), attribute.String("idempotency.outcome", want.outcome))
			var events []string
			for _, e := range requests[i].Events() {
				events = append(events, e.Name)
			}
			require.Equal(t, want.events, events)
		}
		if storeSpans {
			require.Equal(t, []string{"idempotency claim", "idempotency complete", "idempotency claim"}, children)
		} else {
			require.Empty(t, children)
		}
	}
}

// TestKeysOnlyWhenAsked: the key and scope go on the span only with
// idempotency.WithObservedKeys, and never into a metric.
func TestKeysOnlyWhenAsked(t *testing.T) {
	for _, observeKeys := range []bool{false, true} {
		recorder := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
		mp, reader := meter(t)
		opts := []idempotency.Option{
			idempotency.WithObserver(otelidempotency.New(otelidempotency.WithMeterProvider(mp))),
			idempotency.WithScope(func(*http.Request) string { return "acct-1" }),
		}
		if observeKeys {
			opts = append(opts, idempotency.WithObservedKeys())
		}
		mw := idempotency.New(opts...)(answer(201, "{}"))
		ctx, span := tp.Tracer("test").Start(context.Background(), "request")
		post(mw, "key-1", "a", func(r *http.Request) { *r = *r.WithContext(ctx) })
		span.End()

		attrs := recorder.Ended()[0].Attributes()
		for _, kv := range []attribute.KeyValue{attribute.String("idempotency.key", "key-1"), attribute.String("idempotency.scope", "acct-1")} {
			if observeKeys {
				require.Contains(t, attrs, kv)
			} else {
				require.NotContains(t, attrs, kv)
			}
		}
		var rm metricdata.ResourceMetrics
		require.NoError(t, reader.Collect(context.Background(), &rm))
		require.NotContains(t, fmtMetrics(rm), "key-1")
		require.NotContains(t, fmtMetrics(rm), "acct-1")
	}
}

// fmtMetrics is every attribute value of every data point in rm, for a
// search.
func fmtMetrics(rm metricdata.ResourceMetrics) string {
	var b strings.Builder
	add := func(set attribute.Set) {
		for _, kv := range set.ToSlice() {
			b.WriteString(kv.Value.String() + " ")
		}
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch data := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range data.DataPoints {
					add(p.Attributes)
				}
			case metricdata.Histogram[float64]:
				for _, p := range data.DataPoints {
					add(p.Attributes)
				}
			}
		}
	}
	return b.String()
}

// TestWaits: a duplicate that waits for its first request is timed, under
// how its wait ended.
func TestWaits(t *testing.T) {
	mp, reader := meter(t)
	gate := make(chan struct{})
	running := make(chan struct{})
	gated := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		close(running)
		<-gate
		w.WriteHeader(http.StatusCreated)
	})
	mw := idempotency.New(idempotency.WithObserver(otelidempotency.New(otelidempotency.WithMeterProvider(mp))),
		idempotency.WithWait(5*time.Second))(gated)
	first := make(chan struct{})
	go func() {
		defer close(first)
		post(mw, "k", "a")
	}()
	<-running
	time.AfterFunc(50*time.Millisecond, func() { close(gate) })
	require.Equal(t, "true", post(mw, "k", "a").Header.Get("Idempotent-Replayed"))
	<-first

	waits := collect(t, reader, "idempotency.wait.duration").(metricdata.Histogram[float64]).DataPoints
	require.Len(t, waits, 1)
	result, _ := waits[0].Attributes.Value("idempotency.wait.result")
	require.Equal(t, "answered", result.AsString())
	require.Equal(t, uint64(1), waits[0].Count)
	require.Positive(t, waits[0].Sum)
}

// TestRefusedInstrumentsAreLeftOut: a meter that refuses every instrument
// with an error and no instrument, as metric.Meter allows, costs the
// metrics only: every request, store call included, is still served.
func TestRefusedInstrumentsAreLeftOut(t *testing.T) {
	obs := otelidempotency.New(otelidempotency.WithMeterProvider(refusingProvider{}))
	mw := idempotency.New(idempotency.WithObserver(obs))(answer(http.StatusCreated, "ok"))
	require.NotPanics(t, func() {
		require.Equal(t, http.StatusCreated, post(mw, "k", "{}").StatusCode)
		require.Equal(t, "true", post(mw, "k", "{}").Header.Get("Idempotent-Replayed"))
		_, err := idempotency.Do(t.Context(), store.NewMemory(), "job", func(context.Context) ([]byte, error) { return nil, nil },
			idempotency.DoObserver(obs))
		require.NoError(t, err)
	})
}

// refusingProvider's meter refuses every instrument, with an error and no
// instrument.
type refusingProvider struct{ noop.MeterProvider }

func (refusingProvider) Meter(string, ...metric.MeterOption) metric.Meter { return refusingMeter{} }

type refusingMeter struct{ noop.Meter }

func (refusingMeter) Int64Counter(string, ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	return nil, errors.New("instrument refused")
}

func (refusingMeter) Float64Histogram(string, ...metric.Float64HistogramOption) (metric.Float64Histogram, error) {
	return nil, errors.New("instrument refused")
}
