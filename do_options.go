package idempotency

import (
	"context"
	"log/slog"
	"time"
)

// DoOption configures one call of Do.
type DoOption func(*doConfig)

type doConfig struct {
	lease         time.Duration
	retention     time.Duration
	recordTimeout time.Duration // 0: the lease
	storeTimeout  time.Duration // set by Do (see storeTimeout)
	wait          time.Duration
	errorHandler  func(ctx context.Context, err error) // nil: logged by slog.Default
	observer      *Observer
}

func defaultDoConfig() doConfig {
	return doConfig{lease: 30 * time.Second, retention: 24 * time.Hour}
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

// DoErrorHandler sets the function told of store errors Do does not return, a
// lost lease included (fn's context then ends with cause ErrLeaseLost).
// Defaults to slog.Default.
func DoErrorHandler(handle func(ctx context.Context, err error)) DoOption {
	if handle == nil {
		panic("idempotency: DoErrorHandler expects a function")
	}
	return func(c *doConfig) { c.errorHandler = handle }
}

func (c *doConfig) reportError(ctx context.Context, err error) {
	if c.errorHandler != nil {
		c.errorHandler(ctx, err)
		return
	}
	slog.Default().ErrorContext(ctx, "idempotency: store error in Do", "err", err)
}
