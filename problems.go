package idempotency

import (
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/seed43327c4c/idempotency/httpx"
)

// Problem type URIs: the stable `type` of every problem+json response the
// middleware writes itself. Each is the address of the section of
// docs/problems.md that explains it. Clients may switch on them; they do
// not change.
const (
	// ProblemKeyMissing: 400, the route requires an Idempotency-Key.
	ProblemKeyMissing = "https://github.com/seed43327c4c/idempotency/blob/main/docs/problems.md#key-missing"
	// ProblemKeyInvalid: 400, the Idempotency-Key is malformed, sent twice,
	// or refused by the key validator (WithKeyValidator).
	ProblemKeyInvalid = "https://github.com/seed43327c4c/idempotency/blob/main/docs/problems.md#key-invalid"
	// ProblemScopeMissing: 403, the request names no caller, and the
	// middleware requires one (WithScopeRequired).
	ProblemScopeMissing = "https://github.com/seed43327c4c/idempotency/blob/main/docs/problems.md#scope-missing"
	// ProblemBodyUnreadable: 400, the request body could not be read.
	ProblemBodyUnreadable = "https://github.com/seed43327c4c/idempotency/blob/main/docs/problems.md#body-unreadable"
	// ProblemBodyTooLarge: 413, the request body is over the limit.
	ProblemBodyTooLarge = "https://github.com/seed43327c4c/idempotency/blob/main/docs/problems.md#body-too-large"
	// ProblemKeyInFlight: 409 with Retry-After, a request with this key is
	// still running.
	ProblemKeyInFlight = "https://github.com/seed43327c4c/idempotency/blob/main/docs/problems.md#key-in-flight"
	// ProblemNotReplayable: 409, a request with this key completed but its
	// response could not be stored; it will not run again.
	ProblemNotReplayable = "https://github.com/seed43327c4c/idempotency/blob/main/docs/problems.md#not-replayable"
	// ProblemKeyReused: 422, the key was first used for a different request.
	ProblemKeyReused = "https://github.com/seed43327c4c/idempotency/blob/main/docs/problems.md#key-reused"
	// ProblemStoreUnavailable: 503 with Retry-After, the store could not be
	// reached; the request did not run.
	ProblemStoreUnavailable = "https://github.com/seed43327c4c/idempotency/blob/main/docs/problems.md#store-unavailable"
	// ProblemRequestInterrupted: 503 with Retry-After, the request's context
	// ended (a deadline passed, or the client hung up) before it completed;
	// a retry with the same key runs it, once its key is free.
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

// writeProblem answers r with p through the problem writer
// (WithProblemWriter), its title and detail naming the key header the
// middleware reads.
func (m *middleware) writeProblem(w http.ResponseWriter, r *http.Request, p httpx.Problem) {
	if m.keyHeader != httpx.KeyHeader {
		p.Title = strings.ReplaceAll(p.Title, httpx.KeyHeader, m.keyHeader)
		p.Detail = strings.ReplaceAll(p.Detail, httpx.KeyHeader, m.keyHeader)
	}
	m.problemWriter(w, r, p)
}

// writeRetryableProblem writes p as writeProblem does, with a Retry-After
// header of the configured wait (WithRetryAfter) in whole seconds, rounded
// up.
func (m *middleware) writeRetryableProblem(w http.ResponseWriter, r *http.Request, p httpx.Problem) {
	seconds := int64(math.Ceil(m.retryAfter.Seconds()))
	w.Header().Set("Retry-After", strconv.FormatInt(max(seconds, 1), 10))
	m.writeProblem(w, r, p)
}

// writeProblemJSON is the default problem writer: application/problem+json.
func writeProblemJSON(w http.ResponseWriter, _ *http.Request, p httpx.Problem) {
	httpx.WriteProblem(w, p)
}
