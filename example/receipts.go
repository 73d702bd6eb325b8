package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/httpx"
)

// receipt is the body of a 200 from POST /payments/{id}/receipt.
type receipt struct {
	Payment string `json:"payment"`
	Account string `json:"account"`
	SentBy  string `json:"sent_by"` // the pid of the worker that sent it
}

// receiptRetention is how long a sent receipt is kept for the requests
// that ask for it again.
const receiptRetention = 24 * time.Hour

// sendReceipt "sends" the receipt of the caller's payment named in the path,
// by logging it, and answers 200 with it. It needs no Idempotency-Key: the
// receipt goes through idempotency.Do, keyed by the payment's id, so it is
// sent once among every worker however often it is asked for, and every
// answer carries the receipt first sent. Another account's payment is 404,
// a receipt being sent 409.
func (a *api) sendReceipt(w http.ResponseWriter, r *http.Request) {
	p, ok := a.payment(w, r)
	if !ok {
		return
	}
	body, err := idempotency.Do(r.Context(), a.jobs, "receipt:"+p.ID, func(ctx context.Context) ([]byte, error) {
		a.log.Info("receipt sent", "payment", p.ID, "account", account(r), "pid", pid)
		return json.Marshal(receipt{Payment: p.ID, Account: account(r), SentBy: pid})
	}, a.jobOptions...)
	switch {
	case errors.Is(err, idempotency.ErrInFlight):
		w.Header().Set("Retry-After", "1")
		httpx.WriteProblem(w, httpx.Problem{Status: http.StatusConflict, Detail: "the receipt is being sent"})
	case errors.Is(err, idempotency.ErrRecordSealed):
		a.log.Error("a sent receipt cannot be opened", "err", err)
		httpx.WriteProblem(w, httpx.Problem{Status: http.StatusServiceUnavailable, Detail: "the receipt was sent; its copy cannot be read now"})
	case err != nil:
		a.log.Error("sending a receipt failed", "err", err)
		w.Header().Set("Retry-After", "1")
		httpx.WriteProblem(w, httpx.Problem{Status: http.StatusServiceUnavailable, Detail: "the receipt could not be sent; retry"})
	default:
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}
}
