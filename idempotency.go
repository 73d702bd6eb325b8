// Package idempotency is net/http middleware that honours the
// Idempotency-Key request header: the first request with a key runs the
// handler and its response is stored; a duplicate, on any process sharing
// the store, gets that response replayed with Idempotent-Replayed: true.
//
// A request whose method is not protected (POST and PATCH by default)
// passes through. A missing key passes through unprotected (400 with
// WithKeyRequired); a malformed key gets 400, a body over the limit 413.
// A key in flight gets 409 with Retry-After (or waits, with WithWait); a
// key reused for a different request gets 422; a store error gets 503
// unless WithFailOpen. Error responses are application/problem+json (see
// the Problem* types). A handler sees its key through FromContext, and
// DoNotRecord keeps its response from being recorded. The README and
// docs/usage.md give the full rules.
package idempotency

import (
	"errors"
	"net/http"
	"time"

	"github.com/seed43327c4c/idempotency/httpx"
	"github.com/seed43327c4c/idempotency/internal/canonjson"
	"github.com/seed43327c4c/idempotency/store"
)

// New returns the middleware. The default store is in memory and protects
// one process only; pass WithStore for several. Misconfiguration panics
// here, never at request time.
func New(opts ...Option) func(http.Handler) http.Handler {
	c := defaultConfig()
	for _, opt := range opts {
		opt(c)
	}
	if c.store == nil {
		c.store = store.NewMemory()
	}
	c.storeTimeout = storeTimeout(c.store, c.storeTimeout, c.lease, "WithStoreTimeout", "WithLease")
	if _, inProcess := c.store.(*store.Memory); inProcess {
		c.cache = nil // see WithReplayCache
	}
	if c.errorHandler == nil {
		c.errorHandler = c.logRecordError
	}
	if c.scopeRequired && c.scope == nil {
		panic("idempotency: WithScopeRequired needs WithScope, the function that names the caller")
	}
	if c.canonicalJSON && c.maxBodyBytes > canonjson.MaxSize {
		panic("idempotency: WithCanonicalJSON reads bodies under 2 GiB; set WithMaxBodyBytes lower")
	}
	c.txStore, _ = c.store.(store.TxStore)
	c.stepStore, _ = c.store.(store.StepStore)
	return func(next http.Handler) http.Handler {
		m := &middleware{config: c, next: next}
		m.leases = leaseKeeper{lease: c.lease, held: make(map[*heldLease]struct{})}
		return m
	}
}

type middleware struct {
	*config
	next   http.Handler
	leases leaseKeeper
}

// call is one protected request. It lives in ServeHTTP's frame; only a
// request that claims its key moves it into a claimedCall, so a duplicate
// allocates nothing for a run it does not make.
type call struct {
	key         string // storage key: scope, method, route and client key
	scope       string
	clientKey   string
	fingerprint string
	token       string // the owner token of this request's claims
	body        []byte // read whole (see readBody)
	fence       int64  // of the claim the handler runs under
	waiting     bool   // the key was in flight and the request waits (WithWait)
	handlerRan  bool
	waitStart   sinceEpoch
	handlerTime time.Duration
}

// claimedCall is a call whose request claimed its key, with everything its
// handler's run needs, in one allocation.
type claimedCall struct {
	call
	handlerBody bufferedBody
	rec         httpx.Recorder
	lease       heldLease
	holder      requestLease
	stored      store.Response
	record      detachedDeadline // see recordContext
	recordUsed  bool
	handler     handlerRequest
}

func (m *middleware) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !m.methods[r.Method] {
		m.next.ServeHTTP(w, r)
		return
	}
	var c call
	if m.keyFunc == nil {
		var ok bool
		if c.clientKey, ok = m.headerKey(w, r); !ok {
			return
		}
	}
	var err error
	c.body, err = readBody(r, m.maxBodyBytes)
	switch {
	case errors.Is(err, errBodyTooLarge):
		drainRefused(w, r)
		m.writeProblem(w, r, problemBodyTooLarge)
		m.decided(r, &c, OutcomeBodyTooLarge)
		return
	case err != nil:
		m.writeProblem(w, r, problemBodyUnreadable)
		m.decided(r, &c, OutcomeRequestInterrupted)
		return
	}
	if m.readsRequest() && r.Body != http.NoBody {
		r.Body = newBufferedBody(c.body) // a nil body (a request made in the process) reads as empty
	}
	if m.keyFunc != nil && !m.funcKey(w, r, &c) {
		return
	}
	fingerprintBody := c.body
	if m.canonicalJSON {
		fingerprintBody = canonicalJSON(r, fingerprintBody)
	}
	var scope string
	if m.scope != nil {
		scope = m.scope(r)
	}
	if scope == "" && m.scopeRequired {
		m.writeProblem(w, r, problemScopeMissing)
		m.decided(r, &c, OutcomeScopeMissing)
		return
	}
	c.scope = scope
	c.setStrings(m, r, scope, fingerprintBody)
	m.claim(w, r, &c)
}

// readsRequest reports whether a user function (WithKeyFunc, WithScope,
// WithRoute, WithFingerprint) may read the body before the claim.
func (m *middleware) readsRequest() bool {
	return m.keyFunc != nil || m.scope != nil || m.route != nil || m.fingerprint != nil
}

// setStrings sets c's storage key, fingerprint and owner token, in one
// allocation unless the fingerprint function is the application's own.
func (c *call) setStrings(m *middleware, r *http.Request, scope string, body []byte) {
	var scratch [256]byte
	buf := scratch[:0]
	route := m.route
	if route == nil {
		route = requestPath
	}
	buf = appendStorageKey(buf, scope, r.Method, route(r), c.clientKey)
	keyEnd := len(buf)
	if m.fingerprint == nil {
		buf = appendFingerprint(buf, r, body)
	} else {
		c.fingerprint = m.fingerprint(r, body)
	}
	fingerprintEnd := len(buf)
	all := string(appendToken(buf))
	c.key, c.token = all[:keyEnd], all[fingerprintEnd:]
	if m.fingerprint == nil {
		c.fingerprint = all[keyEnd:fingerprintEnd]
	}
}
