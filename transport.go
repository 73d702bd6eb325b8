package idempotency

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/seed43327c4c/idempotency/httpx"
)

// NewTransport returns a client http.RoundTripper over base (nil:
// http.DefaultTransport) that makes POST and PATCH safe to retry; other
// methods pass through. A request without an Idempotency-Key gets a random
// one, the same on every retry, or, sent from inside a Step, the step's
// derived key (Step); a caller's key is sent once. The body is
// replayed through GetBody or buffered (TransportMaxBodyBytes; a longer one
// is sent once). It retries transport errors, 409 key-in-flight, 429 and 503
// but record-sealed, with jittered exponential backoff, at least the
// Retry-After, within the attempt and time budgets or until the context
// ends.
func NewTransport(base http.RoundTripper, opts ...TransportOption) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	t := &transport{base: base, transportConfig: defaultTransportConfig()}
	for _, opt := range opts {
		opt(&t.transportConfig)
	}
	return t
}

// SentKey returns the Idempotency-Key resp's request was sent with.
func SentKey(resp *http.Response) string {
	if resp == nil || resp.Request == nil {
		return ""
	}
	return resp.Request.Header.Get(httpx.KeyHeader)
}

// Replayed reports whether resp is a replay (Idempotent-Replayed: true).
func Replayed(resp *http.Response) bool {
	return resp != nil && resp.Header.Get(replayedHeader) == "true"
}

type transport struct {
	base http.RoundTripper
	transportConfig
}

// keyedRequest is a keyed request and its key's value, in one allocation.
type keyedRequest struct {
	req http.Request
	key [1]string
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodPost && req.Method != http.MethodPatch {
		return t.base.RoundTrip(req)
	}
	copied := false // the caller's req is never changed
	if req.Header.Get(httpx.KeyHeader) == "" {
		req, copied = keyed(req), true
	}
	getBody, first, err := t.replayableBody(req)
	if err != nil {
		return nil, err
	}
	if first != nil {
		if !copied {
			c := *req
			req = &c
		}
		req.Body = first
	}
	if getBody == nil { // too long to keep: sent once
		return t.base.RoundTrip(req)
	}
	return t.send(req, getBody)
}

// keyed returns a copy of req whose key is under the canonical name alone,
// where Go's transport looks before resending on a dead connection: the
// caller's key, the step's, or a new random one.
func keyed(req *http.Request) *http.Request {
	k := &keyedRequest{req: *req}
	k.req.Header = make(http.Header, len(req.Header)+1)
	for name, values := range req.Header {
		switch {
		case !strings.EqualFold(name, httpx.KeyHeader):
			k.req.Header[name] = values // shared, never changed
		case len(values) > 0 && values[0] != "":
			k.req.Header[httpx.KeyHeader] = values
		}
	}
	if k.req.Header[httpx.KeyHeader] == nil {
		if key, ok := stepKey(req.Context()); ok {
			k.key[0] = key
		} else {
			k.key[0] = crand.Text()
		}
		k.req.Header[httpx.KeyHeader] = k.key[:]
	}
	return &k.req
}

// send sends req until an answer not retried, or the budgets or the context
// end.
func (t *transport) send(req *http.Request, getBody func() (io.ReadCloser, error)) (*http.Response, error) {
	ctx := req.Context()
	start := time.Now()
	delay := t.firstDelay
	sent := req
	for attempt := 1; ; attempt++ {
		resp, err := t.base.RoundTrip(sent)
		retry, after := retryable(resp, err)
		if !retry || attempt == t.maxAttempts || ctx.Err() != nil {
			return resp, err
		}
		wait := max(delay/2+rand.N(delay/2+1), after)
		if wait > t.maxElapsed-time.Since(start) { // not a sum: a far Retry-After would overflow it
			return resp, err
		}
		if resp != nil {
			drain(resp.Body)
		}
		if err := sleep(ctx, wait); err != nil {
			return nil, err
		}
		delay = min(2*delay, t.maxDelay)
		next := *req
		if next.Body, err = getBody(); err != nil {
			return nil, err
		}
		sent = &next
	}
}

// replayableBody returns a function that gives req's body afresh, or nil if
// the body is over the limit. If it read req's body, first replaces it.
func (t *transport) replayableBody(req *http.Request) (getBody func() (io.ReadCloser, error), first io.ReadCloser, err error) {
	switch {
	case req.Body == nil || req.Body == http.NoBody:
		return func() (io.ReadCloser, error) { return http.NoBody, nil }, nil, nil
	case req.GetBody != nil:
		return req.GetBody, nil, nil
	}
	body := req.Body
	buffered, err := io.ReadAll(io.LimitReader(body, t.maxBodyBytes+1))
	if err != nil {
		_ = body.Close()
		return nil, nil, err
	}
	if int64(len(buffered)) > t.maxBodyBytes {
		return nil, readCloser{io.MultiReader(bytes.NewReader(buffered), body), body}, nil
	}
	_ = body.Close()
	getBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buffered)), nil }
	first, _ = getBody()
	return getBody, first, nil
}

// retryable reports whether an answer is worth another attempt, and its
// Retry-After.
func retryable(resp *http.Response, err error) (retry bool, after time.Duration) {
	if err != nil {
		return true, 0
	}
	switch resp.StatusCode {
	case http.StatusTooManyRequests:
	case http.StatusServiceUnavailable:
		if problemType(resp) == ProblemRecordSealed {
			return false, 0
		}
	case http.StatusConflict:
		if problemType(resp) != ProblemKeyInFlight {
			return false, 0
		}
	default:
		return false, 0
	}
	return true, retryAfter(resp.Header.Get("Retry-After"))
}

// problemType returns a problem+json response's type, leaving its body
// readable.
func problemType(resp *http.Response) string {
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
		return ""
	}
	head, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body = readCloser{io.MultiReader(bytes.NewReader(head), resp.Body), resp.Body}
	var p struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(head, &p)
	return p.Type
}

// retryAfter parses a Retry-After header, capped at the longest
// time.Duration.
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	s, err := strconv.ParseInt(v, 10, 64)
	switch {
	case errors.Is(err, strconv.ErrRange) && s > 0, err == nil && s > int64(math.MaxInt64/time.Second):
		return math.MaxInt64
	case err == nil && s > 0:
		return time.Duration(s) * time.Second
	}
	if at, err := http.ParseTime(v); err == nil {
		return max(time.Until(at), 0)
	}
	return 0
}

func sleep(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// drain reads and closes a dropped response, so its connection is reused.
func drain(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, 64<<10))
	_ = body.Close()
}

type readCloser struct {
	io.Reader
	io.Closer
}
