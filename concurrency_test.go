package idempotency_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
)

// TestConcurrentDuplicatesRunTheHandlerOnce sends one key from 200
// goroutines at once to a slow handler over real connections. The handler
// stays busy until some duplicate has been turned away with 409 (or 5 s).
func TestConcurrentDuplicatesRunTheHandlerOnce(t *testing.T) {
	conflict := make(chan struct{})
	var once sync.Once
	var runs atomic.Int64
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		select {
		case <-conflict:
		case <-time.After(5 * time.Second):
		}
		w.Header().Set("Location", "/payments/1")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.Copy(w, r.Body)
	})
	srv := httptest.NewServer(idempotency.New()(slow))
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 200}}

	type result struct {
		status   int
		replayed bool
		body     string
		location string
	}
	const senders = 200
	results := make([]result, senders)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range senders {
		wg.Go(func() {
			<-start
			req, err := http.NewRequest(http.MethodPost, srv.URL+"/payments", strings.NewReader(`{"amount":42}`))
			if err != nil {
				panic(err)
			}
			req.Header.Set("Idempotency-Key", "one-key")
			resp, err := client.Do(req)
			if err != nil {
				results[i] = result{status: -1, body: err.Error()}
				return
			}
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusConflict {
				once.Do(func() { close(conflict) })
			}
			results[i] = result{resp.StatusCode, resp.Header.Get("Idempotent-Replayed") == "true",
				string(body), resp.Header.Get("Location")}
		})
	}
	close(start)
	wg.Wait()

	require.EqualValues(t, 1, runs.Load(), "the handler ran exactly once")
	var fresh, conflicts int
	for _, r := range results {
		switch {
		case r.status == http.StatusCreated && !r.replayed:
			fresh++
			require.Equal(t, `{"amount":42}`, r.body)
		case r.status == http.StatusCreated:
			require.Equal(t, `{"amount":42}`, r.body, "a replay is identical")
			require.Equal(t, "/payments/1", r.location)
		case r.status == http.StatusConflict:
			conflicts++
		default:
			t.Fatalf("unexpected response %d: %s", r.status, r.body)
		}
	}
	require.Equal(t, 1, fresh)
	require.Positive(t, conflicts, "the duplicates that overlapped the slow handler got 409")
}
