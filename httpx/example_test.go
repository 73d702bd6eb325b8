package httpx_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/seed43327c4c/idempotency/httpx"
)

func ExampleParseKey() {
	for _, v := range []string{`abc-123`, `"abc-123"`, `"abc";p=1`} {
		h := http.Header{}
		h.Set("Idempotency-Key", v)
		key, err := httpx.ParseKey(h)
		fmt.Printf("%s -> %q %v\n", v, key, err)
	}
	_, err := httpx.ParseKey(http.Header{})
	fmt.Println(err)
	// Output:
	// abc-123 -> "abc-123" <nil>
	// "abc-123" -> "abc-123" <nil>
	// "abc";p=1 -> "" malformed Idempotency-Key header
	// missing Idempotency-Key header
}

func ExampleRecorder() {
	handler := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Header().Set("X-Too-Late", "not sent")
		_, _ = io.WriteString(w, `{"id":"pay_1"}`)
	}

	client := httptest.NewRecorder()
	rec := httpx.NewRecorder(client, 1<<20)
	handler(rec, httptest.NewRequest(http.MethodPost, "/payments", nil))

	fmt.Println(rec.Status(), rec.HeaderSnapshot(), string(rec.Body()), rec.Replayable())
	fmt.Println(client.Code, client.Body.String())
	// Output:
	// 201 map[Content-Type:[application/json]] {"id":"pay_1"} true
	// 201 {"id":"pay_1"}
}

func ExampleWriteProblem() {
	w := httptest.NewRecorder()
	w.Header().Set("Retry-After", "1")
	httpx.WriteProblem(w, httpx.Problem{
		Type:   "https://example.com/problems/request-in-progress",
		Title:  "A request with this key is in progress",
		Status: http.StatusConflict,
	})
	fmt.Println(w.Code, w.Header().Get("Content-Type"))
	fmt.Println(w.Body.String())
	// Output:
	// 409 application/problem+json
	// {"type":"https://example.com/problems/request-in-progress","title":"A request with this key is in progress","status":409}
}
