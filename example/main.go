// Command example is a small payments service protected by the idempotency
// middleware. A duplicated POST /payments is answered with the stored
// response of the first one instead of charging twice, and a redelivered
// POST /webhooks event, keyed by its id, is processed once.
//
//	go run ./example
//	go run ./example -store redis -workers 4
//	go run ./example -store postgres -migrate-from redis -workers 4
//
// Run it with -h for every flag.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "example:", err)
		os.Exit(2)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The first signal stops the service gracefully; from then on a
	// signal has its default effect, so a second Ctrl-C ends it at once.
	context.AfterFunc(ctx, stop)
	if err := run(ctx, cfg, logger); err != nil {
		logger.Error("example stopped", "pid", os.Getpid(), "err", err)
		os.Exit(1)
	}
}

// run serves until ctx ends: in this process when one worker is asked for
// or this process is a worker, otherwise as the supervisor of cfg.workers
// worker processes.
func run(ctx context.Context, cfg config, logger *slog.Logger) error {
	if cfg.workers > 1 && os.Getenv(workerEnv) == "" {
		return superviseWorkers(ctx, cfg, logger)
	}
	return serve(ctx, cfg, logger)
}
