package idempotency_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
)

// fingerprintCase is a request as a fingerprint sees it.
type fingerprintCase struct {
	method, target, contentType, body string
}

func (c fingerprintCase) request() (*http.Request, []byte) {
	r := httptest.NewRequest(c.method, c.target, strings.NewReader(c.body))
	if c.contentType != "" {
		r.Header.Set("Content-Type", c.contentType)
	}
	return r, []byte(c.body)
}

// TestFingerprintsTellRequestsApart checks both fingerprints over every
// part they cover, and over shifts of bytes from one part to the next,
// which only the length prefixes tell apart.
func TestFingerprintsTellRequestsApart(t *testing.T) {
	base := fingerprintCase{http.MethodPost, "/payments?x=1", "application/json", `{"amount":100}`}
	others := map[string]fingerprintCase{
		"method":                {http.MethodPatch, base.target, base.contentType, base.body},
		"path":                  {base.method, "/payment?x=1", base.contentType, base.body},
		"query":                 {base.method, "/payments?x=2", base.contentType, base.body},
		"content type":          {base.method, base.target, "text/plain", base.body},
		"no content type":       {base.method, base.target, "", base.body},
		"body":                  {base.method, base.target, base.contentType, `{"amount":101}`},
		"empty body":            {base.method, base.target, base.contentType, ""},
		"type shifted to body":  {base.method, base.target, "application/jso", "n" + base.body},
		"query shifted to type": {base.method, "/payments?x=", "1application/json", base.body},
	}
	for name, fingerprint := range map[string]func(*http.Request, []byte) string{
		"Fingerprint":       idempotency.Fingerprint,
		"FingerprintSHA256": idempotency.FingerprintSHA256,
	} {
		t.Run(name, func(t *testing.T) {
			want := fingerprint(base.request())
			assert.Equal(t, want, fingerprint(base.request()), "the same request, again")
			seen := map[string]string{want: "base"}
			for part, other := range others {
				got := fingerprint(other.request())
				assert.NotContains(t, seen, got, "%s: same fingerprint as %s", part, seen[got])
				seen[got] = part
			}
		})
	}
}

// TestFingerprintFormats pins the fingerprints' sizes: 16 hex digits for
// the default, 64 for SHA-256, so that both fit any store's column.
func TestFingerprintFormats(t *testing.T) {
	r, body := fingerprintCase{http.MethodPost, "/", "", "x"}.request()
	assert.Regexp(t, `^[0-9a-f]{16}$`, idempotency.Fingerprint(r, body))
	assert.Regexp(t, `^[0-9a-f]{64}$`, idempotency.FingerprintSHA256(r, body))
}

// TestFingerprintSHA256InTheMiddleware runs the middleware with the SHA-256
// fingerprint: a retry is replayed, a different body under its key gets 422.
func TestFingerprintSHA256InTheMiddleware(t *testing.T) {
	var runs int
	h := idempotency.New(idempotency.WithFingerprint(idempotency.FingerprintSHA256))(
		http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			runs++
			w.WriteHeader(http.StatusCreated)
		}))
	post := func(body string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(body))
		r.Header.Set("Idempotency-Key", "k")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	require.Equal(t, http.StatusCreated, post(`{"amount":1}`).Code)
	replay := post(`{"amount":1}`)
	assert.Equal(t, http.StatusCreated, replay.Code)
	assert.Equal(t, "true", replay.Header().Get("Idempotent-Replayed"))
	assert.Equal(t, http.StatusUnprocessableEntity, post(`{"amount":2}`).Code)
	assert.Equal(t, 1, runs)
}

// TestFingerprintSHA256KeepsTheEarlierDefault pins FingerprintSHA256 to the
// values the SHA-256 default gave before XXH64 replaced it (computed at
// commit b1bf09a), so that records made then still replay.
func TestFingerprintSHA256KeepsTheEarlierDefault(t *testing.T) {
	r, body := fingerprintCase{http.MethodPost, "/payments?x=1", "application/json", `{"amount":1}`}.request()
	assert.Equal(t, "6ea0a457b6467a45406feeaf5ecb0fe0e10d36d97399105494f7c903c94162c7", idempotency.FingerprintSHA256(r, body))
	r, body = fingerprintCase{http.MethodPatch, "/p", "", ""}.request()
	assert.Equal(t, "e1be339e342ea959f159b2bbbddcc9f893c73f820fcf6c35d294817d241798eb", idempotency.FingerprintSHA256(r, body))
}
