package httpx

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseKey(t *testing.T) {
	longest := strings.Repeat("k", MaxKeyLen)
	type keyCase struct {
		name  string
		value string
		key   string // expected key; empty means ErrKeyInvalid
	}
	cases := []keyCase{
		// Bare form.
		{"bare", "abc-123", "abc-123"},
		{"bare one byte", "a", "a"},
		{"bare 255 bytes", longest, longest},
		{"bare 256 bytes", longest + "k", ""},
		{"bare every visible byte", visibleASCII(), visibleASCII()},
		{"bare uuid", "8e03978e-40d5-43e8-bc93-6894a57f9324", "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{"bare with inner quote", `ab"c`, `ab"c`},
		{"bare with backslash", `a\b`, `a\b`},
		{"bare with comma", "a,b", "a,b"},
		{"bare inner space", "a b", ""},
		{"bare control", "\x01", ""},
		{"bare high byte", "a\xffb", ""},
		{"empty", "", ""},
		{"only spaces", "   ", ""},
		{"only tabs", "\t\t", ""},

		// Surrounding whitespace.
		{"bare padded", "  abc \t", "abc"},
		{"quoted padded", "\t\"abc\"  ", "abc"},

		// Structured-field string form.
		{"quoted", `"abc-123"`, "abc-123"},
		{"quoted one byte", `"a"`, "a"},
		{"quoted 255 bytes", `"` + longest + `"`, longest},
		{"quoted 256 bytes", `"` + longest + `k"`, ""},
		{"quoted inner space", `"a b"`, "a b"},
		{"quoted only space", `" "`, " "},
		{"quoted keeps inner padding", `" a "`, " a "},
		{"quoted escaped quote", `"a\"b"`, `a"b`},
		{"quoted escaped backslash", `"a\\b"`, `a\b`},
		{"quoted only escapes", `"\\\""`, `\"`},
		{"quoted 255 after unescaping", `"\\` + longest[1:] + `"`, `\` + longest[1:]},
		{"quoted 256 after unescaping", `"\\` + longest + `"`, ""},
		{"quoted empty", `""`, ""},
		{"lone quote", `"`, ""},
		{"unterminated", `"abc`, ""},
		{"unterminated after escape", `"abc\`, ""},
		{"escaped closing quote only", `"abc\"`, ""},
		{"bad escape", `"a\nb"`, ""},
		{"bad escape letter", `"a\x"`, ""},
		{"parameters", `"abc";p=1`, ""},
		{"parameter flag", `"abc";p`, ""},
		{"text after close", `"abc"x`, ""},
		{"two strings", `"a" "b"`, ""},
		{"list of strings", `"a", "b"`, ""},
	}
	// Bytes that neither form takes inside a key.
	for _, b := range []struct{ name, inner string }{
		{"tab", "\t"}, {"CR", "\r"}, {"LF", "\n"}, {"NUL", "\x00"}, {"DEL", "\x7f"}, {"non-ASCII", "é"},
	} {
		cases = append(cases,
			keyCase{"bare " + b.name, "a" + b.inner + "b", ""},
			keyCase{"quoted " + b.name, `"a` + b.inner + `b"`, ""})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key, err := ParseKey(http.Header{KeyHeader: {tc.value}})
			if tc.key == "" {
				assert.ErrorIs(t, err, ErrKeyInvalid)
				assert.Empty(t, key)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.key, key)
		})
	}
}

// visibleASCII returns every byte from 0x21 to 0x7E once.
func visibleASCII() string {
	var b strings.Builder
	for c := byte(0x21); c <= 0x7E; c++ {
		b.WriteByte(c)
	}
	return b.String()
}

func TestValidKey(t *testing.T) {
	longest := strings.Repeat("k", MaxKeyLen)
	for _, tc := range []struct {
		key   string
		valid bool
	}{
		{"evt_1NG8Du2eZvKYlo2CUI79vXWy", true},
		{"a", true},
		{longest, true},
		{" a b ", true}, // what the quoted form carries
		{visibleASCII(), true},
		{"", false},
		{longest + "k", false},
		{"a\tb", false},
		{"a\nb", false},
		{"a\x7fb", false},
		{"clé", false},
	} {
		t.Run(tc.key, func(t *testing.T) {
			assert.Equal(t, tc.valid, ValidKey(tc.key))
		})
	}
}

func TestParseKeyHeaderLines(t *testing.T) {
	_, err := ParseKey(http.Header{})
	assert.ErrorIs(t, err, ErrKeyMissing)

	_, err = ParseKey(http.Header{"Other": {"x"}})
	assert.ErrorIs(t, err, ErrKeyMissing)

	_, err = ParseKey(http.Header{KeyHeader: {"a", "a"}})
	assert.ErrorIs(t, err, ErrKeyMultiple)

	_, err = ParseKey(http.Header{KeyHeader: {"a", ""}})
	assert.ErrorIs(t, err, ErrKeyMultiple)

	// A header line with an empty value is present but invalid.
	_, err = ParseKey(http.Header{KeyHeader: {""}})
	assert.ErrorIs(t, err, ErrKeyInvalid)

	// Header.Set canonicalises the name, as net/http does for requests.
	h := http.Header{}
	h.Set("idempotency-key", "abc")
	key, err := ParseKey(h)
	require.NoError(t, err)
	assert.Equal(t, "abc", key)
}

func TestParseKeyBothFormsSameKey(t *testing.T) {
	for _, key := range []string{"abc-123", `a"b`, `a\b`, visibleASCII()} {
		quoted := quoteKey(key)
		bare, err := ParseKey(http.Header{KeyHeader: {key}})
		require.NoError(t, err)
		sf, err := ParseKey(http.Header{KeyHeader: {quoted}})
		require.NoError(t, err, quoted)
		assert.Equal(t, bare, sf)
		assert.Equal(t, key, sf)
	}
}

// The errors are distinct, and their text names the problem without echoing
// the client's input.
func TestParseKeyErrorsAreSafe(t *testing.T) {
	errs := []error{ErrKeyMissing, ErrKeyMultiple, ErrKeyInvalid}
	for i, err := range errs {
		assert.Contains(t, err.Error(), "Idempotency-Key")
		for j, other := range errs {
			if i != j {
				assert.NotErrorIs(t, err, other)
			}
		}
	}
	_, err := ParseKey(http.Header{KeyHeader: {"secret\x00value"}})
	require.ErrorIs(t, err, ErrKeyInvalid)
	assert.NotContains(t, err.Error(), "secret")
}

func TestParseKeyDoesNotAllocate(t *testing.T) {
	for _, v := range []string{"abc-123", `"abc-123"`, " abc "} {
		h := http.Header{KeyHeader: {v}}
		allocs := testing.AllocsPerRun(100, func() {
			if _, err := ParseKey(h); err != nil {
				t.Fatal(err)
			}
		})
		assert.Zero(t, allocs, v)
	}
}

func BenchmarkParseKey(b *testing.B) {
	for _, tc := range []struct{ name, value string }{
		{"bare", "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{"quoted", `"8e03978e-40d5-43e8-bc93-6894a57f9324"`},
		{"escaped", `"8e03978e-40d5-\"43e8\"-bc93-6894a57f9324"`},
	} {
		h := http.Header{KeyHeader: {tc.value}}
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ParseKey(h); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
