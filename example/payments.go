package main

import (
	"context"
	"errors"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/httpx"
)

// maxAmount is the largest amount a payment may have, in minor units (cents):
// ten million euros. The Postgres ledger stores amounts as integer, and a
// payment too large for it must be the client's error (400), not a failure
// that retrying with the same key could never fix.
const maxAmount = 1_000_000_000

// paymentRequest is the body of POST /payments.
type paymentRequest struct {
	Amount   int    `json:"amount"`
	Currency string `json:"currency"`
}

// createPayment makes a payment for the caller's account in two steps
// (idempotency.Step): "charge" asks the fake provider to charge it, and
// "ledger" records it in the ledger. Then it waits a.delay (a slow receipt
// call, say) and answers 201 with the payment and its Location. Run twice,
// it would charge twice: the middleware in front makes sure it runs once
// per key, and a run again after a crash (a retry, a takeover) gets each
// finished step's result back instead of running it: a charge made before
// the crash is not asked for again. The provider's call carries the step's
// derived key, so even a charge whose outcome was lost is made once, and
// the ledger's write is keyed the same way (Derive("ledger")). A body that
// fails validation is refused before anything happens and not recorded
// (see readRequest): the client may correct it and use the same key.
func (a *api) createPayment(w http.ResponseWriter, r *http.Request) {
	var req paymentRequest
	if !readRequest(w, r, &req) {
		return
	}
	key, ok := idempotency.FromContext(r.Context())
	if !ok { // the middleware in front requires a key; without one, no charge
		httpx.WriteProblem(w, httpx.Problem{Status: http.StatusInternalServerError,
			Detail: "the payment is not protected by an Idempotency-Key"})
		return
	}
	req.Currency = strings.ToUpper(req.Currency)
	ch, err := step(r.Context(), "charge", func(ctx context.Context, plain bool) (charge, error) {
		if plain { // the transport sends a step's key by itself, and a random one outside steps
			return a.charge(ctx, req, key.Derive("charge"))
		}
		return a.charge(ctx, req, "")
	})
	if err != nil {
		a.log.Error("charging a payment failed", "err", err)
		httpx.WriteProblem(w, httpx.Problem{Status: http.StatusBadGateway,
			Detail: "the payment provider could not be reached; retry with the same Idempotency-Key"})
		return
	}
	a.crashAfter("charge", key.Fence)
	// A retry after a write whose outcome was unknown (the 500 below)
	// finds that write instead of recording another payment.
	p, err := step(r.Context(), "ledger", func(ctx context.Context, _ bool) (payment, error) {
		return a.ledger.Create(ctx, key.Derive("ledger"), account(r), req.Amount, req.Currency)
	})
	if err != nil {
		a.log.Error("recording a payment failed", "err", err)
		httpx.WriteProblem(w, httpx.Problem{Status: http.StatusInternalServerError,
			Detail: "the payment could not be recorded; retry with the same Idempotency-Key"})
		return
	}
	a.crashAfter("ledger", key.Fence)
	a.log.Info("payment made", "id", p.ID, "amount", p.Amount, "currency", p.Currency,
		"charge", ch.ID, "provider_key", key.Derive("charge"), "fence", key.Fence, "pid", os.Getpid())
	// The delay ignores the request's context on purpose: the payment is
	// recorded, so the handler must answer 201, which the middleware
	// records for the retry to replay. Giving up with nothing written
	// would free the key, and the retry would charge again.
	time.Sleep(a.delay)
	w.Header().Set("Location", "/payments/"+p.ID)
	writeJSON(w, http.StatusCreated, p)
}

// step runs fn as the request's step called name (idempotency.Step). Where
// the store keeps no steps in the mode it runs in, it runs fn as a plain
// call (plain true), on every run: the derived keys of the provider and
// the ledger then keep a run again from charging or recording twice, and
// the transactional stores commit the ledger's write with the record.
func step[T any](ctx context.Context, name string, fn func(ctx context.Context, plain bool) (T, error)) (T, error) {
	v, err := idempotency.Step(ctx, name, func(ctx context.Context) (T, error) { return fn(ctx, false) })
	if errors.Is(err, idempotency.ErrStepsUnsupported) {
		return fn(ctx, true)
	}
	return v, err
}

// listPayments answers 200 with the caller's payments, a JSON array.
func (a *api) listPayments(w http.ResponseWriter, r *http.Request) {
	if payments, ok := a.payments(w, r); ok {
		writeJSON(w, http.StatusOK, payments)
	}
}

// getPayment answers 200 with the caller's payment named in the path, or
// 404 (another account's payment included).
func (a *api) getPayment(w http.ResponseWriter, r *http.Request) {
	if p, ok := a.payment(w, r); ok {
		writeJSON(w, http.StatusOK, p)
	}
}

// payment returns the caller's payment named in the path, or answers 404
// (another account's payment included) or 500 and returns false.
func (a *api) payment(w http.ResponseWriter, r *http.Request) (payment, bool) {
	payments, ok := a.payments(w, r)
	if !ok {
		return payment{}, false
	}
	id := chi.URLParam(r, "id")
	for _, p := range payments {
		if p.ID == id {
			return p, true
		}
	}
	httpx.WriteProblem(w, httpx.Problem{Status: http.StatusNotFound, Detail: "no payment has this id"})
	return payment{}, false
}

// payments returns the caller's payments, or answers 500 and returns false
// if the ledger cannot be read.
func (a *api) payments(w http.ResponseWriter, r *http.Request) ([]payment, bool) {
	payments, err := a.ledger.List(r.Context(), account(r))
	if err != nil {
		a.log.Error("listing payments failed", "err", err)
		httpx.WriteProblem(w, httpx.Problem{Status: http.StatusInternalServerError})
		return nil, false
	}
	return payments, true
}

// isCurrency reports whether s is three ASCII letters.
func isCurrency(s string) bool {
	if len(s) != 3 {
		return false
	}
	for _, c := range []byte(s) {
		if (c < 'A' || c > 'Z') && (c < 'a' || c > 'z') {
			return false
		}
	}
	return true
}

func (paymentRequest) problemType() string { return problemInvalidPayment }

func (paymentRequest) usage() string {
	return `the body must be a JSON object {"amount": int, "currency": string}`
}

func (req paymentRequest) invalid() string {
	switch {
	case req.Amount <= 0 || req.Amount > maxAmount:
		return "amount must be a whole number of cents from 1 to 1000000000"
	case !isCurrency(req.Currency):
		return "currency must be three letters, such as EUR"
	}
	return ""
}
