package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/httpx"
)

// charge is a charge of the fake provider, the body of its 201.
type charge struct {
	ID       string `json:"id"`
	Amount   int    `json:"amount"`
	Currency string `json:"currency"`
}

// providerCalls is the body of GET /provider/charges: how many calls the
// fake provider received, and for how many distinct keys.
type providerCalls struct {
	Calls int `json:"calls"`
	Keys  int `json:"keys"`
}

// providerTimeout bounds one charge call to the fake provider, its
// retries included.
const providerTimeout = 10 * time.Second

// createCharge is the fake payment provider the example serves itself at
// POST /provider/charges, as a provider that honours Idempotency-Key
// would: it counts every call it receives in the ledger (providerCharges,
// shared by every worker) and answers 201 with a charge whose id is made
// from the key, so the same key always gets the same charge. A call
// without a key, or with a body that is not a payment, is a 400.
func (a *api) createCharge(w http.ResponseWriter, r *http.Request) {
	key := r.Header.Get(httpx.KeyHeader)
	var req paymentRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<10)).Decode(&req); err != nil || key == "" || req.invalid() != "" {
		httpx.WriteProblem(w, httpx.Problem{Status: http.StatusBadRequest,
			Detail: "the provider wants an Idempotency-Key and a valid payment"})
		return
	}
	if _, err := a.ledger.Count(r.Context(), providerCharges, key); err != nil {
		a.log.Error("counting a provider call failed", "err", err)
		httpx.WriteProblem(w, httpx.Problem{Status: http.StatusServiceUnavailable})
		return
	}
	sum := sha256.Sum256([]byte(key))
	writeJSON(w, http.StatusCreated, charge{ID: "ch_" + hex.EncodeToString(sum[:8]), Amount: req.Amount, Currency: req.Currency})
}

// listCharges answers GET /provider/charges with providerCalls.
func (a *api) listCharges(w http.ResponseWriter, r *http.Request) {
	counts, err := a.ledger.Counts(r.Context(), providerCharges)
	if err != nil {
		a.log.Error("listing provider calls failed", "err", err)
		httpx.WriteProblem(w, httpx.Problem{Status: http.StatusInternalServerError})
		return
	}
	calls := providerCalls{Keys: len(counts)}
	for _, c := range counts {
		calls.Calls += c.Count
	}
	writeJSON(w, http.StatusOK, calls)
}

// charge asks the fake provider at a.providerURL to charge req under key
// ("": the transport's). It is sent through idempotency.NewTransport, so
// inside a step it carries the step's key, derived from the request's:
// every run of the step sends the same one.
func (a *api) charge(ctx context.Context, req paymentRequest, key string) (charge, error) {
	body, _ := json.Marshal(req) // an int and a string always encode
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, a.providerURL, bytes.NewReader(body))
	if err != nil {
		return charge{}, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	if key != "" {
		hreq.Header.Set(httpx.KeyHeader, key)
	}
	resp, err := a.provider.Do(hreq)
	if err != nil {
		return charge{}, fmt.Errorf("charging: %w", err)
	}
	defer resp.Body.Close()
	var ch charge
	if resp.StatusCode != http.StatusCreated {
		return charge{}, fmt.Errorf("charging: the provider answered %s", resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&ch); err != nil {
		return charge{}, fmt.Errorf("charging: %w", err)
	}
	return ch, nil
}

// newProviderClient returns the client of the fake provider: the
// idempotency transport, which sends a step's key and retries what is
// safe to retry, within providerTimeout.
func newProviderClient() *http.Client {
	return &http.Client{Transport: idempotency.NewTransport(nil), Timeout: providerTimeout}
}
