package redisstore

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHeaderRoundTrip: names keep their spelling, values their bytes and
// order; nil and empty headers encode to nothing.
func TestHeaderRoundTrip(t *testing.T) {
	h := http.Header{
		"Content-Type": {"application/json"},
		"x-lower":      {"kept as written"},
		"Link":         {"</a>", "", "</a>"},
		"X-Binary":     {"\x00\xff\r\n\x80"},
	}
	got, err := decodeHeader(encodeHeader(h))
	require.NoError(t, err)
	require.Equal(t, h, got)
	require.Empty(t, encodeHeader(nil))
	require.Empty(t, encodeHeader(http.Header{}))
	got, err = decodeHeader(nil)
	require.NoError(t, err)
	require.Nil(t, got)
}

// TestCorruptHeader: bytes encodeHeader cannot have written are an error,
// not a panic or a partial header.
func TestCorruptHeader(t *testing.T) {
	valid := encodeHeader(http.Header{"Location": {"/payments/1"}})
	for _, b := range [][]byte{
		valid[:len(valid)-1],
		valid[:1],
		{0x80},
		{0x05, 'a'},
		{0x01, 'a', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
	} {
		got, err := decodeHeader(b)
		require.ErrorIs(t, err, errCorruptHeader, "%q", b)
		require.Nil(t, got)
	}
}

// FuzzDecodeHeader: any bytes decode without panicking, and whatever
// decodes encodes back to a header that decodes the same.
func FuzzDecodeHeader(f *testing.F) {
	f.Add(encodeHeader(http.Header{"A": {"1", "2"}, "b": {""}}))
	f.Add([]byte{0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeHeader(b)
		if err != nil {
			return
		}
		again, err := decodeHeader(encodeHeader(h))
		require.NoError(t, err)
		require.Equal(t, h, again)
	})
}
