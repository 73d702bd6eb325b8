package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/seed43327c4c/idempotency"
)

// shutdownTimeout is how long a stopping worker waits for the requests in
// progress to finish before it closes their connections.
const shutdownTimeout = 15 * time.Second

// providerURL returns the fake provider's URL on ln, this worker's TCP
// listener (with several workers any of them answers it); a listener on
// every address is reached through the loopback one.
func providerURL(ln net.Listener) string {
	addr := ln.Addr().(*net.TCPAddr)
	host := addr.IP.String()
	if addr.IP.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, strconv.Itoa(addr.Port)) + "/provider/charges"
}

// serve runs one worker: it opens the backend, listens on cfg.addr (shared
// with the other workers when there are several), and serves until ctx
// ends, then shuts down gracefully. GET /metrics serves this worker's own
// metrics (newMetrics), GET /healthz its readiness (withHealth).
func serve(ctx context.Context, cfg config, logger *slog.Logger) error {
	st, led, closeBackend, err := openBackend(ctx, cfg, backendTimeout)
	if err != nil {
		return err
	}
	defer closeBackend()
	var ln net.Listener
	if cfg.workers > 1 {
		ln, err = listenShared(ctx, cfg.addr)
	} else {
		ln, err = new(net.ListenConfig).Listen(ctx, "tcp", cfg.addr)
	}
	if err != nil {
		return err
	}
	m, err := newMetrics()
	if err != nil {
		return err
	}
	defer func() { _ = m.shutdown(context.Background()) }()
	a := &api{ledger: led, delay: cfg.delay, log: logger, webhookSecret: cfg.webhookSecret, jobs: st,
		jobOptions: []idempotency.DoOption{idempotency.DoRetention(receiptRetention), idempotency.DoObserver(m.observer)},
		provider:   newProviderClient(), providerURL: providerURL(ln), crash: cfg.crash}
	extra := []idempotency.Option{idempotency.WithObserver(m.observer)}
	if cfg.sealRing != nil {
		extra = append(extra, idempotency.WithSealer(cfg.sealRing))
		a.jobOptions = append(a.jobOptions, idempotency.DoSealer(cfg.sealRing))
	}
	srv := &http.Server{
		Handler: withHealth(st, logger, withMetrics(m, a.routes(newMiddleware(st, cfg.lease, logger, append(extra, idempotency.WithRetention(cfg.retention))...),
			newWebhookMiddleware(st, cfg.lease, logger, extra...)))),
		// A client gets this long to send its request line and headers,
		// so connections that open and then send nothing do not pile up.
		ReadHeaderTimeout: 10 * time.Second,
		// And this long, from the start, to send the whole request, body
		// included: a stalled upload holds its connection no longer. The
		// handler's own time is not counted.
		ReadTimeout: 30 * time.Second,
		// A kept-alive connection with no request in progress is closed
		// after this long.
		IdleTimeout: 2 * time.Minute,
		ErrorLog:    slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	logger.Info("worker started", "pid", os.Getpid(), "addr", ln.Addr().String(), "store", cfg.store)

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	logger.Info("worker stopping", "pid", os.Getpid())
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutting down: %w", err)
	}
	return nil
}
