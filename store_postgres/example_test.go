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

// A handler in transactional mode takes the request's transaction with Tx.
// To answer 422 and keep the claim, it undoes only its own writes, in a
// savepoint; the 422 is then recorded with the claim, and a retry of the
// same body gets it replayed.
func ExampleTx() {
	reserve := func(w http.ResponseWriter, r *http.Request) {
		tx, ok := pgstore.Tx(r.Context())
		if !ok {
			http.Error(w, "not protected", http.StatusInternalServerError)
			return
		}
		sp, err := tx.Begin(r.Context()) // a savepoint
		if err != nil {
			http.Error(w, "try again", http.StatusServiceUnavailable)
			return
		}
		var seats int
		err = sp.QueryRow(r.Context(), `UPDATE flights SET seats = seats - 1 WHERE id = 1 RETURNING seats`).Scan(&seats)
		if err != nil || seats < 0 {
			_ = sp.Rollback(r.Context()) // undoes the UPDATE only
			http.Error(w, "sold out", http.StatusUnprocessableEntity)
			return
		}
		if err := sp.Commit(r.Context()); err != nil { // releases the savepoint
			http.Error(w, "try again", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}
	pool, err := pgxpool.New(context.Background(), os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	s := pgstore.NewTx(pool) // migrated at start-up, as in ExampleNewTx
	http.Handle("POST /reservations", idempotency.New(idempotency.WithStore(s))(http.HandlerFunc(reserve)))
}
