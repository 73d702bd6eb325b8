package httpx

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// decodeProblem checks that body is a JSON object and returns its members.
func decodeProblem(t *testing.T, body []byte) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(body, &m), string(body))
	return m
}

func TestWriteProblem(t *testing.T) {
	w := httptest.NewRecorder()
	w.Header().Set("Content-Length", "999")
	w.Header().Set("ETag", `"v1"`)
	w.Header().Set("Last-Modified", "Mon, 02 Jan 2006 15:04:05 GMT")
	w.Header().Set("Content-Type", "text/html")
	w.Header().Set("Retry-After", "1")

	WriteProblem(w, Problem{
		Type:   "https://example.com/problems/in-flight",
		Title:  "Request in progress",
		Status: http.StatusConflict,
		Detail: "A request with this key is still being processed.",
	})

	assert.Equal(t, http.StatusConflict, w.Code)
	h := w.Result().Header
	assert.Equal(t, "application/problem+json", h.Get("Content-Type"))
	assert.Equal(t, "no-store", h.Get("Cache-Control"))
	assert.Equal(t, "nosniff", h.Get("X-Content-Type-Options"))
	assert.Equal(t, strconv.Itoa(w.Body.Len()), h.Get("Content-Length"))
	assert.Empty(t, h.Values("ETag"))
	assert.Empty(t, h.Values("Last-Modified"))
	assert.Equal(t, "1", h.Get("Retry-After"))
	assert.Equal(t, map[string]any{
		"type":   "https://example.com/problems/in-flight",
		"title":  "Request in progress",
		"status": float64(http.StatusConflict),
		"detail": "A request with this key is still being processed.",
	}, decodeProblem(t, w.Body.Bytes()))
}

func TestWriteProblemDefaults(t *testing.T) {
	w := httptest.NewRecorder()
	WriteProblem(w, Problem{Status: http.StatusBadRequest})
	assert.Equal(t, http.StatusBadRequest, w.Code)
	m := decodeProblem(t, w.Body.Bytes())
	assert.Equal(t, "about:blank", m["type"])
	assert.Equal(t, "Bad Request", m["title"])
	assert.Equal(t, float64(http.StatusBadRequest), m["status"])
	assert.NotContains(t, m, "detail")
}

func TestWriteProblemBadStatus(t *testing.T) {
	for _, status := range []int{0, -1, 42, 100, 103, 200, 302, 399, 600, 1000} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			w := httptest.NewRecorder()
			assert.NotPanics(t, func() {
				WriteProblem(w, Problem{Type: "about:blank", Title: "x", Status: status})
			})
			assert.Equal(t, http.StatusInternalServerError, w.Code)
			assert.Equal(t, float64(http.StatusInternalServerError), decodeProblem(t, w.Body.Bytes())["status"])
		})
	}
}

// Through a real server the client sees the same status, headers and body.
func TestWriteProblemOverServer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		WriteProblem(w, Problem{Type: "about:blank", Title: "Unprocessable", Status: http.StatusUnprocessableEntity})
	}))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode)
	assert.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
	var p Problem
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&p))
	assert.Equal(t, Problem{Type: "about:blank", Title: "Unprocessable", Status: http.StatusUnprocessableEntity}, p)
}

// TestWriteProblemDropsOtherContentHeaders: headers that describe another
// representation (its encoding, range, digests) are not sent with the
// problem, which they do not describe.
func TestWriteProblemDropsOtherContentHeaders(t *testing.T) {
	w := httptest.NewRecorder()
	other := []string{"Content-Encoding", "Content-Range", "Content-Disposition", "Content-Digest",
		"Content-MD5", "Repr-Digest", "Digest", "ETag", "Last-Modified"}
	for _, name := range other {
		w.Header().Set(name, "of another body")
	}
	w.Header().Set("Retry-After", "1")
	WriteProblem(w, Problem{Status: http.StatusServiceUnavailable})
	for _, name := range other {
		require.Empty(t, w.Header().Values(name), name)
	}
	require.Equal(t, "1", w.Header().Get("Retry-After"), "headers about the response itself stay")
}
