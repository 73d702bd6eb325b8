package idempotency

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCanonicalJSONForms: bodies that decode to one value without loss get
// one canonical form; bodies that decoding would change (a member named
// twice, spelled alike or escaped differently; U+FFFD from any source)
// and bodies that are not exactly one JSON value are left as they are.
func TestCanonicalJSONForms(t *testing.T) {
	for body, want := range map[string]string{
		`{ "b" : [1, {"d":2, "c":"x:y"}], "a" : "q\"uote:" }`: `{"a":"q\"uote:","b":[1,{"c":"x:y","d":2}]}`,
		`[]`:                  `[]`,
		`{}`:                  `{}`,
		` [ {} , [ ] ] `:      `[{},[]]`,
		`-0`:                  `-0`,
		`1e999`:               `1e999`,
		`"\ud83d\ude00"`:      `"😀"`,
		`{"a":1,"\u0061":2}`:  `{"a":1,"\u0061":2}`,
		`{"a":{"b":1,"b":1}}`: `{"a":{"b":1,"b":1}}`,
		`{"a":"\ufffd"}`:      `{"a":"\ufffd"}`,
		`{"\ud800":1}`:        `{"\ud800":1}`,
		`{"a":1}{"a":1}`:      `{"a":1}{"a":1}`,
		`{"a":1`:              `{"a":1`,
		``:                    ``,
	} {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		r.Header.Set("Content-Type", "application/json")
		require.Equal(t, want, string(canonicalJSON(r, []byte(body))), "body %q", body)
	}
}

// TestCanonicalJSONRefusesDeepBodiesCheaply: a body nested deeper than the
// JSON decoder accepts is left as it is after the decoder gives up, which
// it does early, without reading the whole body into memory.
func TestCanonicalJSONRefusesDeepBodiesCheaply(t *testing.T) {
	const depth = 200_000
	body := append(bytes.Repeat([]byte(`{"a":`), depth), bytes.Repeat([]byte(`}`), depth)...)
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	r.Header.Set("Content-Type", "application/json")
	require.Equal(t, body, canonicalJSON(r, body))
	allocs := testing.AllocsPerRun(3, func() { canonicalJSON(r, body) })
	require.Less(t, allocs, 1000.0, "allocations to refuse a body nested %d deep", depth)
}
