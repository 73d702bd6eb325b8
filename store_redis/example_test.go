package redisstore_test

import (
	"net/http"

	"github.com/redis/go-redis/v9"

	"github.com/seed43327c4c/idempotency"
	redisstore "github.com/seed43327c4c/idempotency/store_redis"
)

// Several processes behind one Redis share their records: a payment
// duplicated across them runs once. New does not dial; the client connects
// on the first request.
func ExampleNew() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer client.Close()
	s := redisstore.New(client, redisstore.WithPrefix("payments-api:"))

	mux := http.NewServeMux()
	pay := idempotency.New(idempotency.WithStore(s), idempotency.WithKeyRequired())
	mux.Handle("POST /payments", pay(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})))
	_ = http.ListenAndServe(":8080", mux)
}

// With Redis Cluster, a record's keys share a hash tag, so each operation
// touches one slot.
func ExampleNew_cluster() {
	client := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 []string{"127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002"},
		ContextTimeoutEnabled: true,
	})
	defer client.Close()
	_ = idempotency.New(idempotency.WithStore(redisstore.New(client)))
}
