package pgstore

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestHeaderEncoding(t *testing.T) {
	h := http.Header{"B": {"2", "3"}, "A": {"\xff"}}
	pairs := encodeHeader(h)
	assert.Equal(t, [][]byte{[]byte("A"), []byte("\xff"), []byte("B"), []byte("2"), []byte("B"), []byte("3")}, pairs)
	assert.Equal(t, h, decodeHeader(pairs))
	assert.Nil(t, encodeHeader(nil))
	assert.Nil(t, decodeHeader(nil))
	assert.Equal(t, http.Header{}, decodeHeader(encodeHeader(http.Header{})))
}
