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

// TransportMaxAttempts sets how many times, the first included, the
// transport sends one request. Defaults to 5.
func TransportMaxAttempts(n int) TransportOption {
	n = positive("TransportMaxAttempts", "n", n)
	return func(c *transportConfig) { c.maxAttempts = n }
}

// TransportMaxElapsed sets the time budget of one request and its retries,
// from its first sending: no retry starts after it, or whose delay would
// end after it. Defaults to 30 seconds.
func TransportMaxElapsed(d time.Duration) TransportOption {
	d = positive("TransportMaxElapsed", "d", d)
	return func(c *transportConfig) { c.maxElapsed = d }
}

// TransportMaxBodyBytes sets the largest request body the transport
// buffers to send again when the request has no GetBody; a longer one is
// sent once, never retried. Defaults to 1 MiB.
func TransportMaxBodyBytes(n int64) TransportOption {
	n = positive("TransportMaxBodyBytes", "n", n)
	return func(c *transportConfig) { c.maxBodyBytes = n }
}

// TransportBackoff sets the delay before the first retry, doubled before
// each next one up to max; each delay is drawn at random from its upper
// half, and is at least the Retry-After the server sent. Defaults to 100
// milliseconds and 5 seconds.
func TransportBackoff(first, max time.Duration) TransportOption {
	first = positive("TransportBackoff", "first", first)
	if max < first {
		panic("idempotency: TransportBackoff expects max >= first")
	}
	return func(c *transportConfig) { c.firstDelay, c.maxDelay = first, max }
}
