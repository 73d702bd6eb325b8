package idempotencytest_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/idempotencytest"
)

// createPayment stands for an application's handler.
func createPayment(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusCreated) }

// A test of an application's endpoint: twenty concurrent duplicates run
// the handler once and get one answer, and the key with another body gets
// 422. It would fail the test if the route were not behind the middleware.
func ExampleRequireIdempotent() {
	testCreatePayment := func(t *testing.T) {
		app := idempotency.New()(http.HandlerFunc(createPayment)) // your router, as your server builds it
		req := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(`{"amount": 500}`))
		req.Header.Set("Idempotency-Key", "order-1")
		idempotencytest.RequireIdempotent(t, app, req, 20, `{"amount": 501}`)
	}
	_ = testCreatePayment // a func TestCreatePayment(t *testing.T) in your _test.go file
}
