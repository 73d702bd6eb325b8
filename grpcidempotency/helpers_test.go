package grpcidempotency_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/seed43327c4c/idempotency/grpcidempotency"
	"github.com/seed43327c4c/idempotency/store"
	redisstore "github.com/seed43327c4c/idempotency/store_redis"
)

// The methods of the test service, registered by hand (no protoc): Charge
// takes and returns a structpb.Struct, Echo a wrapperspb.StringValue.
const (
	chargeMethod = "/test.Payments/Charge"
	echoMethod   = "/test.Payments/Echo"
)

// payments is the test service. Each call counts a run, then calls handle,
// or by default answers {"charge": run} with header metadata charge-id.
type payments struct {
	runs   atomic.Int32
	handle func(ctx context.Context, req proto.Message) (proto.Message, error)
}

func (p *payments) serve(ctx context.Context, req proto.Message) (proto.Message, error) {
	run := p.runs.Add(1)
	if p.handle != nil {
		return p.handle(ctx, req)
	}
	if err := grpc.SetHeader(ctx, metadata.Pairs("charge-id", fmt.Sprint(run))); err != nil {
		return nil, err
	}
	return structpb.NewStruct(map[string]any{"charge": float64(run)})
}

var paymentsDesc = grpc.ServiceDesc{
	ServiceName: "test.Payments",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		method("Charge", func() proto.Message { return new(structpb.Struct) }),
		method("Echo", func() proto.Message { return new(wrapperspb.StringValue) }),
	},
}

// method describes a unary method whose requests newReq makes.
func method(name string, newReq func() proto.Message) grpc.MethodDesc {
	info := &grpc.UnaryServerInfo{FullMethod: "/test.Payments/" + name}
	return grpc.MethodDesc{MethodName: name, Handler: func(srv any, ctx context.Context, dec func(any) error, intercept grpc.UnaryServerInterceptor) (any, error) {
		req := newReq()
		if err := dec(req); err != nil {
			return nil, err
		}
		handler := func(ctx context.Context, req any) (any, error) {
			return srv.(*payments).serve(ctx, req.(proto.Message))
		}
		if intercept == nil {
			return handler(ctx, req)
		}
		return intercept(ctx, req, info, handler)
	}}
}

// serve starts p over loopback behind the server interceptor on s, and
// returns a connection to it; both end with the test.
func serve(t testing.TB, p *payments, s store.Store, opts ...grpcidempotency.Option) *grpc.ClientConn {
	return listen(t, p, []grpc.ServerOption{grpc.UnaryInterceptor(grpcidempotency.UnaryServerInterceptor(s, opts...))})
}

// listen starts p over loopback with srvOpts and returns a connection to
// it, made with dialOpts.
func listen(t testing.TB, p *payments, srvOpts []grpc.ServerOption, dialOpts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(srvOpts...)
	srv.RegisterService(&paymentsDesc, p)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	dialOpts = append(dialOpts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	conn, err := grpc.NewClient(lis.Addr().String(), dialOpts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// answer is what a call got.
type answer struct {
	reply  *structpb.Struct
	header metadata.MD
	err    error
}

// charge calls Charge with key (none if "") and amount.
func charge(ctx context.Context, conn *grpc.ClientConn, key string, amount float64) answer {
	if key != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, grpcidempotency.KeyMetadata, key)
	}
	a := answer{reply: new(structpb.Struct)}
	req, _ := structpb.NewStruct(map[string]any{"amount": amount})
	a.err = conn.Invoke(ctx, chargeMethod, req, a.reply, grpc.Header(&a.header))
	return a
}

// redisClient returns a client of REDIS_URL with the options the Redis
// store requires, closed with the test. It skips the test when the
// variable is unset and fails it when the server does not answer.
func redisClient(t testing.TB) *redis.Client {
	t.Helper()
	url := os.Getenv("REDIS_URL")
	if url == "" {
		t.Skip("REDIS_URL is not set; set it (e.g. redis://127.0.0.1:6379/0) to run the tests on a shared Redis store")
	}
	opts, err := redis.ParseURL(url)
	require.NoError(t, err, "REDIS_URL")
	opts.ContextTimeoutEnabled = true
	opts.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	client := redis.NewClient(opts)
	t.Cleanup(func() { _ = client.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, client.Ping(ctx).Err(), "REDIS_URL=%s is set but the server does not answer", url)
	return client
}

// redisPrefix returns a key prefix of the test's own, whose keys are
// deleted when the test ends.
func redisPrefix(t testing.TB, client *redis.Client) string {
	prefix := "grpcidempotency-test:" + rand.Text() + ":"
	t.Cleanup(func() {
		ctx := context.Background()
		iter := client.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			require.NoError(t, client.Del(ctx, iter.Val()).Err())
		}
		require.NoError(t, iter.Err())
	})
	return prefix
}

// redisStore returns a store on its own client of REDIS_URL, as another
// process would have, under prefix.
func redisStore(t testing.TB, prefix string) store.Store {
	return redisstore.New(redisClient(t), redisstore.WithPrefix(prefix))
}
