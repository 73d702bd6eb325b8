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
	"github.com/seed43327c4c/idempotency/store/seal"
)

// Option configures the middleware built by New.
type Option func(*config)

type config struct {
	store            store.Store
	txStore          store.TxStore   // store, if it can claim in a transaction
	stepStore        store.StepStore // store, if it keeps steps
	methods          map[string]bool
	keyHeader        string // canonical
	keyRequired      bool
	keyFunc          func(r *http.Request, body []byte) (string, error) // nil: the key header
	keyValid         func(key string) bool                              // nil: every well-formed key
	scope            func(*http.Request) string
	scopeRequired    bool
	record           func(r *http.Request, status int) bool
	problemWriter    func(w http.ResponseWriter, r *http.Request, p httpx.Problem)
	route            func(*http.Request) string                // nil: the default route
	fingerprint      func(r *http.Request, body []byte) string // nil: Fingerprint
	canonicalJSON    bool
	maxBodyBytes     int64
	maxResponseBytes int
	lease            time.Duration
	recordTimeout    time.Duration // 0: the lease
	storeTimeout     time.Duration // 0 after New: none
	retention        time.Duration
	retryAfter       time.Duration
	wait             time.Duration
	failOpen         bool
	errorHandler     func(r *http.Request, err error)
	logger           *slog.Logger
	loggedKeys       bool
	replayHeaders    map[string]bool
	observer         Observer
	observeKeys      bool
	cache            *replayCache // nil: none
	sealer           *seal.Ring   // nil: none
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

// defaultReplayHeaders are replayed by default; the Content-* ones describe
// the stored bytes, and a replay without them would be unreadable or
// misframed.
var defaultReplayHeaders = []string{
	"Cache-Control", "Content-Disposition", "Content-Encoding", "Content-Language",
	"Content-Length", "Content-Location", "Content-Range", "Content-Type", "ETag",
	"Expires", "Last-Modified", "Link", "Location", "Vary",
}

// WithStore sets where records are kept; use a shared store when more than
// one process serves the routes. It panics if s is nil or a nil pointer.
// Defaults to store.NewMemory, which protects one process only.
func WithStore(s store.Store) Option {
	if s == nil || isNilPointer(s) {
		panic("idempotency: WithStore expects a non-nil store")
	}
	return func(c *config) { c.store = s }
}

func isNilPointer(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

// WithMethods sets the HTTP methods the middleware protects; others pass
// through. Methods are case-sensitive: it panics on an empty method or a
// standard one in another case ("post"). Defaults to POST and PATCH.
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

// standardMethods are the methods of RFC 9110.
var standardMethods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodDelete: true, http.MethodConnect: true,
	http.MethodOptions: true, http.MethodTrace: true,
}

// WithKeyRequired gives a request without a key 400. Defaults to optional: it
// passes through unprotected.
func WithKeyRequired() Option {
	return func(c *config) { c.keyRequired = true }
}

// WithKeyHeader sets the request header that carries the key; problem titles
// name it. It panics if name is not a header field name. Defaults to
// Idempotency-Key.
func WithKeyHeader(name string) Option {
	if !isToken(name) {
		panic(fmt.Sprintf("idempotency: WithKeyHeader: %q is not a header name", name))
	}
	name = http.CanonicalHeaderKey(name)
	return func(c *config) { c.keyHeader = name }
}

// WithKeyFunc takes the key from the request and its body, read whole
// (WithMaxBodyBytes), instead of a header: KeyFromJSONField reads a member of
// a JSON body. It must not read r.Body or change body. A key of "" is
// missing; an error, or a key that is not 1 to 255 bytes of printable ASCII,
// gets 400 key-invalid. WithKeyValidator still applies. Defaults to the key
// header.
func WithKeyFunc(key func(r *http.Request, body []byte) (string, error)) Option {
	if key == nil {
		panic("idempotency: WithKeyFunc expects a non-nil function")
	}
	return func(c *config) { c.keyFunc = key }
}

// isToken reports whether s is an RFC 9110 token.
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

// WithKeyValidator sets a check of a well-formed key (unquoted); a key it
// refuses gets 400 key-invalid and claims nothing. Defaults to accepting
// every well-formed key.
func WithKeyValidator(valid func(key string) bool) Option {
	if valid == nil {
		panic("idempotency: WithKeyValidator expects a non-nil function")
	}
	return func(c *config) { c.keyValid = valid }
}

// WithScope sets the function that names the caller (a user or tenant id);
// keys of different scopes never collide. Defaults to no scope: every caller
// shares one key space.
func WithScope(scope func(*http.Request) string) Option {
	if scope == nil {
		panic("idempotency: WithScope expects a non-nil function")
	}
	return func(c *config) { c.scope = scope }
}

// WithScopeRequired answers 403 scope-missing, claiming nothing, to a keyed
// request whose scope is "". New panics without WithScope. Defaults to off.
func WithScopeRequired() Option {
	return func(c *config) { c.scopeRequired = true }
}

// WithRoute sets the function that names a request's route; one key on two
// routes never collides. Defaults to the decoded path of the request line,
// without host or query; RouteWithHost adds the host.
func WithRoute(route func(*http.Request) string) Option {
	if route == nil {
		panic("idempotency: WithRoute expects a non-nil function")
	}
	return func(c *config) { c.route = route }
}

// WithFingerprint sets the hash that tells a retry from another request under
// its key. It gets the request and body (canonical with WithCanonicalJSON),
// and must not change them. Defaults to Fingerprint; FingerprintSHA256 uses
// SHA-256.
func WithFingerprint(fingerprint func(r *http.Request, body []byte) string) Option {
	if fingerprint == nil {
		panic("idempotency: WithFingerprint expects a non-nil function")
	}
	return func(c *config) { c.fingerprint = fingerprint }
}

// WithCanonicalJSON makes the fingerprint of a JSON body (application/json or
// +json) ignore member order and whitespace. A body decoding could read two
// ways (a duplicate member, invalid UTF-8) is fingerprinted as sent; the
// handler always reads it as sent. New panics if WithMaxBodyBytes is 2 GiB or
// more. Defaults to off.
func WithCanonicalJSON() Option {
	return func(c *config) { c.canonicalJSON = true }
}

// WithRecordPolicy sets the rule, given the request and the status sent, that
// records the response (true) or releases the key (false). It is not asked
// after DoNotRecord, for a hijacked connection (recorded), or for a request
// whose context ended with a status outside 2xx and 3xx (released). A policy
// that panics releases the key. Defaults to DefaultRecordPolicy.
func WithRecordPolicy(record func(r *http.Request, status int) bool) Option {
	if record == nil {
		panic("idempotency: WithRecordPolicy expects a non-nil function")
	}
	return func(c *config) { c.record = record }
}

// WithProblemWriter sets the function that writes the middleware's own error
// responses. Retry-After is already set where needed; it must write p.Status.
// A panic in it leaves no key claimed. Defaults to httpx.WriteProblem.
func WithProblemWriter(write func(w http.ResponseWriter, r *http.Request, p httpx.Problem)) Option {
	if write == nil {
		panic("idempotency: WithProblemWriter expects a non-nil function")
	}
	return func(c *config) { c.problemWriter = write }
}

// WithMaxBodyBytes sets the largest request body read; a larger one gets 413.
// Defaults to 1 MiB.
func WithMaxBodyBytes(n int64) Option {
	n = positive("WithMaxBodyBytes", "n", n)
	return func(c *config) { c.maxBodyBytes = n }
}

// WithMaxResponseBytes sets the largest response body stored; a larger one is
// sent in full and its key marked done but not replayable. Defaults to 1 MiB.
func WithMaxResponseBytes(n int) Option {
	n = positive("WithMaxResponseBytes", "n", n)
	return func(c *config) { c.maxResponseBytes = n }
}

// WithLease sets how long a claim holds a key before another request may take
// it over. It is renewed every third of its length while the handler runs;
// each renewal must reach the store within the lease, so a lease well under a
// second protects little. Defaults to 30 seconds.
func WithLease(d time.Duration) Option {
	d = positive("WithLease", "d", d)
	return func(c *config) { c.lease = d }
}

// WithRecordTimeout sets the deadline of each store call that records an
// outcome (Complete, Release, Commit, Rollback), which runs even if the
// client has gone; Complete and Release are resent while they fail with a
// connection error. A failed commit answers 503. Defaults to the lease.
func WithRecordTimeout(d time.Duration) Option {
	d = positive("WithRecordTimeout", "d", d)
	return func(c *config) { c.recordTimeout = d }
}

// WithStoreTimeout sets the deadline of each store call that claims or looks
// at a key; past it the request gets 503 (or runs, with WithFailOpen). New
// panics unless d is shorter than the lease. The memory store gets no
// deadline. Defaults to 5 seconds, or half the lease if shorter.
func WithStoreTimeout(d time.Duration) Option {
	d = positive("WithStoreTimeout", "d", d)
	return func(c *config) { c.storeTimeout = d }
}

// storeTimeout applies WithStoreTimeout's default and check.
func storeTimeout(s store.Store, timeout, lease time.Duration, option, leaseOption string) time.Duration {
	if timeout >= lease {
		panic(fmt.Sprintf("idempotency: %s expects a timeout shorter than the lease (%s)", option, leaseOption))
	}
	if _, inProcess := s.(*store.Memory); inProcess {
		return 0
	}
	return cmp.Or(timeout, max(min(5*time.Second, lease/2), 1))
}

// WithRetention sets how long a completed record is kept for replay. Defaults
// to 24 hours.
func WithRetention(d time.Duration) Option {
	d = positive("WithRetention", "d", d)
	return func(c *config) { c.retention = d }
}

// WithRetryAfter sets the Retry-After of a 409 key-in-flight and a 503,
// rounded up to whole seconds. Defaults to 1 second.
func WithRetryAfter(d time.Duration) Option {
	d = positive("WithRetryAfter", "d", d)
	return func(c *config) { c.retryAfter = d }
}

// WithReplayCache keeps up to entries done records in the process, each for
// at most maxAge and never past its retention, so a duplicate of a completed
// request is answered as the store would, without a store call. A record
// removed from the store stays replayed here until its entry ends. It does
// nothing with a *store.Memory, and panics unless both are above zero.
// Defaults to off.
func WithReplayCache(entries int, maxAge time.Duration) Option {
	entries = positive("WithReplayCache", "entries", entries)
	maxAge = positive("WithReplayCache", "maxAge", maxAge)
	return func(c *config) { c.cache = newReplayCache(entries, maxAge) }
}

// WithWait makes a duplicate of an in-flight request wait up to timeout to
// replay its response (409 on timeout), or to claim the key if it is
// released. A store.Watcher wakes it; it also looks every 250 ms. Defaults to
// 0: 409 at once.
func WithWait(timeout time.Duration) Option {
	if timeout < 0 {
		panic("idempotency: WithWait expects timeout >= 0")
	}
	return func(c *config) { c.wait = timeout }
}

// WithFailOpen runs the handler unprotected, and logs it, when the store
// cannot be reached; never for a request that found its key in flight.
// Defaults to off: 503.
func WithFailOpen() Option {
	return func(c *config) { c.failOpen = true }
}

// WithErrorHandler sets the function told of every store error (but a failed
// watch) and every problem the client cannot see. It must only read the
// request; renewals call it from their own goroutines. A store call's error
// is a *RecordError. Defaults to logging at level Error with the method, the
// path, key_hash (RecordError.KeyHash) and the fence, if any.
func WithErrorHandler(handle func(r *http.Request, err error)) Option {
	if handle == nil {
		panic("idempotency: WithErrorHandler expects a non-nil function")
	}
	return func(c *config) { c.errorHandler = handle }
}

// WithLoggedKeys makes the default error handler log each record's scope
// and client key beside its key_hash. Anyone who reads the logs can then
// replay a stored response by sending that key in that scope. Defaults to
// off: the hash and the fence only.
func WithLoggedKeys() Option {
	return func(c *config) { c.loggedKeys = true }
}

// WithLogger sets the logger of store errors (without an error handler) and
// fail-open requests. Defaults to slog.Default().
func WithLogger(logger *slog.Logger) Option {
	if logger == nil {
		panic("idempotency: WithLogger expects a non-nil logger")
	}
	return func(c *config) { c.logger = logger }
}

// WithReplayHeaders adds response headers to those replayed. New panics on a
// credential, cookie or hop-by-hop header. Defaults to Cache-Control,
// Content-Disposition, Content-Encoding, Content-Language, Content-Length,
// Content-Location, Content-Range, Content-Type, ETag, Expires,
// Last-Modified, Link, Location and Vary.
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

// neverStored are headers never replayed: credentials, cookies, hop-by-hop.
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

// positive returns v, or panics naming option and arg if v <= 0.
func positive[T int | int64 | time.Duration](option, arg string, v T) T {
	if v <= 0 {
		panic(fmt.Sprintf("idempotency: %s expects %s > 0", option, arg))
	}
	return v
}
