package idempotency_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
)

// A payment endpoint behind the middleware: the retry of a request is
// answered from the store, and the payment is made once.
func ExampleNew() {
	charges := 0
	pay := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		charges++
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":%d}`, charges)
	})
	r := http.NewServeMux()
	r.Handle("POST /payments", idempotency.New(idempotency.WithKeyRequired())(pay))

	for range 2 {
		req := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(`{"amount":100}`))
		req.Header.Set("Idempotency-Key", "order-42")
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		fmt.Println(w.Code, w.Header().Get("Idempotent-Replayed"), w.Body.String())
	}
	fmt.Println("charges:", charges)
	// Output:
	// 201  {"charge":1}
	// 201 true {"charge":1}
	// charges: 1
}

// The scope keeps callers apart: the same key from two users names two
// requests, and neither can read the other's stored response.
func ExampleWithScope() {
	userID := func(r *http.Request) string { return r.Header.Get("X-User-Id") } // from your auth
	h := idempotency.New(idempotency.WithScope(userID))(http.HandlerFunc(
		func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "receipt for %s", r.Header.Get("X-User-Id"))
		}))

	for _, user := range []string{"alice", "bob", "alice"} {
		req := httptest.NewRequest(http.MethodPost, "/payments", nil)
		req.Header.Set("Idempotency-Key", "1")
		req.Header.Set("X-User-Id", user)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		fmt.Printf("%s: %q replayed=%q\n", user, w.Body.String(), w.Header().Get("Idempotent-Replayed"))
	}
	// Output:
	// alice: "receipt for alice" replayed=""
	// bob: "receipt for bob" replayed=""
	// alice: "receipt for alice" replayed="true"
}

// A webhook receiver keyed by the event's id, as Stripe sends it in the
// body: a redelivery is answered from the store, and the event handled once.
func ExampleKeyFromJSONField() {
	handled := 0
	receive := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handled++
		fmt.Fprintf(w, `{"handled":%d}`, handled)
	})
	byEventID := idempotency.New(
		idempotency.WithKeyFunc(idempotency.KeyFromJSONField("id")),
		idempotency.WithKeyRequired(),
		idempotency.WithScope(func(*http.Request) string { return "stripe" }),
	)
	h := byEventID(receive)

	for _, event := range []string{
		`{"id":"evt_1","type":"invoice.paid"}`,
		`{"id":"evt_1","type":"invoice.paid"}`,
		`{"type":"invoice.paid"}`,
	} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/webhooks", strings.NewReader(event)))
		fmt.Println(w.Code, w.Header().Get("Idempotent-Replayed"), w.Body.String())
	}
	// Output:
	// 200  {"handled":1}
	// 200 true {"handled":1}
	// 400  {"type":"https://github.com/seed43327c4c/idempotency/blob/main/docs/problems.md#key-missing","title":"This request must carry an idempotency key","status":400}
}

// A record is found from what a client reports: its account (the scope),
// the method, the route and its Idempotency-Key. Shared stores file it
// under store.HashKey of the storage key, whose first digits are the
// key_hash of the error log and what `idempotency inspect -hash` takes.
func ExampleStorageKey() {
	key := idempotency.StorageKey("acct_1", http.MethodPost, "/payments", "order-1")
	fmt.Println(store.HashKey(key)[:idempotency.KeyHashLen])
	// Output: 9f9f50d144949830
}
