package pgstore_test

import (
	"context"
	"log"
	"net/http"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seed43327c4c/idempotency"
	pgstore "github.com/seed43327c4c/idempotency/store_postgres"
)

// Every worker process opens its pool, migrates (at once with the others,
// safely), sweeps expired rows in the background, and puts the middleware
// in front of its handlers.
func ExampleNew() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := pool.Ping(ctx); err != nil { // pgxpool connects lazily: fail at start-up
		log.Fatal(err)
	}

	s := pgstore.New(pool, pgstore.WithTable("idempotency_keys"))
	if err := s.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	s.StartSweeper(ctx, 0) // every minute until ctx ends

	payments := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})
	http.Handle("POST /payments", idempotency.New(idempotency.WithStore(s))(payments))
}

// In transactional mode the handler writes through the request's
// transaction: the payment row commits with the stored response, or is
// rolled back with the claim (on a 5xx, a panic, a crash or a lost
// connection).
func ExampleNewTx() {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	cfg.MaxConns = 20 // one connection per request in flight, plus headroom
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	s := pgstore.NewTx(pool)
	if err := s.Migrate(ctx); err != nil {
		log.Fatal(err)
	}

	payments := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, ok := pgstore.Tx(r.Context())
		if !ok {
			http.Error(w, "not protected", http.StatusInternalServerError)
			return
		}
		if _, err := tx.Exec(r.Context(), `INSERT INTO payments (amount) VALUES (100)`); err != nil {
			http.Error(w, "try again", http.StatusServiceUnavailable) // rolled back
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	http.Handle("POST /payments", idempotency.New(idempotency.WithStore(s))(payments))
}
