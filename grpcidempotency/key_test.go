package grpcidempotency

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/structpb"
)

// TestCheckKey: a key is 1 to 255 bytes of printable ASCII.
func TestCheckKey(t *testing.T) {
	for key, valid := range map[string]bool{
		"abc-123":                true,
		"with space":             true,
		strings.Repeat("k", 255): true,
		"":                       false,
		strings.Repeat("k", 256): false,
		"line\nbreak":            false,
		"tab\t":                  false,
		"café":                   false,
		"del\x7f":                false,
	} {
		_, err := checkKey(key)
		require.Equal(t, valid, err == nil, "%q: %v", key, err)
	}
}

// TestDoScopeKeepsPairsApart: scopes and methods that concatenate alike
// never share a Do scope.
func TestDoScopeKeepsPairsApart(t *testing.T) {
	seen := map[string][2]string{}
	for _, pair := range [][2]string{
		{"", "/a.S/M"}, {"/a.S/M", ""}, {"a", "/S/M"}, {"a/", "S/M"}, {"", ""}, {"\x01", ""}, {"", "\x00"},
	} {
		scope := doScope(pair[0], pair[1])
		require.NotContains(t, seen, scope, "%q and %q", pair, seen[scope])
		seen[scope] = pair
	}
}

// TestFingerprint: the same request gives the same fingerprint whatever
// the order its map was filled in; another request or method another.
func TestFingerprint(t *testing.T) {
	fields := map[string]any{}
	for i := range 50 {
		fields[strings.Repeat("f", i+1)] = float64(i)
	}
	fingerprintOf := func(method string, edit func(map[string]any)) string {
		m := map[string]any{}
		for k, v := range fields { // a new random order each time
			m[k] = v
		}
		edit(m)
		req, err := structpb.NewStruct(m)
		require.NoError(t, err)
		fp, err := fingerprint(method, req)
		require.NoError(t, err)
		return fp
	}
	same := func(map[string]any) {}
	want := fingerprintOf("/a.S/M", same)
	for range 10 {
		require.Equal(t, want, fingerprintOf("/a.S/M", same))
	}
	require.NotEqual(t, want, fingerprintOf("/a.S/N", same))
	require.NotEqual(t, want, fingerprintOf("/a.S/M", func(m map[string]any) { m["f"] = "other" }))
}
