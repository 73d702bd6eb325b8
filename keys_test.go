package idempotency_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
)

func TestUnprotectedMethodsPassThrough(t *testing.T) {
	h := &paymentHandler{status: http.StatusOK}
	mw := idempotency.New()(h)
	for _, method := range []string{http.MethodGet, http.MethodPut, http.MethodDelete} {
		for range 2 {
			resp := serve(mw, method, "/payments", "key-1", "")
			require.Equal(t, http.StatusOK, resp.StatusCode)
			require.Empty(t, resp.Header.Get("Idempotent-Replayed"))
		}
	}
	require.EqualValues(t, 6, h.runs.Load())
}

func TestProtectedMethodsByDefault(t *testing.T) {
	for _, method := range []string{http.MethodPost, http.MethodPatch} {
		t.Run(method, func(t *testing.T) {
			h := &paymentHandler{}
			mw := idempotency.New()(h)
			require.Equal(t, http.StatusCreated, serve(mw, method, "/p", "k", "{}").StatusCode)
			resp := serve(mw, method, "/p", "k", "{}")
			require.Equal(t, "true", resp.Header.Get("Idempotent-Replayed"))
			require.EqualValues(t, 1, h.runs.Load())
		})
	}
}

func TestWithMethods(t *testing.T) {
	h := &paymentHandler{}
	mw := idempotency.New(idempotency.WithMethods(http.MethodPut))(h)
	serve(mw, http.MethodPut, "/p", "k", "{}")
	require.Equal(t, "true", serve(mw, http.MethodPut, "/p", "k", "{}").Header.Get("Idempotent-Replayed"))
	serve(mw, http.MethodPost, "/p", "k", "{}")
	serve(mw, http.MethodPost, "/p", "k", "{}")
	require.EqualValues(t, 3, h.runs.Load(), "PUT runs once, POST is no longer protected")
}

func TestBareAndQuotedKeysAreTheSameKey(t *testing.T) {
	h := &paymentHandler{}
	mw := idempotency.New()(h)
	require.Equal(t, http.StatusCreated, post(mw, "abc-123", `{"a":1}`).StatusCode)
	resp := post(mw, `"abc-123"`, `{"a":1}`)
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	require.Equal(t, "true", resp.Header.Get("Idempotent-Replayed"))
	require.EqualValues(t, 1, h.runs.Load())
}

func TestInvalidKeysGet400(t *testing.T) {
	cases := map[string]func(*http.Request){
		"empty":         func(r *http.Request) { r.Header["Idempotency-Key"] = []string{""} },
		"256 bytes":     func(r *http.Request) { r.Header.Set("Idempotency-Key", strings.Repeat("k", 256)) },
		"control char":  func(r *http.Request) { r.Header["Idempotency-Key"] = []string{"a\x01b"} },
		"newline":       func(r *http.Request) { r.Header["Idempotency-Key"] = []string{"a\r\nb"} },
		"non-ASCII":     func(r *http.Request) { r.Header["Idempotency-Key"] = []string{"clé"} },
		"space in bare": func(r *http.Request) { r.Header["Idempotency-Key"] = []string{"a b"} },
		"unterminated":  func(r *http.Request) { r.Header["Idempotency-Key"] = []string{`"abc`} },
		"two lines":     func(r *http.Request) { r.Header["Idempotency-Key"] = []string{"a", "b"} },
	}
	for name, edit := range cases {
		t.Run(name, func(t *testing.T) {
			h := &paymentHandler{}
			mw := idempotency.New()(h)
			requireProblem(t, post(mw, "", "{}", edit), http.StatusBadRequest, idempotency.ProblemKeyInvalid)
			require.Zero(t, h.runs.Load())
		})
	}
}

func TestLongestValidKey(t *testing.T) {
	h := &paymentHandler{}
	mw := idempotency.New()(h)
	key := strings.Repeat("k", 255)
	post(mw, key, "{}")
	require.Equal(t, "true", post(mw, key, "{}").Header.Get("Idempotent-Replayed"))
	require.EqualValues(t, 1, h.runs.Load())
}

func TestMissingKeyPassesThroughByDefault(t *testing.T) {
	h := &paymentHandler{}
	mw := idempotency.New()(h)
	post(mw, "", "{}")
	resp := post(mw, "", "{}")
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	require.Empty(t, resp.Header.Get("Idempotent-Replayed"))
	require.EqualValues(t, 2, h.runs.Load())
}

func TestMissingKeyRequired(t *testing.T) {
	h := &paymentHandler{}
	mw := idempotency.New(idempotency.WithKeyRequired())(h)
	requireProblem(t, post(mw, "", "{}"), http.StatusBadRequest, idempotency.ProblemKeyMissing)
	require.Zero(t, h.runs.Load())
}

func TestSameKeyOnTwoRoutesDoesNotCollide(t *testing.T) {
	h := &paymentHandler{}
	mw := idempotency.New()(h)
	require.Empty(t, serve(mw, http.MethodPost, "/payments", "k", "{}").Header.Get("Idempotent-Replayed"))
	require.Empty(t, serve(mw, http.MethodPost, "/emails", "k", "{}").Header.Get("Idempotent-Replayed"))
	require.EqualValues(t, 2, h.runs.Load())
}

// TestSameKeyOnTwoMountsDoesNotCollide: one middleware under two
// http.StripPrefix mounts sees the same r.URL.Path on both; the default
// route is the path the client sent, so the second mount's request runs
// its own handler instead of getting the first's response.
func TestSameKeyOnTwoMountsDoesNotCollide(t *testing.T) {
	mw := idempotency.New()
	mux := http.NewServeMux()
	for _, version := range []string{"v1", "v2"} {
		mux.Handle("/"+version+"/", http.StripPrefix("/"+version, mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, version+" payment")
		}))))
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	require.Equal(t, "v1 payment", readAll(t, postTo(t, srv.URL+"/v1/payments", "k", "{}")))
	require.Equal(t, "v2 payment", readAll(t, postTo(t, srv.URL+"/v2/payments", "k", "{}")))
}

// TestRouteOfAnAbsoluteFormRequest: a client whose proxy is the server
// itself sends the request line in absolute form (POST http://host/path);
// its route is the same as in origin form, so a retry in either form finds
// the first one's record, and two mounts under http.StripPrefix stay apart.
func TestRouteOfAnAbsoluteFormRequest(t *testing.T) {
	var runs atomic.Int64
	mw := idempotency.New()
	mux := http.NewServeMux()
	for _, version := range []string{"v1", "v2"} {
		mux.Handle("/"+version+"/", http.StripPrefix("/"+version, mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs.Add(1)
			_, _ = io.WriteString(w, version+" payment")
		}))))
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	proxy, err := url.Parse(srv.URL)
	require.NoError(t, err)
	viaProxy := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy)}}
	send := func(client *http.Client, path string) string {
		req, err := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", "k")
		resp, err := client.Do(req)
		require.NoError(t, err)
		return readAll(t, resp)
	}
	require.Equal(t, "v1 payment", send(viaProxy, "/v1/payments"))
	require.Equal(t, "v1 payment", send(http.DefaultClient, "/v1/payments"), "the retry in origin form")
	require.Equal(t, "v2 payment", send(viaProxy, "/v2/payments"))
	require.EqualValues(t, 2, runs.Load(), "once per mount")
}

// TestRouteOfARequestMadeInProcess: a request handed to the middleware
// directly, without a request line (RequestURI), is routed by r.URL.Path;
// one without a body (nil) reaches the handler with an empty one.
func TestRouteOfARequestMadeInProcess(t *testing.T) {
	h := &paymentHandler{}
	mw := idempotency.New()(h)
	for _, path := range []string{"/payments", "/emails"} {
		r, err := http.NewRequest(http.MethodPost, "http://example.com"+path, nil)
		require.NoError(t, err)
		r.Header.Set("Idempotency-Key", "k")
		w := httptest.NewRecorder()
		mw.ServeHTTP(w, r)
		require.Empty(t, w.Header().Get("Idempotent-Replayed"), path)
	}
	require.EqualValues(t, 2, h.runs.Load())
}

func TestSameKeyFromTwoScopesDoesNotCollide(t *testing.T) {
	h := &paymentHandler{}
	user := func(r *http.Request) string { return r.Header.Get("X-User") }
	mw := idempotency.New(idempotency.WithScope(user))(h)
	as := func(name string) func(*http.Request) {
		return func(r *http.Request) { r.Header.Set("X-User", name) }
	}
	post(mw, "k", `{"x":1}`, as("alice"))
	resp := post(mw, "k", `{"x":1}`, as("bob"))
	require.Empty(t, resp.Header.Get("Idempotent-Replayed"), "bob must not see alice's response")
	require.Equal(t, "true", post(mw, "k", `{"x":1}`, as("alice")).Header.Get("Idempotent-Replayed"))
	require.EqualValues(t, 2, h.runs.Load())
}

func TestWithRoute(t *testing.T) {
	h := &paymentHandler{}
	everyPath := func(*http.Request) string { return "payments" }
	mw := idempotency.New(idempotency.WithRoute(everyPath), idempotency.WithFingerprint(
		func(r *http.Request, body []byte) string { return string(body) }))(h)
	serve(mw, http.MethodPost, "/payments/a", "k", "{}")
	resp := serve(mw, http.MethodPost, "/payments/b", "k", "{}")
	require.Equal(t, "true", resp.Header.Get("Idempotent-Replayed"), "one route name for both paths")
	require.EqualValues(t, 1, h.runs.Load())
}

func TestDifferentRequestSameKeyGets422(t *testing.T) {
	cases := map[string]func(*http.Request){
		"body":         func(r *http.Request) { r.Body = http.NoBody; r.ContentLength = 0 },
		"query":        func(r *http.Request) { r.URL.RawQuery = "x=1" },
		"content type": func(r *http.Request) { r.Header.Set("Content-Type", "text/plain") },
	}
	for name, edit := range cases {
		t.Run(name, func(t *testing.T) {
			h := &paymentHandler{}
			mw := idempotency.New()(h)
			post(mw, "k", `{"amount":1}`)
			requireProblem(t, post(mw, "k", `{"amount":1}`, edit),
				http.StatusUnprocessableEntity, idempotency.ProblemKeyReused)
			require.EqualValues(t, 1, h.runs.Load())
		})
	}
}

func TestBodyReachesHandlerIntact(t *testing.T) {
	h := &paymentHandler{}
	mw := idempotency.New()(h)
	body := strings.Repeat(`{"k":"v"}`, 1000)
	require.Equal(t, body, readAll(t, post(mw, "k", body)))
}

func TestOversizedBodyGets413(t *testing.T) {
	h := &paymentHandler{}
	mw := idempotency.New(idempotency.WithMaxBodyBytes(10))(h)
	require.Equal(t, http.StatusCreated, post(mw, "at-limit", "0123456789").StatusCode)
	requireProblem(t, post(mw, "k", "0123456789x"), http.StatusRequestEntityTooLarge, idempotency.ProblemBodyTooLarge)
	unknownLength := func(r *http.Request) { r.ContentLength = -1 }
	requireProblem(t, post(mw, "k2", "0123456789x", unknownLength), http.StatusRequestEntityTooLarge, idempotency.ProblemBodyTooLarge)
	require.EqualValues(t, 1, h.runs.Load())
	require.Equal(t, http.StatusCreated, post(mw, "k", "small").StatusCode, "a 413 leaves the key unused")
}
