package sqlitestore

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHeaderEncoding(t *testing.T) {
	h := http.Header{"B": {"2", "\xff\x00"}, "A": {""}, "Empty": {}}
	got, err := decodeHeader(encodeHeader(h))
	require.NoError(t, err)
	assert.Equal(t, http.Header{"A": {""}, "B": {"2", "\xff\x00"}}, got, "a name without values is dropped")

	got, err = decodeHeader(encodeHeader(nil))
	require.NoError(t, err)
	assert.Nil(t, got)

	for _, bad := range [][]byte{{5, 'a'}, {1, 'a'}, {1, 'a', 9}, {0xff}} {
		_, err := decodeHeader(bad)
		assert.ErrorIs(t, err, errBadHeader, "%q", bad)
	}
}
