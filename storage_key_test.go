package idempotency

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
)

// TestStorageKeyLayout: the storage key of a POST to /payments with key
// k-1 in scope tenant-1 is each field after its length, then a zero, and
// a store that hashes keys (store.HashKey) keeps its record under the
// SHA-256 of those bytes, in hex. Records already stored under such keys
// must stay reachable, so this layout must never change. Fields that
// would run together without their lengths give different keys, and a
// key longer than the stack buffer is whole.
func TestStorageKeyLayout(t *testing.T) {
	const fields = "\x08tenant-1\x04POST\x09/payments\x03k-1\x00"
	require.Equal(t, fields, StorageKey("tenant-1", "POST", "/payments", "k-1"))
	sum := sha256.Sum256([]byte(fields))
	require.Equal(t, hex.EncodeToString(sum[:]), store.HashKey(StorageKey("tenant-1", "POST", "/payments", "k-1")))

	require.NotEqual(t, StorageKey("tenant-1", "POST", "/payments", "k-1"), StorageKey("tenant-", "1POST", "/payments", "k-1"))
	long := strings.Repeat("k", 300)
	require.Equal(t, "\x00\x04POST\x01/\xac\x02"+long+"\x00", StorageKey("", "POST", "/", long))

}

// keyRecorder is a memory store that records the keys it is asked to
// claim.
type keyRecorder struct {
	store.Store
	claimed []string
}

func (s *keyRecorder) Claim(ctx context.Context, key, fp, token string, lease time.Duration) (store.Record, bool, error) {
	s.claimed = append(s.claimed, key)
	return s.Store.Claim(ctx, key, fp, token, lease)
}

// TestStorageKeyIsWhatTheMiddlewareStores: StorageKey, given what a client
// reports and what the options decide, is the key the middleware claims.
func TestStorageKeyIsWhatTheMiddlewareStores(t *testing.T) {
	scope := WithScope(func(r *http.Request) string { return r.Header.Get("X-Account") })
	cases := []struct {
		name      string
		opts      []Option
		target    string
		keyHeader string
		want      string
	}{
		{"default route", nil, "/payments", "k-1", StorageKey("", "POST", "/payments", "k-1")},
		{"path decoded, query dropped", nil, "/pay%6Dents?x=1", "k-1", StorageKey("", "POST", "/payments", "k-1")},
		{"quoted key", nil, "/payments", `"k-1"`, StorageKey("", "POST", "/payments", "k-1")},
		{"scope", []Option{scope}, "/payments", "k-1", StorageKey("acct-7", "POST", "/payments", "k-1")},
		{"route with host", []Option{WithRoute(RouteWithHost)}, "/payments", "k-1",
			StorageKey("", "POST", "api.example.com/payments", "k-1")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := &keyRecorder{Store: store.NewMemory()}
			mw := New(append(tc.opts, WithStore(s))...)(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(http.StatusCreated)
			}))
			req := httptest.NewRequest(http.MethodPost, "http://api.example.com:443"+tc.target, strings.NewReader("{}"))
			req.Header.Set("Idempotency-Key", tc.keyHeader)
			req.Header.Set("X-Account", "acct-7")
			mw.ServeHTTP(httptest.NewRecorder(), req)
			require.Equal(t, []string{tc.want}, s.claimed)
		})
	}
}

// TestDoStorageKeyIsWhatDoStores: DoStorageKey("", key) is the key Do claims,
// and no request's key.
func TestDoStorageKeyIsWhatDoStores(t *testing.T) {
	s := &keyRecorder{Store: store.NewMemory()}
	_, err := Do(t.Context(), s, "job-1", func(context.Context) ([]byte, error) { return nil, nil })
	require.NoError(t, err)
	require.Equal(t, []string{DoStorageKey("", "job-1")}, s.claimed)
	require.NotEqual(t, StorageKey("", "POST", "idempotency.Do", "job-1"), DoStorageKey("", "job-1"))
}
