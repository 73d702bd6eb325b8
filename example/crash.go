package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
)

// crashExit is the status a worker exits with when -crash-after-step makes
// it crash.
const crashExit = 3

// crashPoint is -crash-after-step NAME:PERCENT: the worker exits at once,
// with crashExit, right after step NAME of a payment is stored, in PERCENT
// of the payments' first runs (fence 1), so that the run again (a retry
// on the restarted worker, a takeover) has a finished step to resume
// from. The zero crashPoint never crashes.
type crashPoint struct {
	step    string
	percent int
}

// crashSteps are the steps -crash-after-step may name.
var crashSteps = []string{"charge", "ledger"}

// parseCrashPoint parses -crash-after-step's NAME:PERCENT.
func parseCrashPoint(v string) (crashPoint, error) {
	name, percent, ok := strings.Cut(v, ":")
	n, err := strconv.Atoi(percent)
	if !ok || err != nil || n < 0 || n > 100 {
		return crashPoint{}, fmt.Errorf("%q: want NAME:PERCENT, PERCENT from 0 to 100", v)
	}
	for _, s := range crashSteps {
		if name == s {
			return crashPoint{step: name, percent: n}, nil
		}
	}
	return crashPoint{}, fmt.Errorf("%q: no step %q; the payment's steps are %s", v, name, strings.Join(crashSteps, " and "))
}

// due reports whether to crash after step in a run of fence.
func (c crashPoint) due(step string, fence int64) bool {
	return c.step == step && fence == 1 && rand.IntN(100) < c.percent
}

// crashAfter exits the process at once if a.crash is due after step in a
// run of fence: no deferred call runs, as in a real crash.
func (a *api) crashAfter(step string, fence int64) {
	if a.crash.due(step, fence) {
		a.log.Warn("crashing after a step, as -crash-after-step asks", "step", step, "pid", os.Getpid())
		os.Exit(crashExit)
	}
}
