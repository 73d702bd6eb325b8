package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestUsageErrors: a command line that names no store or not exactly one
// record exits 2, saying why, and touches no store.
func TestUsageErrors(t *testing.T) {
	store := []string{"-store", "sqlite", "-url", "/nonexistent/records.db"}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no subcommand", nil, "usage: idempotency inspect|delete"},
		{"unknown subcommand", []string{"list"}, "usage: idempotency inspect|delete"},
		{"no store", []string{"inspect", "-url", "x", "-job", "j"}, `-store "": want one of `},
		{"unknown store", []string{"inspect", "-store", "mongo", "-url", "x", "-job", "j"}, `-store "mongo"`},
		{"no url", []string{"inspect", "-store", "redis", "-job", "j"}, "-url is required"},
		{"no record", append([]string{"inspect"}, store...), "name one record"},
		{"two records", append([]string{"inspect", "-job", "j", "-hash", "ab"}, store...), "name one record"},
		{"key without route", append([]string{"inspect", "-key", "k"}, store...), "-route and -key are both required"},
		{"upper-case hash", append([]string{"inspect", "-hash", "AB"}, store...), `-hash "AB"`},
		{"force on inspect", append([]string{"inspect", "-force", "-job", "j"}, store...), "flag provided but not defined: -force"},
		{"argument left", append([]string{"delete", "-job", "j"}, append(store, "extra")...), `unexpected argument "extra"`},
		{"bad timeout", append([]string{"delete", "-job", "j", "-timeout", "0s"}, store...), "-timeout must be above 0"},
		{"bad table", append([]string{"inspect", "-job", "j", "-table", "Keys; DROP"}, store...), `-table "Keys; DROP"`},
		{"bad schema", append([]string{"inspect", "-job", "j", "-schema", "1s"}, store...), `-schema "1s"`},
		{"scope with hash", append([]string{"inspect", "-hash", "ab", "-scope", "acct"}, store...), "name one record"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr strings.Builder
			require.Equal(t, exitUsage, run(tc.args, &stdout, &stderr))
			require.Contains(t, stderr.String(), tc.want)
			require.Empty(t, stdout.String())
		})
	}
}
