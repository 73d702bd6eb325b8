package idempotency

import (
	"cmp"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"time"

	"github.com/seed43327c4c/idempotency/httpx"
	"github.com/seed43327c4c/idempotency/store"
)

// Option configures the middleware built by New.
type Option func(*config)

type config struct {
	store            store.Store
	txStore          store.TxStore // store, if it can claim in a transaction
	methods          map[string]bool
	keyHeader        string // canonical
	keyRequired      bool
	keyValid         func(key string) bool // nil: every well-formed key
	scope            func(*http.Request) string
	scopeRequired    bool
	record           func(r *http.Request, status int) bool
	problemWriter    func(w http.ResponseWriter, r *http.Request, p httpx.Problem)
	route            func(*http.Request) string                // nil: the default route (see route.go)
	fingerprint      func(r *http.Request, body []byte) string // nil: Fingerprint
	canonicalJSON    bool
	maxBodyBytes     int64
	maxResponseBytes int
	lease            time.Duration
	recordTimeout    time.Duration // 0: the lease
	storeTimeout     time.Duration // 0 after New: no deadline (the memory store)
	retention        time.Duration
	retryAfter       time.Duration
	wait             time.Duration
	failOpen         bool
	errorHandler     func(r *http.Request, err error)
	logger           *slog.Logger
	replayHeaders    map[string]bool
	observer         Observer // WithObserver; the zero Observer observes nothing
	observeKeys      bool
	cache            *replayCache // WithReplayCache; nil keeps nothing
}

func defaultConfig() *config {
	return &config{
		methods:          map[string]bool{http.MethodPost: true, http.MethodPatch: true},
		keyHeader:        httpx.KeyHeader,
		record:           DefaultRecordPolicy,
		problemWriter:    writeProblemJSON,
		maxBodyBytes:     1 << 20,
		maxResponseBytes: 1 << 20,
		lease:            30 * time.Second,
		retention:        24 * time.Hour,
		retryAfter:       time.Second,
		logger:           slog.Default(),
		replayHeaders:    headerSet(defaultReplayHeaders...),
	}
}

// defaultReplayHeaders are the response headers stored and replayed unless
// WithReplayHeaders adds more.
// Content-Encoding, Content-Range and Content-Disposition describe the
// stored body bytes themselves (gzip from a compressing middleware inside
// this one, a 206 from http.ServeContent, a download's file name), so a
// replay without them would hand the client bytes it cannot read.
// Content-Length, when the handler set it, frames the replay as it framed
// the first response: net/http measures only bodies under 2 KiB itself, and
// never the empty body of a HEAD response.
var defaultReplayHeaders = []string{
	"Cache-Control", "Content-Disposition", "Content-Encoding", "Content-Language",
	"Content-Length", "Content-Location", "Content-Range", "Content-Type", "ETag",
	"Expires", "Last-Modified", "Link", "Location", "Vary",
}

// WithStore sets where records are kept. Use a shared store (Redis or
// Postgres) when more than one process serves the routes. It panics if s
// is nil, or a nil pointer (a *store.Memory declared but never made, say),
// which would otherwise fail only at the first request. Defaults to an
// in-memory store (store.NewMemory with its defaults), which protects one
// process only.
func WithStore(s store.Store) Option {
	if s == nil || isNilPointer(s) {
		panic("idempotency: WithStore expects a non-nil store")
	}
	return func(c *config) { c.store = s }
}

// isNilPointer reports whether v is a nil pointer of some type.
func isNilPointer(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

// WithMethods sets the HTTP methods the middleware protects; requests with
// any other method pass through untouched. Methods are case-sensitive, as
// in HTTP: a standard method spelled in another case ("post") would protect
// nothing, so it panics, as does an empty one. Defaults to POST and PATCH.
func WithMethods(methods ...string) Option {
	if len(methods) == 0 {
		panic("idempotency: WithMethods expects at least one method")
	}
	for _, m := range methods {
		switch upper := strings.ToUpper(m); {
		case m == "":
			panic("idempotency: WithMethods expects non-empty methods")
		case upper != m && standardMethods[upper]:
			panic(fmt.Sprintf("idempotency: WithMethods: methods are case-sensitive; %q would protect nothing, use %q", m, upper))
		}
	}
	return func(c *config) {
		c.methods = make(map[string]bool, len(methods))
		for _, m := range methods {
			c.methods[m] = true
		}
	}
}

// standardMethods are the methods of RFC 9110, in the only case clients
// send them.
var standardMethods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodDelete: true, http.MethodConnect: true,
	http.MethodOptions: true, http.MethodTrace: true,
}

// WithKeyRequired makes the Idempotency-Key header mandatory on protected
// methods: a request without one gets 400. Defaults to optional: a request
// without a key passes through unprotected.
func WithKeyRequired() Option {
	return func(c *config) { c.keyRequired = true }
}

// WithKeyHeader sets the request header that carries the idempotency key,
// such as X-Idempotency-Key; the middleware's problem titles name it. It
// panics if name is not a valid header field name. Defaults to
// Idempotency-Key.
func WithKeyHeader(name string) Option {
	if !isToken(name) {
		panic(fmt.Sprintf("idempotency: WithKeyHeader: %q is not a header name", name))
	}
	name = http.CanonicalHeaderKey(name)
	return func(c *config) { c.keyHeader = name }
}

// isToken reports whether s is an RFC 9110 token, as a header field name
// must be.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !alnum && !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c)) {
			return false
		}
	}
	return true
}

// WithKeyValidator sets a check of the key beyond its form (for example,
// that it is a UUID). It gets the key as the client sent it, unquoted,
// once the key is known to be well formed; a key it refuses gets 400
// key-invalid and the request claims nothing. A validator that panics
// claims nothing either: the panic goes on up. Defaults to accepting every
// well-formed key.
func WithKeyValidator(valid func(key string) bool) Option {
	if valid == nil {
		panic("idempotency: WithKeyValidator expects a non-nil function")
	}
	return func(c *config) { c.keyValid = valid }
}

// WithScope sets the function that names the caller, usually the user or
// tenant id your authentication put in the request context. Keys from
// different scopes never collide, and a caller cannot read another scope's
// stored responses. Defaults to no scope: every caller shares one key space.
func WithScope(scope func(*http.Request) string) Option {
	if scope == nil {
		panic("idempotency: WithScope expects a non-nil function")
	}
	return func(c *config) { c.scope = scope }
}

// WithScopeRequired refuses a request with a key whose scope function
// (WithScope) returns "": it gets 403 scope-missing, and claims nothing,
// for services where every protected request must come from a known
// caller. New panics if no WithScope is given. Defaults to off: a request
// without a scope shares the key space of every other such request.
func WithScopeRequired() Option {
	return func(c *config) { c.scopeRequired = true }
}

// WithRoute sets the function that names the route a request is for. The
// same client key on two routes never collides. Defaults to the path of the
// request line as the client sent it (r.RequestURI without its query,
// whether as /path or, through a proxy, as http://host/path), decoded,
// without the host: a retry sent through another name of the service finds
// its record, and two mounts of a handler under http.StripPrefix keep their
// keys apart; r.URL.Path stands in for the path of a request made in the
// process, without a request line. RouteWithHost adds the host.
func WithRoute(route func(*http.Request) string) Option {
	if route == nil {
		panic("idempotency: WithRoute expects a non-nil function")
	}
	return func(c *config) { c.route = route }
}

// WithFingerprint replaces the request fingerprint, the hash that tells a
// true retry from a different request reusing a key. It gets the request
// and its whole body, canonicalised first if WithCanonicalJSON is set,
// which it must not change. Defaults to Fingerprint (XXH64 of method, path
// with query, Content-Type and body); FingerprintSHA256 is the same with
// SHA-256.
func WithFingerprint(fingerprint func(r *http.Request, body []byte) string) Option {
	if fingerprint == nil {
		panic("idempotency: WithFingerprint expects a non-nil function")
	}
	return func(c *config) { c.fingerprint = fingerprint }
}

// WithCanonicalJSON makes the fingerprint ignore object member order and
// insignificant whitespace in JSON bodies (Content-Type application/json
// or ending in +json): the fingerprint function gets the body re-encoded
// with sorted members. A body that is not one JSON value, or that decoding
// could read two ways (a member named twice, or two names equal under
// Unicode case folding, as encoding/json matches them; invalid UTF-8; a
// lone surrogate escape), is passed as sent, so no two different requests
// get one fingerprint. The handler always reads the body as sent; the
// Content-Type header is fingerprinted as sent. Every request with a key
// pays for re-encoding, so keep WithMaxBodyBytes no larger than the
// endpoint needs; New panics if it is 2 GiB or more. Defaults to off.
func WithCanonicalJSON() Option {
	return func(c *config) { c.canonicalJSON = true }
}

// WithRecordPolicy sets the rule that decides, once the handler has
// returned, whether its response is recorded (true: stored for replay, or
// marked done but not replayable) or the key released for a retry (false).
// It gets the request and the status sent (200 when the handler wrote
// nothing). It is not asked about a request whose context ended before the
// handler returned with a status outside 2xx and 3xx, which is released
// whatever it says, nor about a hijacked connection, which is recorded,
// nor after the handler called DoNotRecord. A policy that panics releases
// the key, and the panic goes on up. Defaults to DefaultRecordPolicy.
func WithRecordPolicy(record func(r *http.Request, status int) bool) Option {
	if record == nil {
		panic("idempotency: WithRecordPolicy expects a non-nil function")
	}
	return func(c *config) { c.record = record }
}

// WithProblemWriter sets the function that writes the error responses the
// middleware answers itself, for an API with an error format of its own.
// It gets the response, the request and the problem (type URI, title,
// status, detail); Retry-After is already set where the problem needs it.
// It must write the problem's status. A writer that panics leaves no key
// claimed, and the panic goes on up. Defaults to httpx.WriteProblem:
// application/problem+json.
func WithProblemWriter(write func(w http.ResponseWriter, r *http.Request, p httpx.Problem)) Option {
	if write == nil {
		panic("idempotency: WithProblemWriter expects a non-nil function")
	}
	return func(c *config) { c.problemWriter = write }
}

// WithMaxBodyBytes sets the largest request body the middleware reads to
// fingerprint; a larger one gets 413 and the handler does not run. Defaults
// to 1 MiB.
func WithMaxBodyBytes(n int64) Option {
	n = positive("WithMaxBodyBytes", "n", n)
	return func(c *config) { c.maxBodyBytes = n }
}

// WithMaxResponseBytes sets the largest response body stored for replay. A
// larger response still reaches the client in full, and its key is marked
// done but not replayable. Defaults to 1 MiB.
func WithMaxResponseBytes(n int) Option {
	n = positive("WithMaxResponseBytes", "n", n)
	return func(c *config) { c.maxResponseBytes = n }
}

// WithLease sets how long a claim holds a key before another request may
// take it over if the owner dies. While the handler runs the lease is renewed
// every third of its length, so a handler may run far longer. A renewal must
// reach the store within the lease, through scheduling delays, garbage
// collection pauses and network stalls, so a lease much under a second
// protects little on a loaded machine. Defaults to 30 seconds.
func WithLease(d time.Duration) Option {
	d = positive("WithLease", "d", d)
	return func(c *config) { c.lease = d }
}

// WithRecordTimeout sets how long each store call that records a
// request's outcome may take: Complete and Release, or with a
// store.TxStore, Commit and Rollback. The call runs even if the client has
// gone away; Complete and Release are sent again, after a short pause,
// while they fail with a connection error (a failover takes seconds). One
// that has not succeeded in time fails and is reported to the error
// handler like any store error, and a commit that fails so answers the
// client 503. The store's client must heed context deadlines
// on its connections (go-redis: ContextTimeoutEnabled). Defaults to the
// lease (WithLease).
func WithRecordTimeout(d time.Duration) Option {
	d = positive("WithRecordTimeout", "d", d)
	return func(c *config) { c.recordTimeout = d }
}

// WithStoreTimeout sets how long each store call that claims or looks at
// a key may take: a claim, a wait's looks, and the start of a watch
// (store.Watcher), or with a store.TxStore, BeginClaim. A claim or look
// the store has not answered in time gets 503 store-unavailable with
// Retry-After, as a store error does (or, with WithFailOpen, the handler
// runs unprotected). A claim the store applied but answered too late
// holds its key until the lease lapses; until then duplicates get 409,
// and nobody runs it. The store's client must heed context deadlines on
// its connections (go-redis: ContextTimeoutEnabled). New panics unless d
// is shorter than the lease. The in-memory store gets no deadline.
// Defaults to 5 seconds, or half the lease if that is shorter.
func WithStoreTimeout(d time.Duration) Option {
	d = positive("WithStoreTimeout", "d", d)
	return func(c *config) { c.storeTimeout = d }
}

// storeTimeout returns the deadline of the claims and looks of s under
// lease: timeout, or if 0, 5 seconds or half the lease if shorter; 0 (none)
// for the in-memory store. It panics, naming option and leaseOption, if
// timeout is not shorter than lease.
func storeTimeout(s store.Store, timeout, lease time.Duration, option, leaseOption string) time.Duration {
	if timeout >= lease {
		panic(fmt.Sprintf("idempotency: %s expects a timeout shorter than the lease (%s)", option, leaseOption))
	}
	if _, inProcess := s.(*store.Memory); inProcess {
		return 0
	}
	return cmp.Or(timeout, max(min(5*time.Second, lease/2), 1))
}

// WithRetention sets how long a completed record is kept for replay.
// Defaults to 24 hours.
func WithRetention(d time.Duration) Option {
	d = positive("WithRetention", "d", d)
	return func(c *config) { c.retention = d }
}

// WithRetryAfter sets the Retry-After sent with a 409 for a key still in
// flight and with a 503 for an unreachable store; it is rounded up to whole
// seconds. Defaults to 1 second.
func WithRetryAfter(d time.Duration) Option {
	d = positive("WithRetryAfter", "d", d)
	return func(c *config) { c.retryAfter = d }
}

// WithReplayCache keeps done records in the process, so that a duplicate
// of a request that has completed is answered without a store call: the
// same replay, 422 for a different request with its key, or 409 for a
// response that was not stored, as the store's record would give. It keeps
// the records this process completed (once the store has taken them) and
// those the store answered a duplicate with, never one in flight: at most
// entries of them (then the oldest goes), each for at most maxAge, and
// never longer than the record's retention left as the store reported it
// (for one completed here, the retention it was completed with). The cache
// is this process's alone and the store is not asked while an entry lasts,
// so a record removed from the store by hand is still replayed here until
// its entry ends. With a *store.Memory (the default store) it does
// nothing: that store's replays make no round trip already, and its byte
// cap may keep a completed response unreplayable, which a cache filled at
// completion would replay. It panics unless both are above zero. Defaults
// to off: every request asks the store.
func WithReplayCache(entries int, maxAge time.Duration) Option {
	entries = positive("WithReplayCache", "entries", entries)
	maxAge = positive("WithReplayCache", "maxAge", maxAge)
	return func(c *config) { c.cache = newReplayCache(entries, maxAge) }
}

// WithWait makes a duplicate of an in-flight request wait up to timeout for
// the first one to finish, then replay its response; on timeout it gets 409.
// If the first request fails and releases the key, the waiting duplicate
// claims it and runs. A store that implements store.Watcher wakes the
// duplicate when the key is completed or released; with any store it also
// looks again at least every 250 ms, which finds a lease that lapsed and a
// wake-up that was lost. Defaults to 0: a duplicate gets 409 at once.
func WithWait(timeout time.Duration) Option {
	if timeout < 0 {
		panic("idempotency: WithWait expects timeout >= 0")
	}
	return func(c *config) { c.wait = timeout }
}

// WithFailOpen makes the middleware run the handler unprotected when the
// store cannot be reached, logging each such request. A request that has
// already found its key in flight (waiting, with WithWait) never does: its
// first request may still be running. Defaults to fail closed: such a
// request gets 503 and the handler does not run.
func WithFailOpen() Option {
	return func(c *config) { c.failOpen = true }
}

// WithErrorHandler sets the function told of every store error (but a
// failed store.Watcher Watch, after which the wait polls) and every
// problem the client cannot see. It must not write to the response.
// It is called with the request (for an error of a store call made once
// the key was claimed, the copy the handler got), which it must only read:
// a failed lease renewal is reported from a goroutine of its own, while
// the handler runs or just after, so calls may come concurrently.
// Defaults to logging the error at level Error with the logger.
func WithErrorHandler(handle func(r *http.Request, err error)) Option {
	if handle == nil {
		panic("idempotency: WithErrorHandler expects a non-nil function")
	}
	return func(c *config) { c.errorHandler = handle }
}

// WithLogger sets the logger for store errors (when no error handler is
// set) and fail-open requests. Defaults to slog.Default().
func WithLogger(logger *slog.Logger) Option {
	if logger == nil {
		panic("idempotency: WithLogger expects a non-nil logger")
	}
	return func(c *config) { c.logger = logger }
}

// WithReplayHeaders adds response headers to those stored and replayed.
// Set-Cookie, Authorization, WWW-Authenticate, Proxy-Authenticate,
// Proxy-Authorization and hop-by-hop headers are never stored: naming one
// of them here makes New panic. Defaults to
// Cache-Control, Content-Disposition, Content-Encoding, Content-Language,
// Content-Length, Content-Location, Content-Range, Content-Type, ETag,
// Expires, Last-Modified, Link, Location and Vary.
func WithReplayHeaders(names ...string) Option {
	return func(c *config) {
		for _, name := range names {
			name = http.CanonicalHeaderKey(name)
			if neverStored[name] {
				panic(fmt.Sprintf("idempotency: WithReplayHeaders: %s is never stored", name))
			}
			c.replayHeaders[name] = true
		}
	}
}

// neverStored are headers that must not be replayed to another request:
// credentials, cookies, and hop-by-hop headers.
var neverStored = headerSet(
	"Set-Cookie", "Authorization", "Www-Authenticate", "Proxy-Authenticate",
	"Proxy-Authorization", "Connection", "Keep-Alive", "Te", "Trailer",
	"Transfer-Encoding", "Upgrade",
)

func headerSet(names ...string) map[string]bool {
	set := make(map[string]bool, len(names))
	for _, name := range names {
		set[http.CanonicalHeaderKey(name)] = true
	}
	return set
}

// positive returns v, the argument named arg of the option, or panics if v
// is not above zero.
func positive[T int | int64 | time.Duration](option, arg string, v T) T {
	if v <= 0 {
		panic(fmt.Sprintf("idempotency: %s expects %s > 0", option, arg))
	}
	return v
}
