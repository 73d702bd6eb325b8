package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// countingLedger counts the payments the handler writes; the ledger keeps
// one payment per ref, so a request run twice writes twice and lists one.
type countingLedger struct {
	ledger
	writes atomic.Int64
}

func (l *countingLedger) Create(ctx context.Context, ref, account string, amount int, currency string) (payment, error) {
	l.writes.Add(1)
	return l.ledger.Create(ctx, ref, account, amount, currency)
}

// TestOperatorFindsAndDeletesAPayment is docs/operations.md run against the
// example on Redis, with the command built as an operator gets it:
// inspect finds a completed payment from its account, method, route and
// key, with the status and body the client got; delete lets the same
// request run again; and a delete of a payment still running fails
// without -force and changes nothing.
func TestOperatorFindsAndDeletesAPayment(t *testing.T) {
	rds := startPrivateRedis(t)
	st, led, closeBackend, err := openBackend(context.Background(), config{store: "redis", redisURL: rds.URL()}, 10*time.Second)
	require.NoError(t, err)
	t.Cleanup(closeBackend)
	counted := &countingLedger{ledger: led}
	logger := slog.New(slog.DiscardHandler)
	serve := func(delay time.Duration) *testAPI {
		srv := httptest.NewServer(withProvider(t, &api{ledger: counted, delay: delay, log: logger}).routes(newMiddleware(st, 30*time.Second, logger), newWebhookMiddleware(st, 30*time.Second, logger)))
		t.Cleanup(srv.Close)
		return &testAPI{url: srv.URL, led: counted}
	}
	fast, slow := serve(0), serve(5*time.Second)
	tool := buildCommand(t)
	record := func(key string) []string {
		return []string{"-store", "redis", "-url", rds.URL(), "-scope", testAccount, "-method", "POST", "-route", "/payments", "-key", key}
	}

	paid := fast.post(t, "/payments", "order-1", `{"amount":500,"currency":"eur"}`)
	require.Equal(t, 201, paid.status)
	out, code := tool.run(t, append([]string{"inspect"}, record("order-1")...)...)
	require.Equal(t, 0, code)
	require.Equal(t, "completed", out["state"])
	require.EqualValues(t, 201, out["status"])
	require.Equal(t, paid.body, out["body"], "the body the client got")

	_, code = tool.run(t, append([]string{"delete"}, record("order-1")...)...)
	require.Equal(t, 0, code)
	again := fast.post(t, "/payments", "order-1", `{"amount":500,"currency":"eur"}`)
	require.Equal(t, 201, again.status)
	require.Empty(t, again.header.Get("Idempotent-Replayed"), "the request ran again")
	require.EqualValues(t, 2, counted.writes.Load(), "the handler wrote the payment twice")
	require.Equal(t, 1, fast.ledgerLen(t), "the ledger kept one payment for one ref")

	running := make(chan *http.Response, 1)
	go func() { running <- postAsync(slow.url, "order-2", `{"amount":700,"currency":"eur"}`) }()
	var inFlight map[string]any
	for start := time.Now(); inFlight["state"] != "in-flight" && time.Since(start) < 5*time.Second; {
		inFlight, _ = tool.run(t, append([]string{"inspect"}, record("order-2")...)...)
	}
	require.Equal(t, "in-flight", inFlight["state"], "the slow payment is running")
	_, code = tool.run(t, append([]string{"delete"}, record("order-2")...)...)
	require.Equal(t, 1, code, "a delete of a payment in flight without -force fails")
	out, _ = tool.run(t, append([]string{"inspect"}, record("order-2")...)...)
	require.Equal(t, "in-flight", out["state"], "and changes nothing")
	require.Equal(t, inFlight["fence"], out["fence"])
	first := <-running
	require.NotNil(t, first, "the slow payment got no answer")
	defer first.Body.Close()
	firstBody, err := io.ReadAll(first.Body)
	require.NoError(t, err)
	require.Equal(t, 201, first.StatusCode)
	replay := fast.post(t, "/payments", "order-2", `{"amount":700,"currency":"eur"}`)
	require.Equal(t, "true", replay.header.Get("Idempotent-Replayed"))
	require.Equal(t, string(firstBody), replay.body)
	require.EqualValues(t, 3, counted.writes.Load())
}

// postAsync posts a payment as testAccount from a goroutine of its own,
// returning nil if it fails.
func postAsync(url, key, body string) *http.Response {
	req, err := http.NewRequest(http.MethodPost, url+"/payments", strings.NewReader(body))
	if err != nil {
		return nil
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	asCaller(req, testAccount)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	return resp
}

// command is the idempotency command, built.
type command string

// buildCommand builds cmd/idempotency, its module on its own as an
// operator would install it.
func buildCommand(t *testing.T) command {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("the go command is not on PATH")
	}
	bin := filepath.Join(t.TempDir(), "idempotency")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = filepath.Join("..", "cmd", "idempotency")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "building the command: %s", out)
	return command(bin)
}

// run runs the command with args, and returns its JSON object (nil when it
// printed none) and exit status.
func (c command) run(t *testing.T, args ...string) (map[string]any, int) {
	t.Helper()
	stdout, err := exec.Command(string(c), args...).Output()
	code := 0
	if exit := (*exec.ExitError)(nil); errors.As(err, &exit) {
		code = exit.ExitCode()
	} else {
		require.NoError(t, err)
	}
	var out map[string]any
	if len(stdout) > 0 {
		require.NoError(t, json.Unmarshal(stdout, &out), "%s", stdout)
	}
	return out, code
}
