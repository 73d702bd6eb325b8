package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseCrashPoint(t *testing.T) {
	for _, c := range []struct {
		flag string
		want crashPoint
		err  string
	}{
		{"charge:30", crashPoint{step: "charge", percent: 30}, ""},
		{"ledger:0", crashPoint{step: "ledger", percent: 0}, ""},
		{"ledger:100", crashPoint{step: "ledger", percent: 100}, ""},
		{"charge", crashPoint{}, "want NAME:PERCENT"},
		{"charge:-1", crashPoint{}, "want NAME:PERCENT"},
		{"charge:x", crashPoint{}, "want NAME:PERCENT"},
		{"email:10", crashPoint{}, `no step "email"; the payment's steps are charge and ledger`},
	} {
		t.Run(c.flag, func(t *testing.T) {
			got, err := parseCrashPoint(c.flag)
			if c.err != "" {
				require.ErrorContains(t, err, c.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.want, got)
		})
	}
}

// TestCrashPointDue: a crash point is due after its own step, in first
// runs only, in about its share of them.
func TestCrashPointDue(t *testing.T) {
	always, never, some := crashPoint{"charge", 100}, crashPoint{"charge", 0}, crashPoint{"charge", 30}
	assert.True(t, always.due("charge", 1))
	assert.False(t, always.due("ledger", 1), "another step")
	assert.False(t, always.due("charge", 2), "a run again, after a takeover")
	assert.False(t, never.due("charge", 1))
	assert.False(t, crashPoint{}.due("charge", 1), "no -crash-after-step")
	due := 0
	for range 10000 {
		if some.due("charge", 1) {
			due++
		}
	}
	assert.InDelta(t, 3000, due, 300, "30%% of first runs")
}
