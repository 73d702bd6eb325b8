package httpx

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// quoteKey returns key as an RFC 8941 sf-string.
func quoteKey(key string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key) + `"`
}

// onlyBytesIn reports whether every byte of s is within lo..hi.
func onlyBytesIn(s string, lo, hi byte) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < lo || s[i] > hi {
			return false
		}
	}
	return true
}

func FuzzParseKey(f *testing.F) {
	for _, seed := range []string{
		"abc-123", `"abc-123"`, `"a\"b"`, `"a\\b"`, `"a b"`, `" "`, " abc\t", `ab"c`,
		"", `"`, `""`, `"abc`, `"abc\`, `"a\nb"`, `"abc";p=1`, `"a" "b"`,
		"a b", "a\tb", "a\r\nb", "\x00", "\x7f", "café", "\xff",
		strings.Repeat("k", MaxKeyLen), strings.Repeat("k", MaxKeyLen+1),
		`"` + strings.Repeat(`\\`, MaxKeyLen) + `"`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, v string) {
		key, err := ParseKey(http.Header{KeyHeader: {v}})
		if err != nil {
			require.ErrorIs(t, err, ErrKeyInvalid)
			require.Empty(t, key)
		} else {
			require.GreaterOrEqual(t, len(key), 1)
			require.LessOrEqual(t, len(key), MaxKeyLen)
			require.True(t, onlyBytesIn(key, 0x20, 0x7E), "key %q", key)
			require.True(t, ValidKey(key), "a parsed key is valid: %q", key)
			trimmed := strings.Trim(v, " \t")
			if !strings.HasPrefix(trimmed, `"`) {
				require.Equal(t, trimmed, key, "a bare key is the value itself")
				require.True(t, onlyBytesIn(key, 0x21, 0x7E), "bare key %q", key)
			}
			again, err := ParseKey(http.Header{KeyHeader: {quoteKey(key)}})
			require.NoError(t, err, "re-quoted %q", key)
			require.Equal(t, key, again)
		}

		// A value of 1..255 visible characters not starting with a quote is a
		// bare key, and names the same key in the quoted form.
		if len(v) >= 1 && len(v) <= MaxKeyLen && v[0] != '"' && onlyBytesIn(v, 0x21, 0x7E) {
			require.NoError(t, err, "bare %q", v)
			require.Equal(t, v, key)
			quoted, err := ParseKey(http.Header{KeyHeader: {quoteKey(v)}})
			require.NoError(t, err)
			require.Equal(t, v, quoted)
		}
	})
}
