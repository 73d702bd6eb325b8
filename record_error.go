package idempotency

import (
	"errors"
	"net/http"

	"github.com/seed43327c4c/idempotency/store"
)

// RecordError is the error the error handler gets for a failed store call
// on a request's record, wrapping the store's. It tells which record
// without its key showing in Error: KeyHash is what the default handler
// logs, and what `idempotency inspect -hash` takes.
type RecordError struct {
	Scope     string // WithScope's, "" without one
	ClientKey string // as the client sent it, unquoted
	Key       string // the storage key (StorageKey)
	Fence     int64  // of the request's lease; 0 if it claimed none
	Err       error
}

// KeyHashLen is the length of KeyHash: a prefix of store.HashKey, long
// enough to name one record among billions.
const KeyHashLen = 16

// KeyHash returns the first KeyHashLen hex digits of store.HashKey(e.Key).
func (e *RecordError) KeyHash() string { return store.HashKey(e.Key)[:KeyHashLen] }

func (e *RecordError) Error() string { return e.Err.Error() }

func (e *RecordError) Unwrap() error { return e.Err }

// storeError reports err, from a store call on c's record, to the error
// handler.
func (m *middleware) storeError(r *http.Request, c *call, err error) {
	m.errorHandler(r, &RecordError{Scope: c.scope, ClientKey: c.clientKey, Key: c.key, Fence: c.fence, Err: err})
}

// logRecordError is the default error handler: it logs err with the
// request's method and path, and the record's hash and fence; with
// WithLoggedKeys, its scope and client key too.
func (c *config) logRecordError(r *http.Request, err error) {
	attrs := []any{"err", err, "method", r.Method, "path", r.URL.Path}
	if re := (*RecordError)(nil); errors.As(err, &re) {
		attrs = append(attrs, "key_hash", re.KeyHash())
		if re.Fence > 0 {
			attrs = append(attrs, "fence", re.Fence)
		}
		if c.loggedKeys {
			attrs = append(attrs, "scope", re.Scope, "key", re.ClientKey)
		}
	}
	c.logger.ErrorContext(r.Context(), "idempotency: store error", attrs...)
}
