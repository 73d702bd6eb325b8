package headercodec

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRoundTrip: names keep their spelling, values their bytes and order;
// a name without values is dropped; nil and empty headers encode to
// nothing, and nothing decodes to a nil header.
func TestRoundTrip(t *testing.T) {
	h := http.Header{
		"Content-Type": {"application/json"},
		"x-lower":      {"kept as written"},
		"Link":         {"</a>", "", "</a>"},
		"X-Binary":     {"\x00\xff\r\n\x80"},
	}
	got, err := Decode(Encode(h))
	require.NoError(t, err)
	require.Equal(t, h, got)

	got, err = Decode(Encode(http.Header{"B": {"2", "\xff\x00"}, "A": {""}, "Empty": {}}))
	require.NoError(t, err)
	require.Equal(t, http.Header{"A": {""}, "B": {"2", "\xff\x00"}}, got, "a name without values is dropped")

	require.Empty(t, Encode(nil))
	require.Empty(t, Encode(http.Header{}))
	got, err = Decode(nil)
	require.NoError(t, err)
	require.Nil(t, got)
}

// TestEncodeSizesExactly: lengths on each side of a uvarint's byte
// boundaries, and more names than Encode keeps on its stack, round-trip in
// a buffer of exactly the encoded size.
func TestEncodeSizesExactly(t *testing.T) {
	h := http.Header{}
	for _, n := range []int{0, 1, 127, 128, 16383, 16384} {
		h[strings.Repeat("n", n+1)] = []string{strings.Repeat("v", n)}
	}
	for i := range 20 {
		h[fmt.Sprint("X-", i)] = []string{"a", "b"}
	}
	b := Encode(h)
	require.Equal(t, len(b), cap(b))
	got, err := Decode(b)
	require.NoError(t, err)
	require.Equal(t, h, got)
}

// TestCorrupt: bytes Encode cannot have written are an error, not a panic
// or a partial header.
func TestCorrupt(t *testing.T) {
	valid := Encode(http.Header{"Location": {"/payments/1"}})
	for _, b := range [][]byte{
		valid[:len(valid)-1],
		valid[:1],
		{0x80},
		{0x05, 'a'},
		{1, 'a'},
		{1, 'a', 9},
		{0xff},
		{0x01, 'a', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
	} {
		got, err := Decode(b)
		require.ErrorIs(t, err, ErrCorrupt, "%q", b)
		require.Nil(t, got)
	}
}

// FuzzDecode: any bytes decode without panicking, and whatever decodes
// encodes back to a header that decodes the same.
func FuzzDecode(f *testing.F) {
	f.Add(Encode(http.Header{"A": {"1", "2"}, "b": {""}}))
	f.Add([]byte{0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := Decode(b)
		if err != nil {
			return
		}
		again, err := Decode(Encode(h))
		require.NoError(t, err)
		require.Equal(t, h, again)
	})
}
