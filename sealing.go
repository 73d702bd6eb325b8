package idempotency

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/seal"
)

// WithSealer seals each response stored under ring's current key and opens
// each one read back with whichever key of ring sealed it, so the store
// holds no response header or body in plain text. A record no key of ring
// opens gets 503 record-sealed, and is never run again. It panics if ring
// is nil. Defaults to none: responses are stored as sent, and a sealed one
// found gets 503 record-sealed.
func WithSealer(ring *seal.Ring) Option {
	if ring == nil {
		panic("idempotency: WithSealer expects a non-nil ring")
	}
	return func(c *config) { c.sealer = ring }
}

// DoSealer is WithSealer for Do: a stored result no key of ring opens
// gives an error wrapping ErrRecordSealed, fn not run. It panics if ring
// is nil. Defaults to none.
func DoSealer(ring *seal.Ring) DoOption {
	if ring == nil {
		panic("idempotency: DoSealer expects a non-nil ring")
	}
	return func(c *doConfig) { c.sealer = ring }
}

// ErrRecordSealed is wrapped by Do's error, fn not run, when the key's job
// completed and its stored result does not open (DoSealer): sealed under a
// key no longer in the ring, or changed. The error wraps seal's too.
var ErrRecordSealed = errors.New("idempotency: the key's job completed and its stored result cannot be opened")

// sealed returns resp sealed for key, or resp without a sealer.
func sealed(ring *seal.Ring, key string, resp *store.Response) *store.Response {
	if ring == nil || resp == nil {
		return resp
	}
	return ring.Seal(store.HashKey(key), resp)
}

// opened returns rec with its response opened for key. Without a sealer,
// a sealed response is refused, never replayed as ciphertext.
func opened(ring *seal.Ring, key string, rec store.Record) (store.Record, error) {
	if rec.Response == nil {
		return rec, nil
	}
	if ring == nil {
		if id, sealed := seal.KeyID(rec.Response); sealed {
			return rec, fmt.Errorf("%w: key %q, and no sealer is set", seal.ErrKeyMissing, id)
		}
		return rec, nil
	}
	resp, err := ring.Open(store.HashKey(key), rec.Response)
	if err != nil {
		return rec, err
	}
	rec.Response = resp
	return rec, nil
}

// answerFromStore answers from rec, which a claim sent at sent found
// holding c's key, once it is opened and kept in the replay cache; a
// record that does not open gets 503 record-sealed and is reported. It
// reports whether it answered (see answerFromRecord).
func (m *middleware) answerFromStore(w http.ResponseWriter, r *http.Request, c *call, rec store.Record, sent sinceEpoch) bool {
	rec, err := opened(m.sealer, c.key, rec)
	switch {
	case err == nil:
		m.cache.put(c.key, rec, sent, rec.TTL)
	case rec.Fingerprint != c.fingerprint:
		rec.Response = nil // the answer is 422 whatever it held; not cached
	default:
		m.storeError(r, c, fmt.Errorf("idempotency: open the stored response: %w", err))
		m.writeProblem(w, r, problemRecordSealed)
		m.waitEnded(r, c, WaitAnswered)
		m.decided(r, c, OutcomeRecordSealed)
		return true
	}
	return m.answerFromRecord(w, r, c, rec)
}
