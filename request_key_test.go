package idempotency_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
)

// TestKeyFunc: a key taken from the request's body instead of a header.
func TestKeyFunc(t *testing.T) {
	byID := idempotency.WithKeyFunc(idempotency.KeyFromJSONField("id"))
	event := func(id, kind string) string { return `{"id":"` + id + `","type":"` + kind + `"}` }

	t.Run("a redelivery is replayed", func(t *testing.T) {
		h := &paymentHandler{}
		mw := idempotency.New(byID)(h)
		first := post(mw, "", event("evt_1", "paid"))
		require.Equal(t, http.StatusCreated, first.StatusCode)
		require.Equal(t, event("evt_1", "paid"), readAll(t, first), "the handler reads the body whole")
		again := post(mw, "header-ignored", event("evt_1", "paid"))
		require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
		require.Equal(t, event("evt_1", "paid"), readAll(t, again))
		require.Equal(t, http.StatusCreated, post(mw, "", event("evt_2", "paid")).StatusCode)
		require.EqualValues(t, 2, h.runs.Load())
	})

	t.Run("the same id with another body gets 422", func(t *testing.T) {
		h := &paymentHandler{}
		mw := idempotency.New(byID)(h)
		post(mw, "", event("evt_1", "paid"))
		requireProblem(t, post(mw, "", event("evt_1", "refunded")), http.StatusUnprocessableEntity, idempotency.ProblemKeyReused)
		require.EqualValues(t, 1, h.runs.Load())
	})

	t.Run("no key", func(t *testing.T) {
		for _, tc := range []struct {
			name     string
			opts     []idempotency.Option
			status   int
			problem  string
			handlers int64
		}{
			{"passes through", nil, http.StatusCreated, "", 2},
			{"required", []idempotency.Option{idempotency.WithKeyRequired()}, http.StatusBadRequest, idempotency.ProblemKeyMissing, 0},
		} {
			t.Run(tc.name, func(t *testing.T) {
				h := &paymentHandler{}
				mw := idempotency.New(append(tc.opts, byID)...)(h)
				for range 2 {
					resp := post(mw, "k", `{"type":"paid"}`)
					if tc.problem != "" {
						requireProblem(t, resp, tc.status, tc.problem)
						continue
					}
					require.Equal(t, tc.status, resp.StatusCode)
					require.Equal(t, `{"type":"paid"}`, readAll(t, resp), "an unprotected handler reads the body whole")
				}
				require.Equal(t, tc.handlers, h.runs.Load())
			})
		}
	})

	t.Run("invalid keys get 400", func(t *testing.T) {
		for name, body := range map[string]string{
			"not JSON":      `id=evt_1`,
			"not a string":  `{"id":{"v":1}}`,
			"named twice":   `{"id":"a","id":"b"}`,
			"256 bytes":     `{"id":"` + strings.Repeat("k", 256) + `"}`,
			"control char":  `{"id":"a\u0001b"}`,
			"non-ASCII":     `{"id":"clé"}`,
			"empty string":  `{"id":""}`,
			"only a number": `{"id":01}`,
		} {
			t.Run(name, func(t *testing.T) {
				h := &paymentHandler{}
				mw := idempotency.New(byID)(h) // the key optional: an invalid one is still refused
				resp := post(mw, "", body)
				require.Equal(t, http.StatusBadRequest, resp.StatusCode)
				problem := readAll(t, resp)
				require.Contains(t, problem, idempotency.ProblemKeyInvalid)
				require.NotContains(t, problem, "Idempotency-Key", "the key is not in a header")
				require.Zero(t, h.runs.Load())
			})
		}
	})

	t.Run("longest valid key", func(t *testing.T) {
		h := &paymentHandler{}
		mw := idempotency.New(byID)(h)
		body := `{"id":"` + strings.Repeat("k", 255) + `"}`
		post(mw, "", body)
		require.Equal(t, "true", post(mw, "", body).Header.Get("Idempotent-Replayed"))
		require.EqualValues(t, 1, h.runs.Load())
	})

	t.Run("the validator applies", func(t *testing.T) {
		h := &paymentHandler{}
		evt := func(key string) bool { return strings.HasPrefix(key, "evt_") }
		mw := idempotency.New(byID, idempotency.WithKeyValidator(evt))(h)
		requireProblem(t, post(mw, "", event("ch_1", "paid")), http.StatusBadRequest, idempotency.ProblemKeyInvalid)
		require.Equal(t, http.StatusCreated, post(mw, "", event("evt_1", "paid")).StatusCode)
		require.EqualValues(t, 1, h.runs.Load())
	})

	t.Run("the body limit comes first", func(t *testing.T) {
		var asked bool
		h := &paymentHandler{}
		mw := idempotency.New(idempotency.WithMaxBodyBytes(8), idempotency.WithKeyFunc(func(*http.Request, []byte) (string, error) {
			asked = true
			return "k", nil
		}))(h)
		requireProblem(t, post(mw, "", event("evt_1", "paid")), http.StatusRequestEntityTooLarge, idempotency.ProblemBodyTooLarge)
		require.False(t, asked)
		require.Zero(t, h.runs.Load())
	})

	t.Run("other problems name the idempotency key", func(t *testing.T) {
		h := &paymentHandler{gate: make(chan struct{})}
		mw := idempotency.New(byID)(h)
		done := make(chan struct{})
		go func() {
			defer close(done)
			post(mw, "", event("evt_1", "paid"))
		}()
		require.Eventually(t, func() bool { return h.runs.Load() == 1 }, 5*time.Second, time.Millisecond)
		resp := post(mw, "", event("evt_1", "paid"))
		require.Equal(t, http.StatusConflict, resp.StatusCode)
		require.Contains(t, readAll(t, resp), "A request with this idempotency key is still being processed")
		close(h.gate)
		<-done
	})
}
