package grpcidempotency

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store/seal"
)

// Option configures the interceptor built by UnaryServerInterceptor.
type Option func(*config)

type config struct {
	keyRequired   bool
	keyField      protoreflect.Name // "": the key is in the metadata only
	scope         func(ctx context.Context) string
	methods       map[string]bool // nil: every unary method
	record        func(fullMethod string, code codes.Code) bool
	errorHandler  func(ctx context.Context, err error)
	lease         time.Duration
	retention     time.Duration
	storeTimeout  time.Duration // 0: Do's default
	recordTimeout time.Duration // 0: the lease
	wait          time.Duration
	sealer        *seal.Ring // nil: none
}

func newConfig(opts []Option) *config {
	c := &config{
		record:       DefaultRecordPolicy,
		errorHandler: logError,
		lease:        30 * time.Second,
		retention:    24 * time.Hour,
	}
	for _, opt := range opts {
		opt(c)
	}
	if c.storeTimeout >= c.lease {
		panic("grpcidempotency: WithStoreTimeout expects a timeout shorter than the lease (WithLease)")
	}
	return c
}

// doOptions are the options of each call's idempotency.Do but its
// fingerprint.
func (c *config) doOptions() []idempotency.DoOption {
	opts := []idempotency.DoOption{
		idempotency.DoLease(c.lease), idempotency.DoRetention(c.retention),
		idempotency.DoWait(c.wait), idempotency.DoErrorHandler(c.errorHandler),
	}
	if c.storeTimeout > 0 {
		opts = append(opts, idempotency.DoStoreTimeout(c.storeTimeout))
	}
	if c.recordTimeout > 0 {
		opts = append(opts, idempotency.DoRecordTimeout(c.recordTimeout))
	}
	if c.sealer != nil {
		opts = append(opts, idempotency.DoSealer(c.sealer))
	}
	return opts
}

// logError logs err with its record's key_hash and fence when it names one
// (an *idempotency.RecordError from Do), never the key.
func logError(ctx context.Context, err error) {
	attrs := []any{"err", err}
	if re := (*idempotency.RecordError)(nil); errors.As(err, &re) {
		attrs = append(attrs, "key_hash", re.KeyHash())
		if re.Fence > 0 {
			attrs = append(attrs, "fence", re.Fence)
		}
	}
	slog.Default().ErrorContext(ctx, "grpcidempotency: store error", attrs...)
}

// WithKeyRequired answers InvalidArgument to a call without a key. Defaults
// to optional: the call runs unprotected.
func WithKeyRequired() Option {
	return func(c *config) { c.keyRequired = true }
}

// WithKeyField takes the key from the request's string field name, as
// AIP-155 puts it in request_id, when the request has that field set; the
// idempotency-key metadata is read otherwise. Defaults to the metadata only.
func WithKeyField(name string) Option {
	if !protoreflect.Name(name).IsValid() {
		panic(fmt.Sprintf("grpcidempotency: WithKeyField: %q is not a field name", name))
	}
	return func(c *config) { c.keyField = protoreflect.Name(name) }
}

// WithScope sets the function that names the caller (a user or tenant id
// from the authenticated context); keys of two scopes never collide.
// Defaults to no scope: every caller shares one key space.
func WithScope(scope func(ctx context.Context) string) Option {
	if scope == nil {
		panic("grpcidempotency: WithScope expects a non-nil function")
	}
	return func(c *config) { c.scope = scope }
}

// WithMethods sets the full methods ("/pkg.Service/Method") protected; the
// others run unprotected, whatever key they carry. Defaults to every unary
// method.
func WithMethods(fullMethods ...string) Option {
	if len(fullMethods) == 0 {
		panic("grpcidempotency: WithMethods expects at least one method")
	}
	return func(c *config) {
		c.methods = make(map[string]bool, len(fullMethods))
		for _, m := range fullMethods {
			c.methods[m] = true
		}
	}
}

// WithRecordPolicy sets the rule, given the method and the handler's status
// code, that records the reply (true) or releases the key (false). It is not
// asked for a call whose context ended before its handler returned an error
// (released). Defaults to DefaultRecordPolicy.
func WithRecordPolicy(record func(fullMethod string, code codes.Code) bool) Option {
	if record == nil {
		panic("grpcidempotency: WithRecordPolicy expects a non-nil function")
	}
	return func(c *config) { c.record = record }
}

// WithErrorHandler sets the function told of every store error and of a
// reply that could not be stored; it may be called concurrently. Store
// errors are *idempotency.RecordError. Defaults to logging at Error with
// slog.Default, with the record's key_hash and fence.
func WithErrorHandler(handle func(ctx context.Context, err error)) Option {
	if handle == nil {
		panic("grpcidempotency: WithErrorHandler expects a non-nil function")
	}
	return func(c *config) { c.errorHandler = handle }
}

// WithLease sets how long a claim holds a key before another call may take
// it over; it is renewed every third of its length while the handler runs.
// Defaults to 30 seconds.
func WithLease(d time.Duration) Option {
	d = positive("WithLease", d)
	return func(c *config) { c.lease = d }
}

// WithRetention sets how long a recorded reply is kept for replay. Defaults
// to 24 hours.
func WithRetention(d time.Duration) Option {
	d = positive("WithRetention", d)
	return func(c *config) { c.retention = d }
}

// WithStoreTimeout sets the deadline of each store call that claims or looks
// at a key; past it the call gets Unavailable. It must be shorter than the
// lease. The memory store gets no deadline. Defaults to 5 seconds, or half
// the lease if shorter.
func WithStoreTimeout(d time.Duration) Option {
	d = positive("WithStoreTimeout", d)
	return func(c *config) { c.storeTimeout = d }
}

// WithRecordTimeout sets the deadline of each store call that records an
// outcome, which runs even if the client has gone. Defaults to the lease.
func WithRecordTimeout(d time.Duration) Option {
	d = positive("WithRecordTimeout", d)
	return func(c *config) { c.recordTimeout = d }
}

// WithWait makes a call that finds its key in flight wait up to d for the
// reply instead of getting Aborted at once (Aborted when the wait ends).
// Defaults to 0: Aborted at once.
func WithWait(d time.Duration) Option {
	d = positive("WithWait", d)
	return func(c *config) { c.wait = d }
}

// WithSealer seals each stored reply with ring, as idempotency.WithSealer
// does; a reply no key of ring opens gets FailedPrecondition, the method
// not run. It panics if ring is nil. Defaults to none.
func WithSealer(ring *seal.Ring) Option {
	if ring == nil {
		panic("grpcidempotency: WithSealer expects a non-nil ring")
	}
	return func(c *config) { c.sealer = ring }
}

func positive[T int | time.Duration](option string, v T) T {
	if v <= 0 {
		panic(fmt.Sprintf("grpcidempotency: %s expects a positive value", option))
	}
	return v
}

func isNilPointer(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}
