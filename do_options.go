package idempotency

import (
	"context"
	"log/slog"
	"time"

	"github.com/seed43327c4c/idempotency/store/seal"
)

// DoOption configures one call of Do.
type DoOption func(*doConfig)

type doConfig struct {
	lease         time.Duration
	retention     time.Duration
	recordTimeout time.Duration // 0: the lease
	storeTimeout  time.Duration // set by Do (see storeTimeout)
	wait          time.Duration
	fingerprint   string
	scope         string
	errorHandler  func(ctx context.Context, err error) // nil: logged by slog.Default
	observer      *Observer
	sealer        *seal.Ring // nil: none
}

func defaultDoConfig() doConfig {
	return doConfig{lease: 30 * time.Second, retention: 24 * time.Hour, fingerprint: "idempotency.Do"}
}

// DoLease sets how long Do's claim holds a key before another caller may take
// it over; it is renewed while fn runs. Defaults to 30 seconds.
func DoLease(d time.Duration) DoOption {
	d = positive("DoLease", "d", d)
	return func(c *doConfig) { c.lease = d }
}

// DoRetention sets how long fn's result is kept. Defaults to 24 hours.
func DoRetention(d time.Duration) DoOption {
	d = positive("DoRetention", "d", d)
	return func(c *doConfig) { c.retention = d }
}

// DoRecordTimeout is WithRecordTimeout for Do. Defaults to the lease.
func DoRecordTimeout(d time.Duration) DoOption {
	d = positive("DoRecordTimeout", "d", d)
	return func(c *doConfig) { c.recordTimeout = d }
}

// DoStoreTimeout is WithStoreTimeout for Do: a claim not answered in time
// fails with the store's error. Do panics unless d is shorter than the lease.
// Defaults to 5 seconds, or half the lease if shorter.
func DoStoreTimeout(d time.Duration) DoOption {
	d = positive("DoStoreTimeout", "d", d)
	return func(c *doConfig) { c.storeTimeout = d }
}

// DoWait makes a caller that finds the key in flight wait up to timeout, as
// WithWait does. Defaults to 0: ErrInFlight at once.
func DoWait(timeout time.Duration) DoOption {
	if timeout < 0 {
		panic("idempotency: DoWait expects timeout >= 0")
	}
	return func(c *doConfig) { c.wait = timeout }
}

// DoFingerprint sets what tells this call's job from another sent under its
// key: a caller whose fingerprint differs from the holder's gets
// ErrKeyReused. It panics on "". Defaults to one fingerprint for every call.
func DoFingerprint(fingerprint string) DoOption {
	if fingerprint == "" {
		panic("idempotency: DoFingerprint expects a non-empty fingerprint")
	}
	return func(c *doConfig) { c.fingerprint = fingerprint }
}

// DoScope sets the scope of the key (a tenant, a service): one key in two
// scopes names two jobs. Defaults to none.
func DoScope(scope string) DoOption {
	return func(c *doConfig) { c.scope = scope }
}

// DoErrorHandler sets the function told of store errors Do does not return, a
// lost lease included (fn's context then ends with cause ErrLeaseLost), each
// a *RecordError. Defaults to logging with slog.Default: the error, the
// record's key_hash and its fence.
func DoErrorHandler(handle func(ctx context.Context, err error)) DoOption {
	if handle == nil {
		panic("idempotency: DoErrorHandler expects a function")
	}
	return func(c *doConfig) { c.errorHandler = handle }
}

// reportError tells the error handler of err, from a store call on j's
// record under fence (0 if none), as a *RecordError; the default handler
// logs its key_hash and fence, never the key.
func (j *job) reportError(ctx context.Context, fence int64, err error) {
	re := &RecordError{Scope: j.cfg.scope, ClientKey: j.clientKey, Key: j.key, Fence: fence, Err: err}
	if j.cfg.errorHandler != nil {
		j.cfg.errorHandler(ctx, re)
		return
	}
	attrs := []any{"err", err, "key_hash", re.KeyHash()}
	if fence > 0 {
		attrs = append(attrs, "fence", fence)
	}
	slog.Default().ErrorContext(ctx, "idempotency: store error in Do", attrs...)
}
