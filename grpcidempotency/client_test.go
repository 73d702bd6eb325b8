package grpcidempotency_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/seed43327c4c/idempotency/grpcidempotency"
	"github.com/seed43327c4c/idempotency/store"
)

// keyLog is a handler that keeps the key of each call and answers code.
type keyLog struct {
	mu   sync.Mutex
	keys []string
	code codes.Code
}

func (l *keyLog) handle(ctx context.Context, req proto.Message) (proto.Message, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.keys = append(l.keys, md.Get(grpcidempotency.KeyMetadata)...)
	return req, status.Error(l.code, "answer")
}

func clientConn(t *testing.T, p *payments, opts ...grpcidempotency.ClientOption) *grpc.ClientConn {
	return listen(t, p, nil, grpc.WithUnaryInterceptor(grpcidempotency.UnaryClientInterceptor(opts...)))
}

// TestClientRetries: a call gets a random key, the same on every attempt;
// Aborted and Unavailable are retried up to the attempts allowed, every
// other code is returned at once.
func TestClientRetries(t *testing.T) {
	for code, attempts := range map[codes.Code]int{
		codes.Aborted: 3, codes.Unavailable: 3,
		codes.OK: 1, codes.FailedPrecondition: 1, codes.InvalidArgument: 1, codes.Internal: 1,
	} {
		t.Run(code.String(), func(t *testing.T) {
			l := &keyLog{code: code}
			conn := clientConn(t, &payments{handle: l.handle},
				grpcidempotency.ClientMaxAttempts(3), grpcidempotency.ClientBackoff(time.Millisecond, 2*time.Millisecond))
			require.Equal(t, code, status.Code(charge(t.Context(), conn, "", 10).err))
			require.Len(t, l.keys, attempts)
			for _, key := range l.keys {
				require.Equal(t, l.keys[0], key)
			}
			require.NotEmpty(t, l.keys[0])
			_ = charge(t.Context(), conn, "", 10)
			require.NotEqual(t, l.keys[0], l.keys[len(l.keys)-1], "another call, another key")
		})
	}
}

// TestClientKeepsTheCallersKey: a call that carries a key is sent with it.
func TestClientKeepsTheCallersKey(t *testing.T) {
	l := &keyLog{}
	conn := clientConn(t, &payments{handle: l.handle})
	require.NoError(t, charge(t.Context(), conn, "mine", 10).err)
	require.Equal(t, []string{"mine"}, l.keys)
}

// TestClientRetriesAKeyInFlight: a call whose key is in flight on an
// interceptor's server gets Aborted, retries, and gets the replay; the
// handler runs once.
func TestClientRetriesAKeyInFlight(t *testing.T) {
	b := newBlocking()
	p := &payments{handle: b.handle}
	var aborted atomic.Int32
	countAborted := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		if status.Code(err) == codes.Aborted {
			aborted.Add(1)
		}
		return resp, err
	}
	srvOpts := []grpc.ServerOption{grpc.ChainUnaryInterceptor(countAborted, grpcidempotency.UnaryServerInterceptor(store.NewMemory()))}
	conn := listen(t, p, srvOpts, grpc.WithUnaryInterceptor(grpcidempotency.UnaryClientInterceptor(
		grpcidempotency.ClientBackoff(10*time.Millisecond, 20*time.Millisecond), grpcidempotency.ClientMaxAttempts(1000))))
	first := make(chan answer)
	go func() { first <- charge(context.Background(), conn, "k", 10) }()
	<-b.started
	dup := make(chan answer)
	go func() { dup <- charge(context.Background(), conn, "k", 10) }()
	require.Eventually(t, func() bool { return aborted.Load() >= 2 }, 10*time.Second, time.Millisecond, "the duplicate retries")
	close(b.release)
	require.NoError(t, (<-first).err)
	got := <-dup
	require.NoError(t, got.err)
	require.True(t, grpcidempotency.Replayed(got.header))
	require.EqualValues(t, 1, p.runs.Load())
}

// TestClientBudgets: the retries end with the call's context, or when the
// next wait would pass the time budget.
func TestClientBudgets(t *testing.T) {
	t.Run("context", func(t *testing.T) {
		l := &keyLog{code: codes.Unavailable}
		conn := clientConn(t, &payments{handle: l.handle},
			grpcidempotency.ClientBackoff(time.Minute, time.Minute), grpcidempotency.ClientMaxElapsed(time.Hour))
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		require.Equal(t, codes.DeadlineExceeded, status.Code(charge(ctx, conn, "", 10).err))
		require.Len(t, l.keys, 1)
	})
	t.Run("time budget", func(t *testing.T) {
		l := &keyLog{code: codes.Unavailable}
		conn := clientConn(t, &payments{handle: l.handle},
			grpcidempotency.ClientBackoff(time.Minute, time.Minute), grpcidempotency.ClientMaxElapsed(time.Second))
		start := time.Now()
		require.Equal(t, codes.Unavailable, status.Code(charge(t.Context(), conn, "", 10).err))
		require.Less(t, time.Since(start), 10*time.Second)
		require.Len(t, l.keys, 1)
	})
}

// TestClientMisconfigurationPanics: options that make no sense panic.
func TestClientMisconfigurationPanics(t *testing.T) {
	for name, f := range map[string]func(){
		"attempts": func() { grpcidempotency.ClientMaxAttempts(0) },
		"elapsed":  func() { grpcidempotency.ClientMaxElapsed(-time.Second) },
		"first":    func() { grpcidempotency.ClientBackoff(0, time.Second) },
		"max":      func() { grpcidempotency.ClientBackoff(time.Second, time.Millisecond) },
	} {
		t.Run(name, func(t *testing.T) { require.Panics(t, f) })
	}
}
