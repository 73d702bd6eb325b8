package store_test

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/seed43327c4c/idempotency/store"
)

// A first request claims its key, runs, and completes it; a duplicate's
// claim loses and gets the stored response back to replay.
func ExampleNewMemory() {
	ctx := context.Background()
	s := store.NewMemory(store.WithMaxRecords(10_000))

	rec, claimed, err := s.Claim(ctx, "tenant-7 POST /payments key-1", "fp-1", "token-a", 30*time.Second)
	if err != nil {
		panic(err)
	}
	fmt.Println("first:", claimed, rec.State, "fence", rec.Owner.Fence)

	resp := &store.Response{
		Status: http.StatusCreated,
		Header: http.Header{"Content-Type": {"application/json"}},
		Body:   []byte(`{"id":"pay_1"}`),
	}
	if err := s.Complete(ctx, "tenant-7 POST /payments key-1", rec.Owner, resp, 24*time.Hour); err != nil {
		panic(err)
	}

	dup, claimed, err := s.Claim(ctx, "tenant-7 POST /payments key-1", "fp-1", "token-b", 30*time.Second)
	if err != nil {
		panic(err)
	}
	fmt.Println("duplicate:", claimed, dup.State, dup.Response.Status, string(dup.Response.Body))

	err = s.Release(ctx, "tenant-7 POST /payments key-1", rec.Owner)
	fmt.Println("late release:", err)
	// Output:
	// first: true in-flight fence 1
	// duplicate: false completed 201 {"id":"pay_1"}
	// late release: store: lease not held by this owner
}
