package idempotency

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/seed43327c4c/idempotency/httpx"
)

// Problem type URIs: the stable type of each problem the middleware writes,
// the address of its section in docs/problems.md.
const (
	// ProblemKeyMissing: 400, the route requires a key.
	ProblemKeyMissing = "https://github.com/seed43327c4c/idempotency/blob/main/docs/problems.md#key-missing"
	// ProblemKeyInvalid: 400, the key is malformed, sent twice, or refused.
	ProblemKeyInvalid = "https://github.com/seed43327c4c/idempotency/blob/main/docs/problems.md#key-invalid"
	// ProblemScopeMissing: 403, no scope, and one is required.
	ProblemScopeMissing = "https://github.com/seed43327c4c/idempotency/blob/main/docs/problems.md#scope-missing"
	// ProblemBodyUnreadable: 400.
	ProblemBodyUnreadable = "https://github.com/seed43327c4c/idempotency/blob/main/docs/problems.md#body-unreadable"
	// ProblemBodyTooLarge: 413.
	ProblemBodyTooLarge = "https://github.com/seed43327c4c/idempotency/blob/main/docs/problems.md#body-too-large"
	// ProblemKeyInFlight: 409 with Retry-After, the key is in flight.
	ProblemKeyInFlight = "https://github.com/seed43327c4c/idempotency/blob/main/docs/problems.md#key-in-flight"
	// ProblemNotReplayable: 409, completed but not stored; it will not run
	// again.
	ProblemNotReplayable = "https://github.com/seed43327c4c/idempotency/blob/main/docs/problems.md#not-replayable"
	// ProblemKeyReused: 422, the key was used for a different request.
	ProblemKeyReused = "https://github.com/seed43327c4c/idempotency/blob/main/docs/problems.md#key-reused"
	// ProblemKeyExpired: 422, the request with this key completed and its
	// record expired; only its tombstone is left, and it will not run again.
	ProblemKeyExpired = "https://github.com/seed43327c4c/idempotency/blob/main/docs/problems.md#key-expired"
	// ProblemRecordSealed: 503, the request completed, and its stored
	// response does not open under the service's keys (WithSealer); it will
	// not run again.
	ProblemRecordSealed = "https://github.com/seed43327c4c/idempotency/blob/main/docs/problems.md#record-sealed"
	// ProblemStoreUnavailable: 503 with Retry-After, the request did not run.
	ProblemStoreUnavailable = "https://github.com/seed43327c4c/idempotency/blob/main/docs/problems.md#store-unavailable"
	// ProblemRequestInterrupted: 503 with Retry-After, the request's context
	// ended first; a retry runs it once its key is free.
	ProblemRequestInterrupted = "https://github.com/seed43327c4c/idempotency/blob/main/docs/problems.md#request-interrupted"
)

var (
	problemKeyMissing = httpx.Problem{Type: ProblemKeyMissing, Status: http.StatusBadRequest,
		Title: "This request requires an Idempotency-Key header"}
	problemKeyInvalid = httpx.Problem{Type: ProblemKeyInvalid, Status: http.StatusBadRequest,
		Title: "The Idempotency-Key header is invalid",
		Detail: "Send exactly one Idempotency-Key header of 1 to 255 visible ASCII characters, " +
			"bare or as a quoted string."}
	problemKeyRefused = httpx.Problem{Type: ProblemKeyInvalid, Status: http.StatusBadRequest,
		Title:  "The Idempotency-Key header is invalid",
		Detail: "The key is not in the form this service accepts."}
	problemKeyNotFound = httpx.Problem{Type: ProblemKeyMissing, Status: http.StatusBadRequest,
		Title: "This request must carry an idempotency key"}
	problemKeyUnreadable = httpx.Problem{Type: ProblemKeyInvalid, Status: http.StatusBadRequest,
		Title:  "The request's idempotency key is invalid",
		Detail: "The key this service reads from the request is malformed or not 1 to 255 printable ASCII characters."}
	problemKeyFuncRefused = httpx.Problem{Type: ProblemKeyInvalid, Status: http.StatusBadRequest,
		Title:  problemKeyUnreadable.Title,
		Detail: problemKeyRefused.Detail}
	problemScopeMissing = httpx.Problem{Type: ProblemScopeMissing, Status: http.StatusForbidden,
		Title:  "This request must come from an identified caller",
		Detail: "Authenticate to send a request with an Idempotency-Key here."}
	problemBodyUnreadable = httpx.Problem{Type: ProblemBodyUnreadable, Status: http.StatusBadRequest,
		Title: "The request body could not be read"}
	problemBodyTooLarge = httpx.Problem{Type: ProblemBodyTooLarge, Status: http.StatusRequestEntityTooLarge,
		Title: "The request body is too large"}
	problemKeyInFlight = httpx.Problem{Type: ProblemKeyInFlight, Status: http.StatusConflict,
		Title:  "A request with this Idempotency-Key is still being processed",
		Detail: "Retry after the time given in the Retry-After header to get its response."}
	problemNotReplayable = httpx.Problem{Type: ProblemNotReplayable, Status: http.StatusConflict,
		Title:  "A request with this Idempotency-Key was already processed",
		Detail: "Its response cannot be replayed, and the request will not run again."}
	problemKeyReused = httpx.Problem{Type: ProblemKeyReused, Status: http.StatusUnprocessableEntity,
		Title:  "This Idempotency-Key was already used for a different request",
		Detail: "Use a new key for a new request."}
	problemKeyExpired = httpx.Problem{Type: ProblemKeyExpired, Status: http.StatusUnprocessableEntity,
		Title: "The request with this Idempotency-Key completed, and its response is no longer kept"}
	problemRecordSealed = httpx.Problem{Type: ProblemRecordSealed, Status: http.StatusServiceUnavailable,
		Title:  "The stored response for this Idempotency-Key cannot be read",
		Detail: "The request was processed and will not run again. The service cannot open its stored response now."}
	problemCommitFailed = httpx.Problem{Type: ProblemStoreUnavailable, Status: http.StatusServiceUnavailable,
		Title:  "The request cannot be processed safely right now",
		Detail: "Its outcome could not be recorded. Retry it with the same Idempotency-Key to run it or get its response."}
	problemStoreUnavailable = httpx.Problem{Type: ProblemStoreUnavailable, Status: http.StatusServiceUnavailable,
		Title:  "The request cannot be processed safely right now",
		Detail: "It was not processed. Retry it with the same Idempotency-Key."}
	problemRequestInterrupted = httpx.Problem{Type: ProblemRequestInterrupted, Status: http.StatusServiceUnavailable,
		Title:  "The request was cut short before it completed",
		Detail: "It did not complete. Retry it with the same Idempotency-Key."}
)

// writeProblem writes p through the problem writer, naming the configured key
// header, or "idempotency key" when a key function reads it.
func (m *middleware) writeProblem(w http.ResponseWriter, r *http.Request, p httpx.Problem) {
	if name := m.keyName(); name != httpx.KeyHeader {
		p.Title = strings.ReplaceAll(p.Title, httpx.KeyHeader, name)
		p.Detail = strings.ReplaceAll(p.Detail, httpx.KeyHeader, name)
	}
	m.problemWriter(w, r, p)
}

func (m *middleware) keyName() string {
	if m.keyFunc != nil {
		return "idempotency key"
	}
	return m.keyHeader
}

// writeRetryableProblem adds Retry-After in whole seconds, rounded up.
func (m *middleware) writeRetryableProblem(w http.ResponseWriter, r *http.Request, p httpx.Problem) {
	seconds := int64(math.Ceil(m.retryAfter.Seconds()))
	w.Header().Set("Retry-After", strconv.FormatInt(max(seconds, 1), 10))
	m.writeProblem(w, r, p)
}

func writeProblemJSON(w http.ResponseWriter, _ *http.Request, p httpx.Problem) {
	httpx.WriteProblem(w, p)
}

// keyExpired is the problem of a request whose key's tombstone says it
// completed at completed.
func keyExpired(completed time.Time) httpx.Problem {
	p := problemKeyExpired
	p.Detail = "It completed at " + completed.UTC().Format(time.RFC3339) +
		" and will not run again. Use a new key for a new request."
	return p
}
