package idempotency

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"sync/atomic"
)

// Key is what a handler knows of the key its request runs under, as
// FromContext reports it.
type Key struct {
	// Client is the idempotency key the client sent, unquoted.
	Client string
	// Fence is the fencing number the store gave this claim. A later claim
	// of the same key (a retry after a release, or a takeover after the
	// owner crashed) gets a higher one, so a downstream system that keeps
	// the highest it has seen can refuse an older owner's late writes.
	Fence int64

	storage string // the storage key: scope, method, route and client key
}

// Derive returns a key for a call the handler makes to another service,
// named name (such as "charge"), to send as that service's idempotency
// key. It depends only on name and on the request's scope, method, route
// and client key, so every run of the request derives the same one, a
// retry after a crash or a takeover included, and another request or name
// derives another. It is 43 characters of unpadded URL-safe base64 (a
// SHA-256), safe in a header or a URL.
func (k Key) Derive(name string) string {
	var scratch [512]byte
	sum := sha256.Sum256(append(append(scratch[:0], k.storage...), name...))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// callKey is the context key under which a claimed request's call is kept.
type callKey struct{}

// FromContext returns the key the request with context ctx runs under,
// and true, while its handler runs under a key the middleware claimed, in
// a store's transaction too. It returns false outside such a handler: for
// a request without a key, one the middleware did not protect, or one run
// unprotected because the store was unreachable (WithFailOpen). It does
// not allocate.
func FromContext(ctx context.Context) (Key, bool) {
	x, ok := ctx.Value(callKey{}).(*callContext)
	if !ok {
		return Key{}, false
	}
	return Key{Client: x.c.clientKey, Fence: x.c.fence, storage: x.c.key}, true
}

// DoNotRecord tells the middleware not to record the response of the
// request with context ctx: when the handler returns, its key is released
// (in a store's transaction, the transaction is rolled back), so the
// client may send the request again with the same key, corrected. A
// handler calls it before any side effect, when it refuses the request
// (a body that fails validation, say). It reports whether ctx belongs to
// a request running under a claimed key (see FromContext); otherwise it
// does nothing.
func DoNotRecord(ctx context.Context) bool {
	x, ok := ctx.Value(callKey{}).(*callContext)
	if ok {
		x.doNotRecord.Store(true)
	}
	return ok
}

// newClaimedCall moves c, whose request r claimed its key, into a
// claimedCall of its own, and returns it with the request its handler
// gets: a copy of r with context ctx and the call in it (FromContext),
// reading the buffered body. A call runs its handler at most once, so it
// is moved at most once.
func newClaimedCall(r *http.Request, ctx context.Context, c *call) (*claimedCall, *http.Request) {
	cc := &claimedCall{call: *c}
	h := &cc.handler
	h.ctx = callContext{Context: ctx, c: &cc.call}
	h.req = *r.WithContext(&h.ctx) // inlined: the copy WithContext makes stays on the stack
	if r.Body != http.NoBody {
		cc.handlerBody.Reset(cc.call.body) // a nil body (a request made in the process) reads as empty
		h.req.Body = &cc.handlerBody
	}
	return cc, &h.req
}

// handlerRequest is a claimed call's request and its context, side by side.
type handlerRequest struct {
	ctx callContext
	req http.Request
}

// callContext is a context that adds its call, under callKey, to its
// parent's values, as context.WithValue would in an allocation of its own,
// with the call's DoNotRecord.
type callContext struct {
	context.Context
	c           *call
	doNotRecord atomic.Bool // set by the handler or job (DoNotRecord)
}

func (x *callContext) Value(key any) any {
	if key == (callKey{}) {
		return x
	}
	return x.Context.Value(key)
}
