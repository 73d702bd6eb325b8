package grpcidempotency

import (
	"context"
	crand "crypto/rand"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// ClientOption configures the interceptor built by UnaryClientInterceptor.
type ClientOption func(*clientConfig)

type clientConfig struct {
	maxAttempts int
	maxElapsed  time.Duration
	firstDelay  time.Duration
	maxDelay    time.Duration
}

// UnaryClientInterceptor returns an interceptor that makes unary calls safe
// to retry: a call without idempotency-key metadata gets a random key, the
// same on every retry; a call's own key is kept. It retries Aborted (the key
// in flight) and Unavailable with jittered exponential backoff, within the
// attempt and time budgets or until the context ends; any other code,
// FailedPrecondition among them, is returned at once. Streaming calls are
// not intercepted.
func UnaryClientInterceptor(opts ...ClientOption) grpc.UnaryClientInterceptor {
	c := &clientConfig{maxAttempts: 5, maxElapsed: 30 * time.Second, firstDelay: 100 * time.Millisecond, maxDelay: 5 * time.Second}
	for _, opt := range opts {
		opt(c)
	}
	return c.intercept
}

func (c *clientConfig) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if md, _ := metadata.FromOutgoingContext(ctx); len(md.Get(KeyMetadata)) == 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, KeyMetadata, crand.Text())
	}
	start := time.Now()
	delay := c.firstDelay
	for attempt := 1; ; attempt++ {
		err := invoker(ctx, method, req, reply, cc, opts...)
		code := status.Code(err)
		retry := code == codes.Aborted || code == codes.Unavailable
		if !retry || attempt == c.maxAttempts || ctx.Err() != nil {
			return err
		}
		wait := delay/2 + rand.N(delay/2+1)
		if wait > c.maxElapsed-time.Since(start) {
			return err
		}
		select {
		case <-ctx.Done():
			return status.FromContextError(ctx.Err()).Err()
		case <-time.After(wait):
		}
		delay = min(2*delay, c.maxDelay)
	}
}

// ClientMaxAttempts sets how many times, the first included, a call is
// sent. Defaults to 5.
func ClientMaxAttempts(n int) ClientOption {
	n = positive("ClientMaxAttempts", n)
	return func(c *clientConfig) { c.maxAttempts = n }
}

// ClientMaxElapsed sets the time budget of a call and its retries; no retry
// starts, or waits, past it. Defaults to 30 seconds.
func ClientMaxElapsed(d time.Duration) ClientOption {
	d = positive("ClientMaxElapsed", d)
	return func(c *clientConfig) { c.maxElapsed = d }
}

// ClientBackoff sets the delay before the first retry, doubled up to max,
// each drawn from its upper half. Defaults to 100 milliseconds and 5
// seconds.
func ClientBackoff(first, max time.Duration) ClientOption {
	first = positive("ClientBackoff", first)
	if max < first {
		panic("grpcidempotency: ClientBackoff expects max >= first")
	}
	return func(c *clientConfig) { c.firstDelay, c.maxDelay = first, max }
}
