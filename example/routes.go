package main

import (
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
)

// api holds what the handlers need.
type api struct {
	ledger        ledger
	delay         time.Duration
	log           *slog.Logger
	webhookSecret []byte                 // nil: webhook signatures are not checked
	jobs          store.Store            // where Do keeps the receipts it sends
	jobOptions    []idempotency.DoOption // of each receipt's Do
	provider      *http.Client           // the fake provider's client (newProviderClient)
	providerURL   string                 // POST /provider/charges of this service
	crash         crashPoint             // -crash-after-step
}

// routes returns the service's router. Every route but /webhooks and the
// fake provider's /provider/charges needs an account (requireAccount); the
// POST routes go through idem, the idempotency middleware, while reads need
// no protection, and a receipt is protected by idempotency.Do, keyed by its
// payment. POST /webhooks goes through webhookIdem, after the signature
// check when a secret is set.
func (a *api) routes(idem, webhookIdem func(http.Handler) http.Handler) http.Handler {
	r := chi.NewRouter()
	r.Use(workerPid)
	var receive http.Handler = webhookIdem(http.HandlerFunc(a.receiveWebhook))
	if a.webhookSecret != nil {
		receive = verifySignature(a.webhookSecret, time.Now, receive)
	}
	r.Method(http.MethodPost, "/webhooks", receive)
	r.Get("/webhooks", a.listWebhooks)
	r.Post("/provider/charges", a.createCharge)
	r.Get("/provider/charges", a.listCharges)
	r.Group(func(r chi.Router) {
		r.Use(requireAccount)
		r.Get("/payments", a.listPayments)
		r.Get("/payments/{id}", a.getPayment)
		r.Post("/payments/{id}/receipt", a.sendReceipt)
		r.With(idem).Post("/payments", a.createPayment)
		r.With(idem).Post("/emails", a.sendEmail)
	})
	return r
}

// newMiddleware builds the idempotency middleware: the key is required, and
// records go to st, or to the middleware's default in-memory store when st
// is nil. The scope is the caller's account, and is required: the same key
// from two accounts is two requests, and one account never gets another's
// stored response replayed (see docs/usage.md, "Scope: set it"). extra
// options go last.
func newMiddleware(st store.Store, lease time.Duration, logger *slog.Logger, extra ...idempotency.Option) func(http.Handler) http.Handler {
	opts := []idempotency.Option{
		idempotency.WithKeyRequired(),
		idempotency.WithScope(account),
		idempotency.WithScopeRequired(),
		idempotency.WithLease(lease),
		idempotency.WithLogger(logger),
	}
	if st != nil {
		opts = append(opts, idempotency.WithStore(st))
	}
	return idempotency.New(append(opts, extra...)...)
}

// pid is this process's id, as the X-Worker-Pid header shows it.
var pid = strconv.Itoa(os.Getpid())

// workerPid adds X-Worker-Pid to every response, replays and conflicts
// included, so that a client can tell which worker process answered.
func workerPid(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Worker-Pid", pid)
		next.ServeHTTP(w, r)
	})
}
