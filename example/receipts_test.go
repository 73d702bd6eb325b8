package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReceipts: a payment's receipt is sent once however often and
// however concurrently it is asked for, and every answer is the receipt
// first sent; another account's payment, or none, is 404.
func TestReceipts(t *testing.T) {
	ta := newTestAPI(t, &memoryLedger{})
	paid := ta.post(t, "/payments", "receipt-1", `{"amount": 100, "currency": "EUR"}`)
	require.Equal(t, http.StatusCreated, paid.status)
	var p payment
	require.NoError(t, json.Unmarshal([]byte(paid.body), &p))
	path := "/payments/" + p.ID + "/receipt"

	answers := make([]answer, 20)
	var wg sync.WaitGroup
	for i := range answers {
		wg.Go(func() { answers[i] = ta.post(t, path, "", "") })
	}
	wg.Wait()
	var sent []answer
	for _, a := range answers {
		if a.status != http.StatusConflict { // asked while it was being sent
			sent = append(sent, a)
		}
	}
	require.NotEmpty(t, sent)
	for _, a := range append(sent, ta.post(t, path, "", "")) {
		require.Equal(t, http.StatusOK, a.status, a.body)
		require.JSONEq(t, `{"payment":"`+p.ID+`","account":"`+testAccount+`","sent_by":"`+pid+`"}`, a.body)
	}
	require.Equal(t, 1, strings.Count(ta.logs.String(), `msg="receipt sent"`))

	require.Equal(t, http.StatusNotFound, ta.postAs(t, "sk_test_bob", path, "", "").status)
	require.Equal(t, http.StatusNotFound, ta.post(t, "/payments/pay_none/receipt", "", "").status)
}

// TestReceiptsInMetrics: the example on Redis, as a process of its own,
// counts the receipts' jobs by outcome in GET /metrics: the first request
// for a receipt executed, the others replayed.
func TestReceiptsInMetrics(t *testing.T) {
	p := startExample(t, "-store", "redis", "-redis-url", redisURL(t))
	_, body := postOnce(t, p.URL, "receipt-metrics")
	var paid payment
	require.NoError(t, json.Unmarshal([]byte(body), &paid))
	for range 3 {
		req, err := http.NewRequest(http.MethodPost, p.URL+"/payments/"+paid.ID+"/receipt", nil)
		require.NoError(t, err)
		asCaller(req, testAccount)
		require.Equal(t, http.StatusOK, do(t, req).status)
	}
	require.Equal(t, map[string]int{"executed": 1, "replayed": 2}, scrape(t, http.DefaultClient, p.URL).jobs)
}
