package main

import (
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
)

// TestBinary builds the command and runs it as an operator would, on an
// SQLite file: its exit statuses are 2 for a usage error, 3 for a record
// that is absent, 0 for one found, and its output is one JSON object.
func TestBinary(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("the go command is not on PATH")
	}
	bin := filepath.Join(t.TempDir(), "idempotency")
	build := exec.Command("go", "build", "-o", bin, ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)

	flags, s := sqliteTarget(t)
	body := pay(t, s, "acct_1", "k-1")
	inspect := append([]string{"inspect", "-scope", "acct_1", "-route", "/payments"}, flags...)
	cases := []struct {
		name string
		args []string
		code int
	}{
		{"usage", []string{"inspect"}, exitUsage},
		{"absent", append(inspect, "-key", "k-2"), exitAbsent},
		{"found", append(inspect, "-key", "k-1"), exitFound},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			stdout, err := exec.Command(bin, tc.args...).Output()
			code := 0
			if exit := (*exec.ExitError)(nil); errors.As(err, &exit) {
				code = exit.ExitCode()
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, tc.code, code, "exit status; stderr %s", stderrOf(err))
			if code == exitFound {
				var rec map[string]any
				require.NoError(t, json.Unmarshal(stdout, &rec))
				require.Equal(t, store.HashKey(idempotency.StorageKey("acct_1", "POST", "/payments", "k-1")), rec["hash"])
				require.Equal(t, body, rec["body"])
			}
		})
	}
}

// stderrOf returns what a failed command wrote to its standard error.
func stderrOf(err error) string {
	if exit := (*exec.ExitError)(nil); errors.As(err, &exit) {
		return string(exit.Stderr)
	}
	return ""
}
