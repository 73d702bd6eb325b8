package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/seal"
)

// TestInspectAJob: a job's record is found by its key, its result shown as
// text, or in base64 when it is not UTF-8.
func TestInspectAJob(t *testing.T) {
	forEachTarget(t, func(t *testing.T, tg target) {
		for job, result := range map[string]string{"text": "done", "binary": "\xff\xfe"} {
			_, err := idempotency.Do(t.Context(), tg.store, job, func(context.Context) ([]byte, error) { return []byte(result), nil })
			require.NoError(t, err)
		}
		out := runCmd(tg, "inspect", "-job", "text").json(t)
		require.Equal(t, "completed", out["state"])
		require.EqualValues(t, 200, out["status"])
		require.Equal(t, "done", out["body"])
		out = runCmd(tg, "inspect", "-job", "binary").json(t)
		require.Equal(t, "//4=", out["body_base64"])
		require.NotContains(t, out, "body")
	})
}

// TestInspectShowsSteps: a job in flight whose run recorded three steps
// is shown with them, in order, each result as the JSON the step returned
// and a final error's message marked failed, on every store that keeps
// steps.
func TestInspectShowsSteps(t *testing.T) {
	forEachTarget(t, func(t *testing.T, tg target) {
		if _, ok := tg.store.(store.StepStore); !ok {
			t.Skip("the store keeps no steps")
		}
		recorded, finish := make(chan struct{}), make(chan struct{})
		job := make(chan error, 1)
		go func() {
			_, err := idempotency.Do(t.Context(), tg.store, "stepped", func(ctx context.Context) ([]byte, error) {
				if _, err := idempotency.Step(ctx, "charge", func(context.Context) (string, error) { return "ch_1", nil }); err != nil {
					return nil, err
				}
				if _, err := idempotency.Step(ctx, "binary", func(context.Context) ([]byte, error) { return []byte{0xff}, nil }); err != nil {
					return nil, err
				}
				_, err := idempotency.Step(ctx, "email", func(context.Context) (int, error) {
					return 0, idempotency.Final(errors.New("mailbox full"))
				})
				close(recorded)
				<-finish
				return []byte("done"), err
			})
			job <- err
		}()
		<-recorded
		out := runCmd(tg, "inspect", "-job", "stepped").json(t)
		close(finish)
		require.Equal(t, "in-flight", out["state"])
		require.Equal(t, []any{
			map[string]any{"name": "charge", "result": `"ch_1"`},
			map[string]any{"name": "binary", "result": `"/w=="`},
			map[string]any{"name": "email", "result": "mailbox full", "failed": true},
		}, out["steps"])
		<-job
	})
}

// TestInspectASealedRecord: a sealed record is opened with the ring given
// by -seal-keys or IDEMPOTENCY_SEAL_KEYS; without one, or with one that
// lacks its key, the command says so, shows none of the response, and
// exits 1.
func TestInspectASealedRecord(t *testing.T) {
	dir := t.TempDir()
	old, rotated, lacking := ringFile(t, dir, "k1"), ringFile(t, dir, "k2", "k1"), ringFile(t, dir, "k2")
	bad := filepath.Join(dir, "bad")
	require.NoError(t, os.WriteFile(bad, []byte("k1 c2hvcnQ=\n"), 0o600))
	forEachTarget(t, func(t *testing.T, tg target) {
		pay(t, tg.store, "acct_1", "k-1", idempotency.WithSealer(readRing(t, old)))
		record := []string{"inspect", "-scope", "acct_1", "-route", "/payments", "-key", "k-1"}

		opened := runCmd(tg, append(record, "-seal-keys", rotated)...)
		require.Equal(t, exitFound, opened.code, opened.stderr)
		out := opened.json(t)
		require.Equal(t, "k1", out["sealed_by"])
		require.Equal(t, `{"id":"pay_1","amount":500}`, out["body"])
		require.Equal(t, map[string]any{"Content-Type": []any{"application/json"}}, out["header"])

		for name, tc := range map[string]struct {
			args   []string
			stderr string
		}{
			"no ring":      {stderr: "sealed under key \"k1\", and no ring was given: pass -seal-keys FILE or set IDEMPOTENCY_SEAL_KEYS"},
			"key removed":  {args: []string{"-seal-keys", lacking}, stderr: "sealed under key \"k1\", which the ring in " + lacking + " does not hold"},
			"bad ring":     {args: []string{"-seal-keys", bad}, stderr: "key \"k1\" is 5 bytes, want 32"},
			"no ring file": {args: []string{"-seal-keys", filepath.Join(dir, "none")}, stderr: "no such file"},
		} {
			t.Run(name, func(t *testing.T) {
				r := runCmd(tg, append(record, tc.args...)...)
				require.Equal(t, exitError, r.code)
				require.Contains(t, r.stderr, tc.stderr)
				out := r.json(t)
				require.Equal(t, "completed", out["state"])
				require.Equal(t, "k1", out["sealed_by"])
				require.NotContains(t, out, "body")
				require.NotContains(t, out, "header")
				require.NotContains(t, r.stdout, "pay_1")
			})
		}
	})
}

// TestInspectRingFromEnv: without -seal-keys, IDEMPOTENCY_SEAL_KEYS names
// the ring's file.
func TestInspectRingFromEnv(t *testing.T) {
	dir := t.TempDir()
	tg := target{name: "sqlite"}
	tg.flags, tg.store = sqliteTarget(t)
	pay(t, tg.store, "acct_1", "k-1", idempotency.WithSealer(readRing(t, ringFile(t, dir, "k1"))))
	record := []string{"inspect", "-scope", "acct_1", "-route", "/payments", "-key", "k-1"}

	t.Setenv(envSealKeys, ringFile(t, dir, "k2", "k1"))
	r := runCmd(tg, record...)
	require.Equal(t, exitFound, r.code, r.stderr)
	require.Equal(t, `{"id":"pay_1","amount":500}`, r.json(t)["body"])

	lacking := ringFile(t, dir, "k2")
	t.Setenv(envSealKeys, lacking)
	r = runCmd(tg, record...)
	require.Equal(t, exitError, r.code)
	require.Contains(t, r.stderr, "which the ring in "+lacking+" does not hold")
}

// ringFile writes a ring of the keys named, the first current, into a new
// file in dir; a key's secret is its id repeated.
func ringFile(t *testing.T, dir string, ids ...string) string {
	t.Helper()
	var src strings.Builder
	for _, id := range ids {
		fmt.Fprintf(&src, "%s %s\n", id, base64.StdEncoding.EncodeToString(bytes.Repeat([]byte(id), seal.KeySize)[:seal.KeySize]))
	}
	f, err := os.CreateTemp(dir, "ring")
	require.NoError(t, err)
	_, err = f.WriteString(src.String())
	require.NoError(t, err)
	require.NoError(t, f.Close())
	return f.Name()
}

func readRing(t *testing.T, path string) *seal.Ring {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	ring, err := seal.ParseRing(f)
	require.NoError(t, err)
	return ring
}
