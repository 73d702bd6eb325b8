package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/seed43327c4c/idempotency/store"
	redisstore "github.com/seed43327c4c/idempotency/store_redis"
)

// healthTimeout is how long the store gets to answer GET /healthz.
const healthTimeout = time.Second

// health is the body of GET /healthz.
type health struct {
	Status      string `json:"status"`                 // "ok" or "unavailable"
	Reason      string `json:"reason,omitempty"`       // why it is unavailable
	ReplicaAcks string `json:"replica_acks,omitempty"` // with -store redis: the replicas writes wait for
}

// withHealth serves GET /healthz, a readiness probe needing no account, and
// every other request from next: 200 while st answers a ping within
// healthTimeout, else 503 saying why (the store's own error goes to
// logger, not to the unauthenticated caller). A store that cannot be
// pinged counts as ready. The Redis store's answer also says which replica
// acknowledgements its writes get.
func withHealth(st store.Store, logger *slog.Logger, next http.Handler) http.Handler {
	pinger, _ := st.(store.Pinger)
	replicated, _ := st.(interface{ Replication() redisstore.Replication })
	mux := http.NewServeMux()
	mux.Handle("GET /healthz", workerPid(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if pinger == nil {
			writeJSON(w, http.StatusOK, health{Status: "ok"})
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), healthTimeout)
		defer cancel()
		err := pinger.Ping(ctx)
		switch {
		case err == nil && replicated != nil:
			writeJSON(w, http.StatusOK, health{Status: "ok", ReplicaAcks: replicated.Replication().String()})
		case err == nil:
			writeJSON(w, http.StatusOK, health{Status: "ok"})
		case errors.Is(err, context.DeadlineExceeded):
			logger.Warn("health check: the store did not answer", "err", err)
			writeJSON(w, http.StatusServiceUnavailable, health{Status: "unavailable",
				Reason: "the idempotency store did not answer within " + healthTimeout.String()})
		default:
			logger.Warn("health check: the store failed", "err", err)
			writeJSON(w, http.StatusServiceUnavailable, health{Status: "unavailable", Reason: "the idempotency store failed"})
		}
	})))
	mux.Handle("/", next)
	return mux
}
