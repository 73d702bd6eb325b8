package pgstore

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
)

func TestResponseRoundTripsBinary(t *testing.T) {
	t.Parallel()
	s := newTestStore(t)
	ctx := context.Background()
	cases := map[string]*store.Response{
		"binary": {
			Status: 201,
			Header: http.Header{
				"Content-Type": {"application/octet-stream"},
				"X-Raw":        {"\xff\xfe not utf-8 \x00 nul", "second \x80"},
				"Link":         {"</a>; rel=next", "</b>; rel=prev"},
			},
			Body: []byte{0, 1, 2, 0xff, 0xfe, '\n', 0},
		},
		"nil header and body":   {Status: 204},
		"empty header and body": {Status: 200, Header: http.Header{}, Body: []byte{}},
	}
	for name, resp := range cases {
		key := "key \x00\xff " + name
		fp := "fp \xff\x00"
		rec, claimed, err := s.Claim(ctx, key, fp, "tok\x00\xff", time.Minute)
		require.NoError(t, err)
		require.True(t, claimed)
		require.NoError(t, s.Complete(ctx, key, rec.Owner, resp, time.Hour))

		got, claimed, err := s.Claim(ctx, key, fp, "other", time.Minute)
		require.NoError(t, err, name)
		assert.False(t, claimed, name)
		assert.Equal(t, store.StateCompleted, got.State, name)
		assert.Equal(t, fp, got.Fingerprint, name)
		assert.Equal(t, resp, got.Response, name)
		assert.InDelta(t, time.Hour, got.TTL, float64(time.Minute), name)
	}
}

func TestUnreplayableHasNoResponse(t *testing.T) {
	t.Parallel()
	s := newTestStore(t)
	ctx := context.Background()
	rec, _, err := s.Claim(ctx, "k", "fp", "a", time.Minute)
	require.NoError(t, err)
	require.NoError(t, s.Complete(ctx, "k", rec.Owner, nil, time.Hour))
	got, claimed, err := s.Claim(ctx, "k", "fp", "b", time.Minute)
	require.NoError(t, err)
	assert.False(t, claimed)
	assert.Equal(t, store.StateUnreplayable, got.State)
	assert.Nil(t, got.Response)
	assert.ErrorIs(t, s.Complete(ctx, "k", rec.Owner, nil, time.Hour), store.ErrNotOwner, "a done key cannot be completed twice")
	assert.ErrorIs(t, s.Release(ctx, "k", rec.Owner), store.ErrNotOwner, "a done key cannot be released")
}

func TestHeaderEncoding(t *testing.T) {
	h := http.Header{"B": {"2", "3"}, "A": {"\xff"}}
	pairs := encodeHeader(h)
	assert.Equal(t, [][]byte{[]byte("A"), []byte("\xff"), []byte("B"), []byte("2"), []byte("B"), []byte("3")}, pairs)
	assert.Equal(t, h, decodeHeader(pairs))
	assert.Nil(t, encodeHeader(nil))
	assert.Nil(t, decodeHeader(nil))
	assert.Equal(t, http.Header{}, decodeHeader(encodeHeader(http.Header{})))
}
