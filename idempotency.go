// Package idempotency is net/http middleware that honours the
// Idempotency-Key request header: the first request with a key runs the
// handler and its response is stored; every duplicate, on whichever process
// it lands, gets that stored response replayed instead of running the
// handler again.
//
// The rules, in the order the middleware applies them:
//   - A request whose method is not protected (POST and PATCH by default)
//     passes through untouched.
//   - A request without a key passes through unprotected, or gets 400 when
//     the key is required; a malformed key, or two key headers, get 400.
//   - A body over the limit gets 413. The body is read whole, fingerprinted,
//     and handed on to the handler intact.
//   - The record is looked up under scope + method + route + key. A new key
//     is claimed and the handler runs once; a completed key with the same
//     fingerprint is replayed with Idempotent-Replayed: true; a key still in
//     flight gets 409 with Retry-After (or, with WithWait, the request waits
//     for the response); a key first used with a different fingerprint gets
//     422; a store error gets 503 unless WithFailOpen is set.
//
// Every error response the middleware writes itself is
// application/problem+json with one of the Problem* type URIs.
package idempotency

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/seed43327c4c/idempotency/httpx"
	"github.com/seed43327c4c/idempotency/store"
)

// New returns the middleware. Its default store is an in-memory store that
// protects one process only; pass WithStore for several. Misconfiguration
// panics here, never at request time.
func New(opts ...Option) func(http.Handler) http.Handler {
	c := defaultConfig()
	for _, opt := range opts {
		opt(c)
	}
	if c.store == nil {
		c.store = store.NewMemory()
	}
	if c.errorHandler == nil {
		logger := c.logger
		c.errorHandler = func(r *http.Request, err error) {
			logger.ErrorContext(r.Context(), "idempotency: store error",
				"err", err, "method", r.Method, "path", r.URL.Path)
		}
	}
	if c.canonicalJSON && c.maxBodyBytes > maxCanonicalBody {
		panic("idempotency: WithCanonicalJSON reads bodies under 2 GiB; set WithMaxBodyBytes lower")
	}
	c.txStore, _ = c.store.(store.TxStore)
	if c.fingerprint == nil {
		c.fingerprint = Fingerprint
	}
	return func(next http.Handler) http.Handler {
		m := &middleware{config: c, next: next}
		m.leases = leaseKeeper{m: m, held: make(map[*heldLease]struct{})}
		return m
	}
}

type middleware struct {
	*config
	next   http.Handler
	leases leaseKeeper
}

// call is one protected request on its way through the middleware. Its
// parts share one allocation: the buffered body, and for a request that
// claims its key, the recorder, the lease and the stored response the
// handler runs under.
type call struct {
	key         string // storage key: scope, method, route and client key
	fingerprint string
	waiting     bool // the key was found in flight, and the request waits (WithWait)
	body        bufferedBody
	rec         httpx.Recorder
	lease       heldLease
	stored      store.Response
}

func (m *middleware) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !m.methods[r.Method] {
		m.next.ServeHTTP(w, r)
		return
	}
	clientKey, err := httpx.ParseKey(r.Header)
	switch {
	case errors.Is(err, httpx.ErrKeyMissing):
		if m.keyRequired {
			httpx.WriteProblem(w, problemKeyMissing)
			return
		}
		m.next.ServeHTTP(w, r)
		return
	case err != nil:
		httpx.WriteProblem(w, problemKeyInvalid)
		return
	}

	c := &call{}
	err = c.body.read(r, m.maxBodyBytes)
	switch {
	case errors.Is(err, errBodyTooLarge):
		refuseTooLarge(w, r)
		return
	case err != nil:
		httpx.WriteProblem(w, problemBodyUnreadable)
		return
	}
	if r.Body != http.NoBody {
		r.Body = &c.body // a nil body (a request made in the process) reads as empty
	}
	fingerprintBody := c.body.contents()
	if m.canonicalJSON {
		fingerprintBody = canonicalJSON(r, fingerprintBody)
	}
	var scope string
	if m.scope != nil {
		scope = m.scope(r)
	}
	c.key = storageKey(scope, r.Method, m.route(r), clientKey)
	c.fingerprint = m.fingerprint(r, fingerprintBody)
	c.body.rewind() // the scope, route or fingerprint function may have read r.Body
	m.claim(w, r, c)
}

// claim claims c's key and runs the handler, or answers from the record
// that already holds the key: a replay, a 422, or for a key in flight, a 409
// or a wait.
func (m *middleware) claim(w http.ResponseWriter, r *http.Request, c *call) {
	token := newToken()
	if m.tryClaim(w, r, c, token) {
		return
	}
	if m.wait > 0 {
		m.waitForRecord(w, r, c, token)
		return
	}
	m.writeRetryableProblem(w, problemKeyInFlight)
}

// tryClaim makes one attempt at c's key: it runs the handler if it
// claims the key, or answers from the record holding it. It reports false,
// having written nothing, when the key is in flight for the same request.
func (m *middleware) tryClaim(w http.ResponseWriter, r *http.Request, c *call, token string) bool {
	if m.txStore != nil {
		return m.tryClaimInTx(w, r, c, token)
	}
	claimedAt := time.Now()
	rec, claimed, err := m.store.Claim(r.Context(), c.key, c.fingerprint, token, m.lease)
	switch {
	case err != nil:
		m.storeFailed(w, r, c, fmt.Errorf("idempotency: claim: %w", err))
		return true
	case claimed:
		m.run(w, r, c, rec.Owner, claimedAt)
		return true
	default:
		return m.answerFromRecord(w, c, rec)
	}
}

// answerFromRecord answers a request whose key is held by rec, unless rec
// is in flight for the same request: a different fingerprint gets 422, a
// completed record is replayed, an unreplayable one gets 409. It reports
// whether it answered.
func (m *middleware) answerFromRecord(w http.ResponseWriter, c *call, rec store.Record) bool {
	switch {
	case rec.Fingerprint != c.fingerprint:
		httpx.WriteProblem(w, problemKeyReused)
	case rec.State == store.StateCompleted && rec.Response != nil:
		m.replay(w, rec.Response)
	case rec.State == store.StateCompleted, rec.State == store.StateUnreplayable:
		// A completed record without its response (a faulty store) is
		// answered as one that could not be stored, never run again.
		httpx.WriteProblem(w, problemNotReplayable)
	default:
		return false
	}
	return true
}

// storeFailed answers c's request, whose claim the store could not decide:
// 503, or with fail-open, the handler runs unprotected. A request whose own
// context has ended (its deadline passed, or its client hung up, which is
// likely why the claim failed) never runs unprotected: that would let the
// client's retry run it again. It gets 503 request-interrupted, which a
// client that hung up never reads, and a client hanging up is not reported
// as a store error. Nor does a waiting request run unprotected: it has seen
// its key in flight, so the first request may still be running. A poll that
// fails gets 503; one cut off by the waiter's own context ends the wait as
// a timeout does, with 409.
func (m *middleware) storeFailed(w http.ResponseWriter, r *http.Request, c *call, err error) {
	ended := r.Context().Err()
	switch {
	case ended != nil && c.waiting:
		m.writeRetryableProblem(w, problemKeyInFlight)
		return
	case ended != nil:
		if !errors.Is(ended, context.Canceled) {
			m.errorHandler(r, err)
		}
		m.writeRetryableProblem(w, problemRequestInterrupted)
		return
	}
	m.errorHandler(r, err)
	if m.failOpen && !c.waiting {
		m.logger.WarnContext(r.Context(), "idempotency: store unavailable, running handler unprotected",
			"method", r.Method, "path", r.URL.Path)
		m.next.ServeHTTP(w, r)
		return
	}
	m.writeRetryableProblem(w, problemStoreUnavailable)
}
