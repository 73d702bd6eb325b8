package idempotencytest_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/idempotencytest"
)

// failures is a testing.TB that keeps what fails it instead of failing.
type failures struct {
	testing.TB
	errors []string
}

func (f *failures) Helper() {}

func (f *failures) Errorf(format string, args ...any) {
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
}

// countedPayment answers 201 with a payment numbered by its run, after a
// while, so that duplicates arrive while it runs.
func countedPayment(runs *atomic.Int32) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n := runs.Add(1)
		time.Sleep(20 * time.Millisecond)
		w.Header().Set("Location", fmt.Sprintf("/payments/%d", n))
		w.WriteHeader(http.StatusCreated)
		_, _ = fmt.Fprintf(w, `{"id": %d}`, n)
	})
}

func paymentRequest() *http.Request {
	req := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(`{"amount": 500}`))
	req.Header.Set("Idempotency-Key", "order-1")
	return req
}

// TestRequireIdempotent: a protected handler passes, answering 409 or
// waiting; an unprotected one, or one whose answers are never recorded,
// fails the test, saying how often it ran.
func TestRequireIdempotent(t *testing.T) {
	for _, tc := range []struct {
		name string
		wrap func(http.Handler) http.Handler
		runs int32
		want []string // in the failures, in order
	}{
		{"protected", idempotency.New(), 1, nil},
		{"protected, waiting", idempotency.New(idempotency.WithWait(time.Second)), 1, nil},
		{"unprotected", func(h http.Handler) http.Handler { return h }, 20,
			[]string{"duplicate 1 got 201", "the handler ran 20 times for 20 duplicates", "another body got 201, want 422"}},
		{"never recorded", idempotency.New(idempotency.WithRecordPolicy(func(*http.Request, int) bool { return false })), 0,
			[]string{"duplicate", "the handler ran"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var runs atomic.Int32
			f := &failures{TB: t}
			idempotencytest.RequireIdempotent(f, tc.wrap(countedPayment(&runs)), paymentRequest(), 20, `{"amount": 501}`)
			if tc.want == nil {
				require.Empty(t, f.errors)
				require.Equal(t, tc.runs, runs.Load())
				return
			}
			require.NotEmpty(t, f.errors)
			require.Contains(t, f.errors[0], tc.want[0])
			joined := strings.Join(f.errors, "\n")
			for _, w := range tc.want[1:] {
				require.Contains(t, joined, w)
			}
			if tc.runs > 0 {
				require.GreaterOrEqual(t, runs.Load(), tc.runs)
			}
		})
	}
}
