package idempotency

import "time"

// TransportOption configures the client transport built by NewTransport.
type TransportOption func(*transportConfig)

type transportConfig struct {
	maxAttempts  int
	maxElapsed   time.Duration
	maxBodyBytes int64
	firstDelay   time.Duration
	maxDelay     time.Duration
}

func defaultTransportConfig() transportConfig {
	return transportConfig{
		maxAttempts:  5,
		maxElapsed:   30 * time.Second,
		maxBodyBytes: 1 << 20,
		firstDelay:   100 * time.Millisecond,
		maxDelay:     5 * time.Second,
	}
}

// TransportMaxAttempts sets how many times, the first included, a request is
// sent. Defaults to 5.
func TransportMaxAttempts(n int) TransportOption {
	n = positive("TransportMaxAttempts", "n", n)
	return func(c *transportConfig) { c.maxAttempts = n }
}

// TransportMaxElapsed sets the time budget of a request and its retries; no
// retry starts, or waits, past it. Defaults to 30 seconds.
func TransportMaxElapsed(d time.Duration) TransportOption {
	d = positive("TransportMaxElapsed", "d", d)
	return func(c *transportConfig) { c.maxElapsed = d }
}

// TransportMaxBodyBytes sets the largest body buffered for a retry when the
// request has no GetBody; a longer one is sent once. Defaults to 1 MiB.
func TransportMaxBodyBytes(n int64) TransportOption {
	n = positive("TransportMaxBodyBytes", "n", n)
	return func(c *transportConfig) { c.maxBodyBytes = n }
}

// TransportBackoff sets the delay before the first retry, doubled up to max,
// each drawn from its upper half and at least the Retry-After sent. Defaults
// to 100 milliseconds and 5 seconds.
func TransportBackoff(first, max time.Duration) TransportOption {
	first = positive("TransportBackoff", "first", first)
	if max < first {
		panic("idempotency: TransportBackoff expects max >= first")
	}
	return func(c *transportConfig) { c.firstDelay, c.maxDelay = first, max }
}
