package main

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/httpx"
	"github.com/seed43327c4c/idempotency/store"
)

// problemInvalidEvent is the type of the 400 for an event without a type,
// the address of its section of docs/example.md.
const problemInvalidEvent = "https://github.com/seed43327c4c/idempotency/blob/main/docs/example.md#invalid-event"

// webhookRetention is how long an event's record is kept: longer than
// Stripe goes on redelivering an event, about three days.
const webhookRetention = 4 * 24 * time.Hour

// webhookWait is how long a redelivery of an event in flight waits for its
// answer, well within the time a provider waits for one.
const webhookWait = 5 * time.Second

// webhookEvent is the part of a Stripe-style event the example reads; the
// rest of the body is the provider's.
type webhookEvent struct {
	ID   string `json:"id"`
	Type string `json:"type"`
}

// eventCount is one processed event in GET /webhooks.
type eventCount struct {
	ID    string `json:"id"`
	Count int    `json:"count"` // times processed: 1 unless a delivery ran twice
}

// eventReceipt is the body of a 200 from POST /webhooks.
type eventReceipt struct {
	ID             string `json:"id"`
	Type           string `json:"type"`
	Status         string `json:"status"`
	TimesProcessed int    `json:"times_processed"`
}

// newWebhookMiddleware builds the idempotency middleware of POST /webhooks:
// the key is the event's id, in the body, and is required; the scope names
// the provider, so that another provider's ids never meet Stripe's. A
// redelivery that arrives while the event is processed waits up to
// webhookWait for its answer, then gets 409 and the provider delivers it
// again later. extra options go last.
func newWebhookMiddleware(st store.Store, lease time.Duration, logger *slog.Logger, extra ...idempotency.Option) func(http.Handler) http.Handler {
	opts := []idempotency.Option{
		idempotency.WithKeyFunc(idempotency.KeyFromJSONField("id")),
		idempotency.WithKeyRequired(),
		idempotency.WithScope(func(*http.Request) string { return "stripe" }),
		idempotency.WithWait(webhookWait),
		idempotency.WithRetention(webhookRetention),
		idempotency.WithLease(lease),
		idempotency.WithLogger(logger),
	}
	if st != nil {
		opts = append(opts, idempotency.WithStore(st))
	}
	return idempotency.New(append(opts, extra...)...)
}

// receiveWebhook processes a Stripe-style event: it counts it in the
// ledger, logs it, waits a.delay, and answers 200 with what it did. The
// middleware in front runs it once per event id; a redelivery gets the same
// 200 replayed.
func (a *api) receiveWebhook(w http.ResponseWriter, r *http.Request) {
	var event webhookEvent
	if err := json.NewDecoder(r.Body).Decode(&event); err != nil || event.Type == "" {
		idempotency.DoNotRecord(r.Context())
		httpx.WriteProblem(w, httpx.Problem{Type: problemInvalidEvent, Status: http.StatusBadRequest,
			Title: "The event is invalid", Detail: `the body must be a JSON object {"id": string, "type": string, "data": ...}`})
		return
	}
	count, err := a.ledger.Count(r.Context(), webhookEvents, event.ID)
	if err != nil {
		a.log.Error("recording an event failed", "err", err)
		httpx.WriteProblem(w, httpx.Problem{Status: http.StatusInternalServerError,
			Detail: "the event could not be recorded; deliver it again"})
		return
	}
	a.log.Info("webhook event processed", "id", event.ID, "type", event.Type, "count", count, "pid", os.Getpid())
	time.Sleep(a.delay) // counted: the answer must be 200, whatever the context says
	writeJSON(w, http.StatusOK, eventReceipt{ID: event.ID, Type: event.Type, Status: "processed", TimesProcessed: count})
}

// listWebhooks answers 200 with every processed event and its count, a
// JSON array ordered by id.
func (a *api) listWebhooks(w http.ResponseWriter, r *http.Request) {
	events, err := a.ledger.Counts(r.Context(), webhookEvents)
	if err != nil {
		a.log.Error("listing events failed", "err", err)
		httpx.WriteProblem(w, httpx.Problem{Status: http.StatusInternalServerError})
		return
	}
	writeJSON(w, http.StatusOK, events)
}
