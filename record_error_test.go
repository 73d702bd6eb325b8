package idempotency_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
)

// TestRecordErrorLogs: the default error handler's line names the record
// by key_hash, the prefix of its store.HashKey that `idempotency inspect
// -hash` takes, and the fence of a claimed request; the scope and the
// client key appear only with WithLoggedKeys.
func TestRecordErrorLogs(t *testing.T) {
	const scope, key = "acct-secret", "key-secret"
	hash := store.HashKey(idempotency.StorageKey(scope, http.MethodPost, "/payments", key))[:idempotency.KeyHashLen]
	cases := []struct {
		name       string
		downWhen   string // "claim": the claim fails; "complete": the handler's outcome is not recorded
		loggedKeys bool
		want       map[string]any
	}{
		{"claim fails", "claim", false, map[string]any{"key_hash": hash}},
		{"complete fails", "complete", false, map[string]any{"key_hash": hash, "fence": 1.0}},
		{"keys logged", "claim", true, map[string]any{"key_hash": hash, "scope": scope, "key": key}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			s := newFlakyStore()
			opts := []idempotency.Option{
				idempotency.WithStore(s),
				idempotency.WithScope(func(*http.Request) string { return scope }),
				idempotency.WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))),
			}
			if tc.loggedKeys {
				opts = append(opts, idempotency.WithLoggedKeys())
			}
			s.down.Store(tc.downWhen == "claim")
			mw := idempotency.New(opts...)(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				s.down.Store(true)
				w.WriteHeader(http.StatusCreated)
			}))
			post(mw, key, "{}")

			var line map[string]any
			require.NoError(t, json.Unmarshal(logs.Bytes(), &line), "one JSON line: %s", logs.String())
			require.Equal(t, "idempotency: store error", line["msg"])
			for field, want := range tc.want {
				require.Equal(t, want, line[field], "field %s", field)
			}
			for _, field := range []string{"fence", "scope", "key"} {
				if _, wanted := tc.want[field]; !wanted {
					require.NotContains(t, line, field)
				}
			}
			if !tc.loggedKeys {
				require.NotContains(t, logs.String(), "secret", "neither the scope nor the key is logged")
			}
		})
	}
}

// TestRecordErrorReachesTheHandler: an application's error handler gets a
// *RecordError naming the record, which wraps the store's error and whose
// text shows neither key nor scope.
func TestRecordErrorReachesTheHandler(t *testing.T) {
	s := newFlakyStore()
	s.down.Store(true)
	var got error
	mw := idempotency.New(idempotency.WithStore(s),
		idempotency.WithScope(func(*http.Request) string { return "acct-secret" }),
		idempotency.WithErrorHandler(func(_ *http.Request, err error) { got = err }),
	)(http.NotFoundHandler())
	post(mw, "key-secret", "{}")

	var re *idempotency.RecordError
	require.ErrorAs(t, got, &re)
	require.ErrorIs(t, got, errStoreDown)
	require.Equal(t, idempotency.StorageKey("acct-secret", http.MethodPost, "/payments", "key-secret"), re.Key)
	require.Equal(t, "acct-secret", re.Scope)
	require.Equal(t, "key-secret", re.ClientKey)
	require.Zero(t, re.Fence, "no claim, no fence")
	require.Equal(t, store.HashKey(re.Key)[:16], re.KeyHash())
	require.False(t, strings.Contains(got.Error(), "secret"), "the text names neither key nor scope: %s", got)
}
