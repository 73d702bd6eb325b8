package idempotency

import (
	"errors"
	"net/http"

	"github.com/seed43327c4c/idempotency/httpx"
)

// headerKey returns the key of r's key header. When it returns false, r is
// answered: refused, or passed through without a key.
func (m *middleware) headerKey(w http.ResponseWriter, r *http.Request) (string, bool) {
	key, err := httpx.ParseKeyHeader(r.Header, m.keyHeader)
	switch {
	case errors.Is(err, httpx.ErrKeyMissing):
		m.keyMissing(w, r, nil, problemKeyMissing)
		return "", false
	case err != nil:
		m.writeProblem(w, r, problemKeyInvalid)
		m.decided(r, nil, OutcomeKeyInvalid)
		return "", false
	}
	return key, m.keyAccepted(w, r, key, problemKeyRefused)
}

// funcKey sets c's key from the key function (WithKeyFunc), given c's body.
// When it returns false, r is answered.
func (m *middleware) funcKey(w http.ResponseWriter, r *http.Request, c *call) bool {
	key, err := m.keyFunc(r, c.body)
	switch {
	case err == nil && key == "":
		m.keyMissing(w, r, c, problemKeyNotFound)
		return false
	case err != nil || !httpx.ValidKey(key):
		m.writeProblem(w, r, problemKeyUnreadable)
		m.decided(r, c, OutcomeKeyInvalid)
		return false
	}
	c.clientKey = key
	return m.keyAccepted(w, r, key, problemKeyFuncRefused)
}

// keyMissing refuses r with p when the key is required, else runs it
// unprotected; c is nil when r's body is unread.
func (m *middleware) keyMissing(w http.ResponseWriter, r *http.Request, c *call, p httpx.Problem) {
	if m.keyRequired {
		m.writeProblem(w, r, p)
		m.decided(r, c, OutcomeKeyMissing)
		return
	}
	m.unprotected(w, r, c, OutcomeKeyMissing)
}

// keyAccepted asks the validator (WithKeyValidator) about a well-formed key,
// and refuses r with p if it says no.
func (m *middleware) keyAccepted(w http.ResponseWriter, r *http.Request, key string, p httpx.Problem) bool {
	if m.keyValid != nil && !m.keyValid(key) {
		m.writeProblem(w, r, p)
		m.decided(r, nil, OutcomeKeyInvalid)
		return false
	}
	return true
}
