package grpcidempotency_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/grpcidempotency"
	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/seal"
)

// TestServerRunsOnceAndReplays: the first call with a key runs the handler;
// its duplicates get its reply and header metadata, marked replayed, and
// the handler does not run again. Another key runs it again.
func TestServerRunsOnceAndReplays(t *testing.T) {
	p := &payments{}
	conn := serve(t, p, store.NewMemory())
	first := charge(t.Context(), conn, "k1", 10)
	require.NoError(t, first.err)
	require.False(t, grpcidempotency.Replayed(first.header))
	for range 2 {
		dup := charge(t.Context(), conn, "k1", 10)
		require.NoError(t, dup.err)
		require.True(t, proto.Equal(first.reply, dup.reply), "%v, then %v", first.reply, dup.reply)
		require.Equal(t, []string{"1"}, dup.header.Get("charge-id"))
		require.True(t, grpcidempotency.Replayed(dup.header))
	}
	require.EqualValues(t, 1, p.runs.Load())
	require.NoError(t, charge(t.Context(), conn, "k2", 10).err)
	require.EqualValues(t, 2, p.runs.Load())
}

// TestServerDecisions: what a call gets, and whether the handler runs, for
// each situation the interceptor decides before or instead of running it.
func TestServerDecisions(t *testing.T) {
	tests := []struct {
		name  string
		opts  []grpcidempotency.Option
		calls func(ctx context.Context, conn *grpc.ClientConn) error // the last call's error
		code  codes.Code
		runs  int32
	}{
		{"no key passes through", nil, func(ctx context.Context, conn *grpc.ClientConn) error {
			_ = charge(ctx, conn, "", 10)
			return charge(ctx, conn, "", 10).err
		}, codes.OK, 2},
		{"no key, key required", []grpcidempotency.Option{grpcidempotency.WithKeyRequired()}, func(ctx context.Context, conn *grpc.ClientConn) error {
			return charge(ctx, conn, "", 10).err
		}, codes.InvalidArgument, 0},
		{"two keys", nil, func(ctx context.Context, conn *grpc.ClientConn) error {
			ctx = metadata.AppendToOutgoingContext(ctx, grpcidempotency.KeyMetadata, "a")
			return charge(ctx, conn, "b", 10).err
		}, codes.InvalidArgument, 0},
		{"key too long", nil, func(ctx context.Context, conn *grpc.ClientConn) error {
			return charge(ctx, conn, strings.Repeat("k", 256), 10).err
		}, codes.InvalidArgument, 0},
		{"another request under the key", nil, func(ctx context.Context, conn *grpc.ClientConn) error {
			_ = charge(ctx, conn, "k", 10)
			return charge(ctx, conn, "k", 20).err
		}, codes.FailedPrecondition, 1},
		{"the key on another method", nil, func(ctx context.Context, conn *grpc.ClientConn) error {
			_ = charge(ctx, conn, "k", 10)
			ctx = metadata.AppendToOutgoingContext(ctx, grpcidempotency.KeyMetadata, "k")
			return conn.Invoke(ctx, echoMethod, wrapperspb.String("x"), new(structpb.Struct))
		}, codes.OK, 2},
		{"the key in two scopes", []grpcidempotency.Option{grpcidempotency.WithScope(func(ctx context.Context) string {
			md, _ := metadata.FromIncomingContext(ctx)
			return md.Get("tenant")[0]
		})}, func(ctx context.Context, conn *grpc.ClientConn) error {
			_ = charge(metadata.AppendToOutgoingContext(ctx, "tenant", "a"), conn, "k", 10)
			return charge(metadata.AppendToOutgoingContext(ctx, "tenant", "b"), conn, "k", 10).err
		}, codes.OK, 2},
		{"a method not protected", []grpcidempotency.Option{grpcidempotency.WithMethods(echoMethod)}, func(ctx context.Context, conn *grpc.ClientConn) error {
			_ = charge(ctx, conn, "k", 10)
			return charge(ctx, conn, "k", 20).err
		}, codes.OK, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &payments{}
			conn := serve(t, p, store.NewMemory(), tt.opts...)
			require.Equal(t, tt.code, status.Code(tt.calls(t.Context(), conn)))
			require.Equal(t, tt.runs, p.runs.Load())
		})
	}
}

// TestServerKeyExpired: on a store that keeps tombstones, a call retried
// after its record's retention gets FailedPrecondition, and the method
// does not run again.
func TestServerKeyExpired(t *testing.T) {
	p := &payments{}
	conn := serve(t, p, store.NewMemory(store.WithTombstones(time.Hour)), grpcidempotency.WithRetention(100*time.Millisecond))
	require.NoError(t, charge(t.Context(), conn, "k", 10).err)
	time.Sleep(300 * time.Millisecond)
	require.Equal(t, codes.FailedPrecondition, status.Code(charge(t.Context(), conn, "k", 10).err))
	require.EqualValues(t, 1, p.runs.Load())
}

// TestServerSealer: with WithSealer a reply is stored sealed and replayed;
// one sealed under a key the ring lost gets FailedPrecondition, the method
// not run again.
func TestServerSealer(t *testing.T) {
	ring := func(ids ...string) *seal.Ring {
		var keys []seal.Key
		for _, id := range ids {
			keys = append(keys, seal.Key{ID: id, Secret: bytes.Repeat([]byte(id), seal.KeySize)[:seal.KeySize]})
		}
		r, err := seal.NewRing(keys...)
		require.NoError(t, err)
		return r
	}
	s := store.NewMemory()
	p := &payments{}
	first := charge(t.Context(), serve(t, p, s, grpcidempotency.WithSealer(ring("old"))), "k", 10)
	require.NoError(t, first.err)
	hashes, err := s.Find(t.Context(), "", 2)
	require.NoError(t, err)
	rec, _, err := s.Inspect(t.Context(), hashes[0])
	require.NoError(t, err)
	_, sealed := seal.KeyID(rec.Response)
	require.True(t, sealed)

	replay := charge(t.Context(), serve(t, p, s, grpcidempotency.WithSealer(ring("new", "old"))), "k", 10)
	require.NoError(t, replay.err)
	require.True(t, proto.Equal(first.reply, replay.reply))
	lost := charge(t.Context(), serve(t, p, s, grpcidempotency.WithSealer(ring("new")), grpcidempotency.WithErrorHandler(func(context.Context, error) {})), "k", 10)
	require.Equal(t, codes.FailedPrecondition, status.Code(lost.err))
	require.EqualValues(t, 1, p.runs.Load())
	require.PanicsWithValue(t, "grpcidempotency: WithSealer expects a non-nil ring", func() { grpcidempotency.WithSealer(nil) })
}

// TestServerKeyField: with WithKeyField, a request whose field is set is
// keyed by it, whatever its metadata says; one without the field, or with
// it unset, is keyed by its metadata.
func TestServerKeyField(t *testing.T) {
	p := &payments{handle: func(_ context.Context, req proto.Message) (proto.Message, error) { return req, nil }}
	conn := serve(t, p, store.NewMemory(), grpcidempotency.WithKeyField("value"))
	echo := func(key, value string) error {
		ctx := metadata.AppendToOutgoingContext(t.Context(), grpcidempotency.KeyMetadata, key)
		return conn.Invoke(ctx, echoMethod, wrapperspb.String(value), new(wrapperspb.StringValue))
	}
	require.NoError(t, echo("m1", "req-1"))
	require.NoError(t, echo("m2", "req-1"))
	require.EqualValues(t, 1, p.runs.Load(), "keyed by the field")
	require.NoError(t, echo("m3", ""))
	require.NoError(t, echo("m3", ""))
	require.EqualValues(t, 2, p.runs.Load(), "unset: keyed by the metadata")
	require.NoError(t, charge(t.Context(), conn, "m4", 10).err)
	require.NoError(t, charge(t.Context(), conn, "m4", 10).err)
	require.EqualValues(t, 3, p.runs.Load(), "no such field: keyed by the metadata")
}

// TestServerRecordsOrReleases: the default policy records OK and the codes
// a retry cannot change, replaying them with their details; every other
// code releases the key, so the duplicate runs the handler again. So does
// DoNotRecord, and an error returned once the call's context ended.
func TestServerRecordsOrReleases(t *testing.T) {
	recorded := []codes.Code{codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.PermissionDenied,
		codes.FailedPrecondition, codes.OutOfRange, codes.Unauthenticated}
	released := []codes.Code{codes.Canceled, codes.Unknown, codes.DeadlineExceeded, codes.ResourceExhausted,
		codes.Aborted, codes.Unimplemented, codes.Internal, codes.Unavailable, codes.DataLoss}
	failWith := func(code codes.Code) func(context.Context, proto.Message) (proto.Message, error) {
		return func(context.Context, proto.Message) (proto.Message, error) {
			st, err := status.New(code, "refused").WithDetails(&errdetails.ErrorInfo{Reason: "TEST"})
			if err != nil {
				return nil, err
			}
			return nil, st.Err()
		}
	}
	for _, code := range recorded {
		t.Run(code.String(), func(t *testing.T) {
			p := &payments{handle: failWith(code)}
			conn := serve(t, p, store.NewMemory())
			first, dup := charge(t.Context(), conn, "k", 10), charge(t.Context(), conn, "k", 10)
			require.Equal(t, code, status.Code(dup.err))
			require.True(t, proto.Equal(status.Convert(first.err).Proto(), status.Convert(dup.err).Proto()))
			require.True(t, grpcidempotency.Replayed(dup.header))
			require.EqualValues(t, 1, p.runs.Load())
		})
	}
	for _, code := range released {
		t.Run(code.String(), func(t *testing.T) {
			p := &payments{handle: failWith(code)}
			conn := serve(t, p, store.NewMemory())
			_ = charge(t.Context(), conn, "k", 10)
			require.Equal(t, code, status.Code(charge(t.Context(), conn, "k", 10).err))
			require.EqualValues(t, 2, p.runs.Load())
		})
	}
	t.Run("DoNotRecord", func(t *testing.T) {
		p := &payments{handle: func(ctx context.Context, req proto.Message) (proto.Message, error) {
			idempotency.DoNotRecord(ctx)
			return req, nil
		}}
		conn := serve(t, p, store.NewMemory())
		_ = charge(t.Context(), conn, "k", 10)
		require.NoError(t, charge(t.Context(), conn, "k", 10).err)
		require.EqualValues(t, 2, p.runs.Load())
	})
	t.Run("context ended", func(t *testing.T) {
		p := &payments{}
		p.handle = func(ctx context.Context, req proto.Message) (proto.Message, error) {
			if p.runs.Load() > 1 {
				return req, nil
			}
			<-ctx.Done()
			return nil, status.Error(codes.InvalidArgument, "too late")
		}
		conn := serve(t, p, store.NewMemory())
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		require.Error(t, charge(ctx, conn, "k", 10).err) // the server's answer or the client's timeout
		require.Eventually(t, func() bool {
			_ = charge(t.Context(), conn, "k", 10)
			return p.runs.Load() == 2
		}, 5*time.Second, 20*time.Millisecond, "the key is released")
	})
}

// TestServerReplaysMetadata: the header and trailer metadata the handler
// set, sent early or not, binary values included, come back on a replay.
func TestServerReplaysMetadata(t *testing.T) {
	p := &payments{handle: func(ctx context.Context, req proto.Message) (proto.Message, error) {
		if err := grpc.SetHeader(ctx, metadata.Pairs("a", "1")); err != nil {
			return nil, err
		}
		if err := grpc.SendHeader(ctx, metadata.Pairs("b-bin", "\xff\x00")); err != nil {
			return nil, err
		}
		return req, grpc.SetTrailer(ctx, metadata.Pairs("t", "2"))
	}}
	conn := serve(t, p, store.NewMemory())
	ctx := metadata.AppendToOutgoingContext(t.Context(), grpcidempotency.KeyMetadata, "k")
	req, _ := structpb.NewStruct(map[string]any{"amount": 1})
	for _, replayed := range []bool{false, true} {
		var header, trailer metadata.MD
		require.NoError(t, conn.Invoke(ctx, chargeMethod, req, new(structpb.Struct), grpc.Header(&header), grpc.Trailer(&trailer)))
		require.Equal(t, []string{"1"}, header.Get("a"))
		require.Equal(t, []string{"\xff\x00"}, header.Get("b-bin"))
		require.Equal(t, []string{"2"}, trailer.Get("t"))
		require.Equal(t, replayed, grpcidempotency.Replayed(header))
	}
	require.EqualValues(t, 1, p.runs.Load())
}

// blocking is a handler that signals its start and returns when released.
type blocking struct {
	started chan struct{}
	release chan struct{}
	once    sync.Once
}

func newBlocking() *blocking {
	return &blocking{started: make(chan struct{}), release: make(chan struct{})}
}

func (b *blocking) handle(_ context.Context, req proto.Message) (proto.Message, error) {
	b.once.Do(func() { close(b.started) })
	<-b.release
	return req, nil
}

// TestServerInFlight: a duplicate of a running call gets Aborted at once,
// or with WithWait, the reply once it is recorded; the handler runs once.
func TestServerInFlight(t *testing.T) {
	for _, wait := range []bool{false, true} {
		name := map[bool]string{false: "Aborted", true: "wait"}[wait]
		t.Run(name, func(t *testing.T) {
			b := newBlocking()
			p := &payments{handle: b.handle}
			var opts []grpcidempotency.Option
			if wait {
				opts = append(opts, grpcidempotency.WithWait(5*time.Second))
			}
			conn := serve(t, p, store.NewMemory(), opts...)
			first := make(chan answer)
			go func() { first <- charge(context.Background(), conn, "k", 10) }()
			<-b.started
			dup := make(chan answer)
			go func() { dup <- charge(context.Background(), conn, "k", 10) }()
			if !wait {
				require.Equal(t, codes.Aborted, status.Code((<-dup).err))
			}
			close(b.release)
			require.NoError(t, (<-first).err)
			if wait {
				got := <-dup
				require.NoError(t, got.err)
				require.True(t, grpcidempotency.Replayed(got.header))
			}
			require.EqualValues(t, 1, p.runs.Load())
		})
	}
}

// failingStore's claims fail, as a store that cannot be reached.
type failingStore struct{ *store.Memory }

func (failingStore) Claim(context.Context, string, string, string, time.Duration) (store.Record, bool, error) {
	return store.Record{}, false, errors.New("connection refused")
}

// stalledStore's claims answer only when their context ends, as a store
// behind a dead connection.
type stalledStore struct{ *store.Memory }

func (stalledStore) Claim(ctx context.Context, _, _, _ string, _ time.Duration) (store.Record, bool, error) {
	<-ctx.Done()
	return store.Record{}, false, ctx.Err()
}

// TestServerStoreUnavailable: a call whose claim fails, or is not answered
// within the store timeout, gets Unavailable, the handler does not run, and
// the error handler is told.
func TestServerStoreUnavailable(t *testing.T) {
	for name, s := range map[string]store.Store{
		"failing": failingStore{store.NewMemory()},
		"stalled": stalledStore{store.NewMemory()},
	} {
		t.Run(name, func(t *testing.T) {
			p := &payments{}
			reported := make(chan error, 1)
			conn := serve(t, p, s, grpcidempotency.WithStoreTimeout(50*time.Millisecond),
				grpcidempotency.WithErrorHandler(func(_ context.Context, err error) { reported <- err }))
			require.Equal(t, codes.Unavailable, status.Code(charge(t.Context(), conn, "k", 10).err))
			require.Zero(t, p.runs.Load())
			require.Error(t, <-reported)
		})
	}
}

// TestServerRenewsTheLease: a handler that runs for several leases keeps
// its key: a duplicate meanwhile gets Aborted, never a second run. Its
// context carries the key.
func TestServerRenewsTheLease(t *testing.T) {
	var key idempotency.Key
	p := &payments{handle: func(ctx context.Context, req proto.Message) (proto.Message, error) {
		key, _ = idempotency.FromContext(ctx)
		time.Sleep(time.Second)
		return req, nil
	}}
	conn := serve(t, p, store.NewMemory(), grpcidempotency.WithLease(300*time.Millisecond))
	first := make(chan answer)
	go func() { first <- charge(context.Background(), conn, "k", 10) }()
	for range 3 {
		time.Sleep(250 * time.Millisecond)
		require.Equal(t, codes.Aborted, status.Code(charge(t.Context(), conn, "k", 10).err))
	}
	require.NoError(t, (<-first).err)
	require.EqualValues(t, 1, p.runs.Load())
	require.Equal(t, "k", key.Client)
}

// TestServerMisconfigurationPanics: a missing store and options that make
// no sense panic at construction.
func TestServerMisconfigurationPanics(t *testing.T) {
	var never *store.Memory
	for name, f := range map[string]func(){
		"nil store":         func() { grpcidempotency.UnaryServerInterceptor(nil) },
		"nil pointer store": func() { grpcidempotency.UnaryServerInterceptor(never) },
		"store timeout": func() {
			grpcidempotency.UnaryServerInterceptor(store.NewMemory(), grpcidempotency.WithLease(time.Second), grpcidempotency.WithStoreTimeout(time.Second))
		},
		"key field":     func() { grpcidempotency.WithKeyField("request-id") },
		"scope":         func() { grpcidempotency.WithScope(nil) },
		"methods":       func() { grpcidempotency.WithMethods() },
		"record policy": func() { grpcidempotency.WithRecordPolicy(nil) },
		"error handler": func() { grpcidempotency.WithErrorHandler(nil) },
		"lease":         func() { grpcidempotency.WithLease(0) },
		"wait":          func() { grpcidempotency.WithWait(-time.Second) },
	} {
		t.Run(name, func(t *testing.T) { require.Panics(t, f) })
	}
}

// TestTwoServersShareRedis: 20 concurrent calls with one key, spread over
// two servers each with its own client of one Redis store, run the handler
// once, and every call gets the same reply; those that find it running
// wait for it.
func TestTwoServersShareRedis(t *testing.T) {
	prefix := redisPrefix(t, redisClient(t))
	p := &payments{}
	p.handle = func(context.Context, proto.Message) (proto.Message, error) {
		run := p.runs.Load()
		time.Sleep(50 * time.Millisecond) // the others arrive while it runs
		return structpb.NewStruct(map[string]any{"charge": fmt.Sprintf("ch_%d", run)})
	}
	conns := []*grpc.ClientConn{
		serve(t, p, redisStore(t, prefix), grpcidempotency.WithWait(10*time.Second)),
		serve(t, p, redisStore(t, prefix), grpcidempotency.WithWait(10*time.Second)),
	}
	answers := make(chan answer, 20)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			<-start
			answers <- charge(t.Context(), conns[i%2], "order-42", 10)
		})
	}
	close(start)
	wg.Wait()
	close(answers)
	replays := 0
	for a := range answers {
		require.NoError(t, a.err)
		require.Equal(t, "ch_1", a.reply.Fields["charge"].GetStringValue())
		if grpcidempotency.Replayed(a.header) {
			replays++
		}
	}
	require.EqualValues(t, 1, p.runs.Load())
	require.Equal(t, 19, replays)
}
