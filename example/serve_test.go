package main

import (
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestExampleKillSingleWorker(t *testing.T) {
	p := startExample(t, "-store", "memory")
	p.Kill(p.Pids()[0])
	select {
	case <-p.exited:
	default:
		t.Fatal("Kill returned before the process exited")
	}
}

// TestExampleSecondSignalEndsItAtOnce: the first SIGINT stops the service
// gracefully, waiting for the request in progress; a second one ends it at
// once, as Ctrl-C pressed twice should.
func TestExampleSecondSignalEndsItAtOnce(t *testing.T) {
	p := startExample(t, "-store", "memory", "-delay", "20s")
	go func() {
		req, _ := http.NewRequest(http.MethodPost, p.URL+"/payments", strings.NewReader(`{"amount": 5, "currency": "EUR"}`))
		req.Header.Set("Idempotency-Key", "slow")
		asCaller(req, testAccount)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	require.Eventually(t, func() bool {
		req, _ := http.NewRequest(http.MethodGet, p.URL+"/payments", nil)
		asCaller(req, testAccount)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(body), `"amount":5`)
	}, 10*time.Second, 20*time.Millisecond, "the payment is recorded and its handler is in its delay")

	require.NoError(t, p.cmd.Process.Signal(os.Interrupt))
	require.Eventually(t, func() bool { return strings.Contains(p.Log(), `msg="worker stopping"`) },
		5*time.Second, 10*time.Millisecond)
	select {
	case <-p.exited:
		t.Fatalf("the first signal did not wait for the request in progress\n%s", p.Log())
	case <-time.After(200 * time.Millisecond):
	}
	require.NoError(t, p.cmd.Process.Signal(os.Interrupt))
	select {
	case <-p.exited:
		p.stopped = true
	case <-time.After(5 * time.Second):
		t.Fatalf("a second signal did not end the example at once\n%s", p.Log())
	}
}
