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
}

func defaultDoConfig() doConfig {
	return doConfig{lease: 30 * time.Second, retention: 24 * time.Hour}
}

// DoLease sets how long Do's claim holds a key before another caller may
// take it over if this one dies. While fn runs the lease is renewed every
// third of its length, so fn may run far longer. Defaults to 30 seconds.
func DoLease(d time.Duration) DoOption {
	d = positive("DoLease", "d", d)
	return func(c *doConfig) { c.lease = d }
}

// DoRetention sets how long fn's stored result (or final error) is kept
// and returned to later callers. Defaults to 24 hours.
func DoRetention(d time.Duration) DoOption {
	d = positive("DoRetention", "d", d)
	return func(c *doConfig) { c.retention = d }
}

// DoRecordTimeout sets how long each store call that records fn's outcome
// (Complete or Release; with a store.TxStore, Commit or Rollback) may take.
// It runs even if Do's context has ended; Complete and Release are sent
// again, after a short pause, while they fail with a connection error
// within it. Defaults to the lease (DoLease).
func DoRecordTimeout(d time.Duration) DoOption {
	d = positive("DoRecordTimeout", "d", d)
	return func(c *doConfig) { c.recordTimeout = d }
}

// DoStoreTimeout sets how long each store call that claims or looks at
// Do's key may take (Claim, or with a store.TxStore, BeginClaim, and
// DoWait's looks and watches). A claim the store has not answered in time
// fails, and Do returns the store's error; one it applied but answered too
// late holds the key until the lease lapses (callers get
// ErrInFlight), and nobody runs fn. Do panics unless d is shorter than the
// lease. The in-memory store gets no deadline. Defaults to 5 seconds, or
// half the lease if that is shorter.
func DoStoreTimeout(d time.Duration) DoOption {
	d = positive("DoStoreTimeout", "d", d)
	return func(c *doConfig) { c.storeTimeout = d }
}

// DoWait makes a caller that finds the key in flight wait up to timeout
// for its result; if the holder releases the key meanwhile, this caller
// claims it and runs fn. It is woken and looks again as WithWait's
// requests do. Do's context ending ends the wait. Defaults to 0:
// ErrInFlight at once.
func DoWait(timeout time.Duration) DoOption {
	if timeout < 0 {
		panic("idempotency: DoWait expects timeout >= 0")
	}
	return func(c *doConfig) { c.wait = timeout }
}

// DoErrorHandler sets the function told of the store errors Do does not
// return: a failed renewal, a lost lease (fn's context is then cancelled
// with ErrLeaseLost as its cause), a failed release or rollback. Defaults
// to logging them with slog.Default.
func DoErrorHandler(handle func(ctx context.Context, err error)) DoOption {
	if handle == nil {
		panic("idempotency: DoErrorHandler expects a function")
	}
	return func(c *doConfig) { c.errorHandler = handle }
}

// reportError tells the error handler of err, met while running the job of
// the caller whose context is ctx.
func (c *doConfig) reportError(ctx context.Context, err error) {
	if c.errorHandler != nil {
		c.errorHandler(ctx, err)
		return
	}
	slog.Default().ErrorContext(ctx, "idempotency: store error in Do", "err", err)
}
