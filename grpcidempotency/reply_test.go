package grpcidempotency

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// TestReplyRoundTrip: a message or a status, with header and trailer
// metadata (repeated and binary values too), decode as they were encoded;
// a field a later version adds is skipped.
func TestReplyRoundTrip(t *testing.T) {
	msg, err := structpb.NewStruct(map[string]any{"charge": "ch_1", "amount": 10.0})
	require.NoError(t, err)
	st, err := status.New(codes.NotFound, "no such account").WithDetails(&errdetails.ErrorInfo{Reason: "ACCOUNT"})
	require.NoError(t, err)
	header := metadata.MD{"a": {"1", "2"}, "b-bin": {"\xff\x00"}}
	trailer := metadata.Pairs("t", "3")
	for name, tt := range map[string]struct {
		resp any
		err  error
	}{
		"message": {msg, nil},
		"status":  {nil, st.Err()},
	} {
		t.Run(name, func(t *testing.T) {
			b, err := encodeReply(tt.resp, tt.err, header, trailer)
			require.NoError(t, err)
			b = appendField(b, 99, []byte("from a later version"))
			r, err := decodeReply(b)
			require.NoError(t, err)
			if tt.err != nil {
				require.Nil(t, r.message)
				require.True(t, proto.Equal(st.Proto(), r.status))
			} else {
				require.Nil(t, r.status)
				require.True(t, proto.Equal(msg, r.message), "%v", r.message)
			}
			require.Equal(t, header, r.header)
			require.Equal(t, trailer, r.trailer)
		})
	}
	t.Run("a plain error is Unknown", func(t *testing.T) {
		b, err := encodeReply(nil, errors.New("boom"), nil, nil)
		require.NoError(t, err)
		r, err := decodeReply(b)
		require.NoError(t, err)
		require.Equal(t, int32(codes.Unknown), r.status.Code)
	})
}

// TestReplyErrors: a reply that is not a proto.Message is not encoded, and
// bytes that are not a reply, or name a type not registered, are refused.
func TestReplyErrors(t *testing.T) {
	_, err := encodeReply("text", nil, nil, nil)
	require.Error(t, err)
	for name, b := range map[string][]byte{
		"truncated":      {byte(fieldMessage<<3 | 2), 10, 'a'},
		"not bytes":      {byte(fieldType << 3), 1},
		"unknown type":   appendField(nil, fieldType, []byte("no.Such")),
		"invalid status": appendField(nil, fieldStatus, []byte{0xff}),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := decodeReply(b)
			require.Error(t, err)
		})
	}
}
