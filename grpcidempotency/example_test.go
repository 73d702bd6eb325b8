package grpcidempotency_test

import (
	"context"
	"fmt"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/seed43327c4c/idempotency/grpcidempotency"
	"github.com/seed43327c4c/idempotency/store"
)

// A server runs each keyed call once; a duplicate gets the reply, marked
// replayed in its header metadata.
func ExampleUnaryServerInterceptor() {
	s := store.NewMemory() // several servers: a Redis or Postgres store they share
	srv := grpc.NewServer(grpc.UnaryInterceptor(grpcidempotency.UnaryServerInterceptor(s,
		grpcidempotency.WithScope(func(ctx context.Context) string { return "tenant-1" }), // from authentication
	)))
	srv.RegisterService(&paymentsDesc, &payments{})
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	conn, _ := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), grpcidempotency.KeyMetadata, "order-42")
	req, _ := structpb.NewStruct(map[string]any{"amount": 10})
	for range 2 {
		var header metadata.MD
		reply := new(structpb.Struct)
		err := conn.Invoke(ctx, "/test.Payments/Charge", req, reply, grpc.Header(&header))
		fmt.Println(reply.Fields["charge"].GetNumberValue(), grpcidempotency.Replayed(header), err)
	}
	// Output:
	// 1 false <nil>
	// 1 true <nil>
}

// A client keys each unary call and retries it under that key while the
// server answers Aborted (the key in flight) or Unavailable.
func ExampleUnaryClientInterceptor() {
	conn, err := grpc.NewClient("payments.internal:443",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(grpcidempotency.UnaryClientInterceptor(grpcidempotency.ClientMaxAttempts(4))),
	)
	if err != nil {
		panic(err)
	}
	defer conn.Close()
}

// The key may travel in the request, as AIP-155 puts it in request_id; a
// request without it, or with it empty, is keyed by its metadata.
func ExampleWithKeyField() {
	s := store.NewMemory()
	grpc.NewServer(grpc.UnaryInterceptor(grpcidempotency.UnaryServerInterceptor(s,
		grpcidempotency.WithKeyField("request_id"),
		grpcidempotency.WithKeyRequired(), // no key anywhere: InvalidArgument
	)))
}
