package httpx

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestHeldSendsNothingUntilSend(t *testing.T) {
	w := httptest.NewRecorder()
	w.Header().Set("X-Outer", "set before the handler")
	held := NewHeld(w)
	require.Equal(t, "set before the handler", held.Header().Get("X-Outer"))
	held.Header().Set("Location", "/a")
	held.WriteHeader(http.StatusEarlyHints)
	held.WriteHeader(http.StatusCreated)
	held.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(held, "one,")
	held.Flush()
	require.NoError(t, http.NewResponseController(held).Flush())
	_, _ = io.WriteString(held, "two")

	require.False(t, w.Flushed)
	require.Empty(t, w.Body.String())
	require.Empty(t, w.Header().Get("Location"), "the real header map is untouched until Send")
	require.Equal(t, http.StatusCreated, held.Status())
	require.True(t, held.Wrote())
	require.Equal(t, "one,two", string(held.Body()))

	held.Send()
	require.Equal(t, http.StatusCreated, w.Code)
	require.Equal(t, "one,two", w.Body.String())
	require.Equal(t, "/a", w.Header().Get("Location"))
	require.Equal(t, "set before the handler", w.Header().Get("X-Outer"))
}

func TestHeldDefaultsTo200AndRefusesHijack(t *testing.T) {
	w := httptest.NewRecorder()
	held := NewHeld(w)
	require.Equal(t, http.StatusOK, held.Status())
	require.False(t, held.Wrote(), "a status of 200 by default, but nothing written")
	_, _, err := http.NewResponseController(held).Hijack()
	require.True(t, errors.Is(err, http.ErrNotSupported))
	held.Send()
	require.Equal(t, http.StatusOK, w.Code)
}

func TestHeldReachesTheRealWritersDeadline(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		held := NewHeld(w)
		if err := http.NewResponseController(held).SetWriteDeadline(time.Now().Add(time.Second)); err != nil {
			held.WriteHeader(http.StatusInternalServerError)
		}
		held.Send()
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

func TestHeldPanicsOnAnInvalidCodeAtOnce(t *testing.T) {
	held := NewHeld(httptest.NewRecorder())
	require.PanicsWithValue(t, "httpx: invalid WriteHeader code 42", func() { held.WriteHeader(42) })
}

// TestHeldKeepsToTheDeclaredLength: as net/http's writer does, a held
// response refuses a write past its declared Content-Length, keeping
// nothing of it, and reports a body short of that length, except for a
// HEAD request.
func TestHeldKeepsToTheDeclaredLength(t *testing.T) {
	h := NewHeld(httptest.NewRecorder())
	h.Header().Set("Content-Length", "5")
	n, err := h.Write([]byte("hel"))
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.True(t, h.ShortOfLength(http.MethodPost))
	require.False(t, h.ShortOfLength(http.MethodHead))
	n, err = h.Write([]byte("lo!"))
	require.ErrorIs(t, err, http.ErrContentLength)
	require.Zero(t, n)
	require.Equal(t, "hel", string(h.Body()))
	_, err = h.Write([]byte("lo"))
	require.NoError(t, err)
	require.False(t, h.ShortOfLength(http.MethodPost))
}
