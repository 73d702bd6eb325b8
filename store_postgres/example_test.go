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
