package idempotency

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"sync/atomic"
)

// Key is the key a handler's request runs under (FromContext).
type Key struct {
	// Client is the key the client sent, unquoted.
	Client string
	// Fence is the claim's fencing number; every later claim of the key gets
	// a higher one, so a downstream system can refuse an older owner's
	// writes.
	Fence int64

	storage string // scope, method, route and client key
}

// Derive returns a key for the handler's call named name to another service.
// It depends only on name and the request's scope, method, route and client
// key, so every run of the request, a takeover included, derives the same. It
// is 43 characters of unpadded URL-safe base64.
func (k Key) Derive(name string) string {
	var scratch [512]byte
	sum := sha256.Sum256(append(append(scratch[:0], k.storage...), name...))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

type callKey struct{}

// FromContext returns the key of the request with context ctx, and true,
// while its handler runs under a key the middleware claimed (in a transaction
// too); otherwise false. It does not allocate.
func FromContext(ctx context.Context) (Key, bool) {
	x, ok := ctx.Value(callKey{}).(*callContext)
	if !ok {
		return Key{}, false
	}
	return x.key(), true
}

func (x *callContext) key() Key {
	return Key{Client: x.c.clientKey, Fence: x.c.fence, storage: x.c.key}
}

// DoNotRecord makes the middleware release the key of the request with
// context ctx (roll back, in a transaction) rather than record its response,
// so the client may resend it corrected. Call it before any side effect. It
// reports whether ctx runs under a claimed key.
func DoNotRecord(ctx context.Context) bool {
	x, ok := ctx.Value(callKey{}).(*callContext)
	if ok {
		x.doNotRecord.Store(true)
	}
	return ok
}

// newClaimedCall moves c into a claimedCall and returns it with its handler's
// request: r with ctx carrying the call, reading the buffered body. A call
// runs its handler once, so it moves once.
func newClaimedCall(r *http.Request, ctx context.Context, c *call) (*claimedCall, *http.Request) {
	cc := &claimedCall{call: *c}
	h := &cc.handler
	h.ctx = callContext{Context: ctx, c: &cc.call}
	h.req = *r.WithContext(&h.ctx) // inlined, so the copy stays on the stack
	if r.Body != http.NoBody {
		cc.handlerBody.Reset(cc.call.body) // a nil body reads as empty
		h.req.Body = &cc.handlerBody
	}
	return cc, &h.req
}

type handlerRequest struct {
	ctx callContext
	req http.Request
}

// callContext adds its call to its parent's values under callKey, as
// context.WithValue would, without an allocation of its own.
type callContext struct {
	context.Context
	c           *call
	doNotRecord atomic.Bool
	steps       stepRun
}

func (x *callContext) Value(key any) any {
	if key == (callKey{}) {
		return x
	}
	return x.Context.Value(key)
}
