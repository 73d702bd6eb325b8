package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/seed43327c4c/idempotency/store"
)

// payment is one payment in the ledger, as the API shows it.
type payment struct {
	ID       string `json:"id"`
	Amount   int    `json:"amount"`
	Currency string `json:"currency"`
}

// ledger keeps the payments the service has made, each for the account
// that made it, the webhook events it has processed and the calls its fake
// provider received. With a shared store it lives in that same backend, so
// every worker process sees every payment.
type ledger interface {
	// Create records a new payment of account under an id from
	// newPaymentID, unique across processes, and returns it. ref names the
	// write (a key the request derives, Key.Derive): a ref already recorded
	// returns its payment and writes nothing, so a write whose outcome is
	// unknown, such as one that timed out, may be sent again.
	Create(ctx context.Context, ref, account string, amount int, currency string) (payment, error)
	// List returns account's payments, oldest first; an account without
	// any gives an empty slice. It never returns another account's.
	List(ctx context.Context, account string) ([]payment, error)
	// Count records one more sighting of id in t and returns how many
	// times t has seen it, this one included.
	Count(ctx context.Context, t tally, id string) (int, error)
	// Counts returns every id t has seen with its count, ordered by id;
	// none gives an empty slice.
	Counts(ctx context.Context, t tally) ([]eventCount, error)
}

// tally is one of the ledger's tables of counts: how many times each id
// was seen. Its name is the SQL table and, under "example:", the Redis
// hash.
type tally struct {
	name string
	// external marks the tally of another system, the fake provider: it
	// is counted on connections of its own, as that system would count
	// it, never in a request's transaction nor on the connections the
	// requests hold (a request waiting for the provider could otherwise
	// hold the connection the provider waits for). Other tallies join
	// the request's transaction in transactional mode.
	external bool
}

var (
	// webhookEvents counts each webhook event's processings.
	webhookEvents = tally{name: "webhook_events"}
	// providerCharges counts the calls the fake provider received for
	// each Idempotency-Key.
	providerCharges = tally{name: "provider_charges", external: true}
)

// opener opens one -store backend. It returns the idempotency store, the
// ledger, and a function that releases what it opened. Each backend's opener lives in its
// own file, backend_<name>.go.
type opener func(ctx context.Context, cfg config) (store.Store, ledger, func(), error)

// backendTimeout bounds opening a backend at start-up: connecting to it,
// checking it and creating its tables.
const backendTimeout = 30 * time.Second

// openBackend opens cfg's backend with its opener. A backend that has not
// answered within timeout is an error naming it, not a silent wait (a
// server that accepts connections and never replies would otherwise hold
// the start-up forever).
func openBackend(ctx context.Context, cfg config, timeout time.Duration) (store.Store, ledger, func(), error) {
	octx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	open := openers[cfg.store]
	if cfg.migrateFrom != "" {
		open = openMigrating
	}
	st, led, closeBackend, err := open(octx, cfg)
	if err != nil && ctx.Err() == nil && errors.Is(octx.Err(), context.DeadlineExceeded) {
		return nil, nil, nil, fmt.Errorf("the %s backend did not answer within %v: %w", cfg.store, timeout, err)
	}
	return st, led, closeBackend, err
}

// sweepWhileOpen starts a store's sweeper (its StartSweeper) and returns
// the function that stops it, waits for it, and then closes the store's
// database with closeDB.
func sweepWhileOpen(start func(context.Context, time.Duration) <-chan struct{}, closeDB func()) func() {
	ctx, stop := context.WithCancel(context.Background())
	swept := start(ctx, 0)
	return func() {
		stop()
		<-swept
		closeDB()
	}
}

// openers maps each -store name to its opener.
var openers = map[string]opener{
	"memory":   openMemory,
	"redis":    openRedis,
	"postgres": openPostgres,
	"mysql":    openMySQL,
	"sqlite":   openSQLite,
}
