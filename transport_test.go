package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/httpx"
)

// scriptedBase is a RoundTripper that answers each attempt with the next
// of its answers (the last one again once they run out) and records what
// each attempt sent.
type scriptedBase struct {
	mu      sync.Mutex
	answers []func(*http.Request) (*http.Response, error)
	sent    []sentAttempt
}

type sentAttempt struct {
	key, body string
	at        time.Time
}

func (b *scriptedBase) RoundTrip(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil {
		body, _ = io.ReadAll(r.Body)
		_ = r.Body.Close()
	}
	b.mu.Lock()
	b.sent = append(b.sent, sentAttempt{key: r.Header.Get(httpx.KeyHeader), body: string(body), at: time.Now()})
	answer := b.answers[min(len(b.sent), len(b.answers))-1]
	b.mu.Unlock()
	return answer(r)
}

func (b *scriptedBase) attempts() []sentAttempt {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]sentAttempt(nil), b.sent...)
}

// answer returns a scripted answer of the given status, headers (name,
// value pairs) and body.
func answer(status int, body string, header ...string) func(*http.Request) (*http.Response, error) {
	return func(r *http.Request) (*http.Response, error) {
		h := http.Header{}
		for i := 0; i+1 < len(header); i += 2 {
			h.Set(header[i], header[i+1])
		}
		return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader(body)), Request: r}, nil
	}
}

// problem returns a scripted problem+json answer of the given type.
func problem(status int, problemType string, header ...string) func(*http.Request) (*http.Response, error) {
	header = append(header, "Content-Type", "application/problem+json")
	return answer(status, fmt.Sprintf(`{"type":%q,"status":%d}`, problemType, status), header...)
}

func transportError(*http.Request) (*http.Response, error) {
	return nil, errors.New("read tcp: connection reset by peer")
}

// fast retries at once, so tests of what is retried take no time.
var fast = idempotency.TransportBackoff(time.Microsecond, time.Microsecond)

func postThrough(t *testing.T, rt http.RoundTripper, body io.Reader, edit ...func(*http.Request)) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://service.test/payments", body)
	require.NoError(t, err)
	for _, e := range edit {
		e(req)
	}
	return rt.RoundTrip(req)
}

// TestTransportRetries: what is retried, and what is not, each under one
// key kept by every attempt.
func TestTransportRetries(t *testing.T) {
	ok := answer(http.StatusCreated, `{"id":1}`)
	for _, tc := range []struct {
		name     string
		first    func(*http.Request) (*http.Response, error)
		attempts int
	}{
		{"transport error", transportError, 2},
		{"key in flight", problem(http.StatusConflict, idempotency.ProblemKeyInFlight, "Retry-After", "0"), 2},
		{"too many requests", answer(http.StatusTooManyRequests, ""), 2},
		{"service unavailable", problem(http.StatusServiceUnavailable, idempotency.ProblemStoreUnavailable), 2},
		{"key reused", problem(http.StatusUnprocessableEntity, idempotency.ProblemKeyReused), 1},
		{"not replayable", problem(http.StatusConflict, idempotency.ProblemNotReplayable), 1},
		{"record sealed", problem(http.StatusServiceUnavailable, idempotency.ProblemRecordSealed), 1},
		{"another conflict", answer(http.StatusConflict, `{"error":"duplicate email"}`), 1},
		{"bad request", answer(http.StatusBadRequest, "bad"), 1},
		{"server error", answer(http.StatusInternalServerError, "failed"), 1},
		{"created", ok, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := &scriptedBase{answers: []func(*http.Request) (*http.Response, error){tc.first, ok}}
			resp, err := postThrough(t, idempotency.NewTransport(base, fast), strings.NewReader(`{"amount":100}`))
			sent := base.attempts()
			require.Len(t, sent, tc.attempts)
			key := sent[0].key
			require.Len(t, key, 26, "a new random key")
			for _, a := range sent {
				require.Equal(t, key, a.key)
				require.Equal(t, `{"amount":100}`, a.body, "every attempt sends the whole body")
			}
			if tc.attempts == 1 && err == nil {
				body, _ := io.ReadAll(resp.Body)
				require.NotEmpty(t, body, "a response not retried is returned with its body, read or not")
				return
			}
			require.NoError(t, err)
			require.Equal(t, http.StatusCreated, resp.StatusCode)
			require.Equal(t, key, idempotency.SentKey(resp))
		})
	}
}

// TestTransportKeys: each request gets a key of its own; a caller's key is
// kept; methods other than POST and PATCH pass through without one.
func TestTransportKeys(t *testing.T) {
	base := &scriptedBase{answers: []func(*http.Request) (*http.Response, error){answer(http.StatusOK, "")}}
	rt := idempotency.NewTransport(base)
	seen := map[string]bool{}
	for range 100 {
		resp, err := postThrough(t, rt, nil)
		require.NoError(t, err)
		seen[idempotency.SentKey(resp)] = true
	}
	require.Len(t, seen, 100)
	resp, err := postThrough(t, rt, nil, func(r *http.Request) { r.Header.Set(httpx.KeyHeader, "order-42") })
	require.NoError(t, err)
	require.Equal(t, "order-42", idempotency.SentKey(resp))
	original := http.Header{}
	req, _ := http.NewRequest(http.MethodPatch, "http://service.test/payments/1", nil)
	req.Header = original
	_, _ = rt.RoundTrip(req)
	require.Empty(t, original, "the caller's request is not changed")
	for _, method := range []string{http.MethodGet, http.MethodPut, http.MethodDelete} {
		req, _ := http.NewRequest(method, "http://service.test/payments/1", nil)
		resp, err := rt.RoundTrip(req)
		require.NoError(t, err)
		require.Empty(t, idempotency.SentKey(resp), method)
	}
}

// roundTripperFunc is a RoundTripper that calls itself.
type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestTransportKeyUnderAnySpelling: a key the caller set under any
// spelling of the header name, without canonicalisation, is the caller's:
// through a real server and the middleware, one key header arrives, under
// the canonical name, the request is not refused, and SentKey reports it. An empty one is replaced
// by the transport's own.
func TestTransportKeyUnderAnySpelling(t *testing.T) {
	var arrived []string
	srv := httptest.NewServer(idempotency.New()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived = r.Header.Values(httpx.KeyHeader)
		w.WriteHeader(http.StatusCreated)
	})))
	defer srv.Close()
	var canonical []string // what the base transport sees under the canonical name
	base := roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		canonical = r.Header[httpx.KeyHeader]
		return http.DefaultTransport.RoundTrip(r)
	})
	client := &http.Client{Transport: idempotency.NewTransport(base)}
	for _, tc := range []struct{ name, value string }{
		{"Idempotency-Key", "order-1"},
		{"idempotency-key", "order-2"},
		{"IDEMPOTENCY-KEY", "order-3"},
		{"idempotency-key", ""},
	} {
		t.Run(tc.name+"="+tc.value, func(t *testing.T) {
			arrived, canonical = nil, nil
			req, err := http.NewRequest(http.MethodPost, srv.URL+"/payments", strings.NewReader("{}"))
			require.NoError(t, err)
			req.Header[tc.name] = []string{tc.value}
			resp, err := client.Do(req)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			require.Equal(t, http.StatusCreated, resp.StatusCode)
			require.Len(t, arrived, 1, "one key header sent")
			require.Equal(t, arrived, canonical, "under the name Go's transport looks for before resending")
			require.Equal(t, arrived[0], idempotency.SentKey(resp))
			if tc.value != "" {
				require.Equal(t, tc.value, arrived[0])
			}
			require.Equal(t, []string{tc.value}, req.Header[tc.name], "the caller's request is not changed")
		})
	}
}

// TestTransportBodies: a body without GetBody is buffered and sent whole
// on every attempt; one over the limit is sent whole, once, unretried.
func TestTransportBodies(t *testing.T) {
	noGetBody := func(s string) io.Reader { return io.MultiReader(strings.NewReader(s)) }
	for _, tc := range []struct {
		name     string
		body     string
		attempts int
	}{
		{"buffered", strings.Repeat("x", 100), 3},
		{"over the limit", strings.Repeat("x", 101), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			unavailable := answer(http.StatusServiceUnavailable, "")
			base := &scriptedBase{answers: []func(*http.Request) (*http.Response, error){unavailable}}
			rt := idempotency.NewTransport(base, fast, idempotency.TransportMaxAttempts(3), idempotency.TransportMaxBodyBytes(100))
			_, err := postThrough(t, rt, noGetBody(tc.body))
			require.NoError(t, err)
			sent := base.attempts()
			require.Len(t, sent, tc.attempts)
			for _, a := range sent {
				require.Equal(t, tc.body, a.body)
			}
		})
	}
	// The caller's request is not changed (http.RoundTripper's rule), even
	// when it brings its own key and the transport buffers its body.
	t.Run("the caller's request is not changed", func(t *testing.T) {
		base := &scriptedBase{answers: []func(*http.Request) (*http.Response, error){answer(http.StatusOK, "")}}
		rt := idempotency.NewTransport(base)
		body := noGetBody("{}")
		req, err := http.NewRequest(http.MethodPost, "http://service.test/payments", body)
		require.NoError(t, err)
		req.Header.Set(httpx.KeyHeader, "order-42")
		callersBody := req.Body
		_, err = rt.RoundTrip(req)
		require.NoError(t, err)
		require.Equal(t, callersBody, req.Body)
		require.Equal(t, []sentAttempt{{key: "order-42", body: "{}", at: base.attempts()[0].at}}, base.attempts())
	})
}

// TestTransportBudget: attempts, time and the request's context bound the
// retries; a Retry-After is waited for.
func TestTransportBudget(t *testing.T) {
	unavailable := answer(http.StatusServiceUnavailable, "", "Retry-After", "1")
	script := func() *scriptedBase {
		return &scriptedBase{answers: []func(*http.Request) (*http.Response, error){unavailable, answer(http.StatusOK, "")}}
	}
	t.Run("retry after", func(t *testing.T) {
		base := script()
		resp, err := postThrough(t, idempotency.NewTransport(base, fast), nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		sent := base.attempts()
		require.GreaterOrEqual(t, sent[1].at.Sub(sent[0].at), time.Second)
	})
	t.Run("time", func(t *testing.T) {
		base := script()
		resp, err := postThrough(t, idempotency.NewTransport(base, fast, idempotency.TransportMaxElapsed(500*time.Millisecond)), nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "a wait past the budget is not started")
		require.Len(t, base.attempts(), 1)
	})
	// A Retry-After too far off for a time.Duration, as seconds or as a
	// date, is past any budget: the answer is returned at once, neither
	// waited for nor retried early.
	for _, after := range []string{"9999999999", "99999999999999999999", "Fri, 31 Dec 9999 23:59:59 GMT"} {
		t.Run("retry after "+after, func(t *testing.T) {
			base := &scriptedBase{answers: []func(*http.Request) (*http.Response, error){
				answer(http.StatusServiceUnavailable, "", "Retry-After", after), answer(http.StatusOK, ""),
			}}
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
			defer cancel()
			resp, err := postThrough(t, idempotency.NewTransport(base, fast), nil, func(r *http.Request) { *r = *r.WithContext(ctx) })
			require.NoError(t, err)
			require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
			require.Len(t, base.attempts(), 1)
		})
	}
	t.Run("attempts", func(t *testing.T) {
		base := &scriptedBase{answers: []func(*http.Request) (*http.Response, error){transportError}}
		_, err := postThrough(t, idempotency.NewTransport(base, fast, idempotency.TransportMaxAttempts(4)), nil)
		require.Error(t, err)
		require.Len(t, base.attempts(), 4)
	})
	t.Run("context", func(t *testing.T) {
		base := script()
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		_, err := postThrough(t, idempotency.NewTransport(base, fast), nil, func(r *http.Request) { *r = *r.WithContext(ctx) })
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Len(t, base.attempts(), 1)
	})
}

// TestTransportThroughTheMiddleware: against the middleware, a duplicate
// that finds its first request in flight is retried until it gets the
// replay; the handler runs once.
func TestTransportThroughTheMiddleware(t *testing.T) {
	h := &paymentHandler{delay: 100 * time.Millisecond}
	srv := httptest.NewServer(idempotency.New()(h))
	defer srv.Close()
	client := &http.Client{Transport: idempotency.NewTransport(nil, idempotency.TransportBackoff(10*time.Millisecond, 50*time.Millisecond))}
	var wg sync.WaitGroup
	replays := make(chan bool, 2)
	for range 2 {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/payments", strings.NewReader(`{"amount":100}`))
			req.Header.Set(httpx.KeyHeader, "pay-1")
			resp, err := client.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusCreated {
				t.Errorf("status %d", resp.StatusCode)
			}
			replays <- idempotency.Replayed(resp)
		})
	}
	wg.Wait()
	close(replays)
	require.EqualValues(t, 1, h.runs.Load())
	var seen []bool
	for r := range replays {
		seen = append(seen, r)
	}
	require.ElementsMatch(t, []bool{false, true}, seen)
}

// TestTransportMisconfigurationPanics: out-of-range options panic.
func TestTransportMisconfigurationPanics(t *testing.T) {
	for name, f := range map[string]func(){
		"attempts": func() { idempotency.TransportMaxAttempts(0) },
		"elapsed":  func() { idempotency.TransportMaxElapsed(0) },
		"body":     func() { idempotency.TransportMaxBodyBytes(0) },
		"first":    func() { idempotency.TransportBackoff(0, time.Second) },
		"max":      func() { idempotency.TransportBackoff(time.Second, time.Millisecond) },
	} {
		t.Run(name, func(t *testing.T) { require.Panics(t, f) })
	}
}

// A client whose POSTs carry a key of their own, kept across retries: a
// retry after a lost answer is replayed by the server, not run again.
func ExampleNewTransport() {
	charges := 0
	srv := httptest.NewServer(idempotency.New()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		charges++
		w.WriteHeader(http.StatusCreated)
	})))
	defer srv.Close()
	client := &http.Client{Transport: idempotency.NewTransport(http.DefaultTransport)}

	resp, err := client.Post(srv.URL+"/payments", "application/json", strings.NewReader(`{"amount":100}`))
	if err != nil {
		panic(err)
	}
	_ = resp.Body.Close()
	key := idempotency.SentKey(resp) // the key to send again if the answer was lost

	again, _ := http.NewRequest(http.MethodPost, srv.URL+"/payments", strings.NewReader(`{"amount":100}`))
	again.Header.Set("Content-Type", "application/json")
	again.Header.Set("Idempotency-Key", key)
	resp, err = client.Do(again)
	if err != nil {
		panic(err)
	}
	_ = resp.Body.Close()
	fmt.Println(resp.StatusCode, idempotency.Replayed(resp), "charges:", charges)
	// Output:
	// 201 true charges: 1
}

// TestTransportSendsTheStepsKey: requests a step sends through the
// transport carry keys derived from the step's name, the same on every
// run of the step (its first run failed unrecorded after sending them);
// another request's step, and a request outside any step, get others.
func TestTransportSendsTheStepsKey(t *testing.T) {
	var mu sync.Mutex
	var received []string
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		received = append(received, r.Header.Get(httpx.KeyHeader))
		mu.Unlock()
	}))
	t.Cleanup(provider.Close)
	client := &http.Client{Transport: idempotency.NewTransport(nil)}
	send := func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, provider.URL, strings.NewReader("{}"))
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		return resp.Body.Close()
	}
	var failed atomic.Bool
	var derived []string
	mw := idempotency.New()(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, _ := idempotency.FromContext(r.Context())
		derived = []string{key.Derive("charge"), key.Derive("charge#2")}
		_, err := idempotency.Step(r.Context(), "charge", func(ctx context.Context) (int, error) {
			require.NoError(t, send(ctx))
			require.NoError(t, send(ctx))
			if failed.CompareAndSwap(false, true) {
				return 0, errors.New("provider timed out") // not recorded: the step runs again
			}
			return 1, nil
		})
		if err != nil {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	require.Equal(t, http.StatusBadGateway, post(mw, "k", "{}").StatusCode)
	require.Equal(t, http.StatusCreated, post(mw, "k", "{}").StatusCode)
	require.Equal(t, append(slices.Clone(derived), derived...), received, "keys of both runs")
	require.NotEqual(t, derived[0], derived[1])

	failed.Store(false)
	require.Equal(t, http.StatusBadGateway, post(mw, "other", "{}").StatusCode)
	require.NotContains(t, received[:4], received[4], "another request's step key")
	require.NoError(t, send(t.Context()))
	require.NotContains(t, received[:6], received[6], "a key outside any step")
}
