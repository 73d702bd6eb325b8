package storetest

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
)

// RunSteps runs the conformance suite of store.StepStore against the
// stores newStore returns, with Run's rules for newStore. To pass, steps
// saved under a lease come back, in order, to every later claim of the
// key until it completes, and only the key's owner saves them.
func RunSteps(t *testing.T, newStore func(t *testing.T) store.StepStore) {
	runCases(t, newStore, []suiteCase[store.StepStore]{
		{"NewKeyHasNoSteps", testNewKeyHasNoSteps},
		{"StepsOutliveARelease", testStepsOutliveARelease},
		{"StepsOutliveATakeover", testStepsOutliveATakeover},
		{"StaleOwnerSavesNoStep", testStaleOwnerSavesNoStep},
		{"SavingANameAgainChangesNothing", testSavingANameAgainChangesNothing},
		{"CompleteDropsSteps", testCompleteDropsSteps},
		{"StepsAreBounded", testStepsAreBounded},
		{"StepIsOnlyLent", testStepIsOnlyLent},
		{"ConcurrentStepsAllKept", testConcurrentStepsAllKept},
		{"InspectShowsSteps", testInspectShowsSteps},
	})
}

// saveStep saves step for owner of key, requiring no error.
func saveStep(t *testing.T, s store.StepStore, key string, owner store.Lease, step store.Step) {
	t.Helper()
	require.NoError(t, s.SaveStep(t.Context(), key, owner, step), "SaveStep(%q, %q)", key, step.Name)
}

// stepsAfterRelease releases owner's claim of key and returns the steps
// the next claim gets.
func stepsAfterRelease(t *testing.T, s store.StepStore, key string, owner store.Lease) []store.Step {
	t.Helper()
	require.NoError(t, s.Release(t.Context(), key, owner), "Release by the owner")
	rec, claimed, _ := claim(t, s, key, "fp", longLease)
	require.True(t, claimed, "a claim after the release wins")
	return rec.Steps
}

// sampleSteps are steps of every shape: a JSON result, binary bytes, an
// empty result, and a final error.
func sampleSteps() []store.Step {
	binary := make([]byte, 256)
	for i := range binary {
		binary[i] = byte(i)
	}
	return []store.Step{
		{Name: "charge", Result: []byte(`{"id":"ch_1","amount":1250}`)},
		{Name: "binary", Result: binary},
		{Name: "empty", Result: []byte{}},
		{Name: "email", Result: []byte("mailbox full"), Failed: true},
	}
}

// requireSameSteps requires got to be want, in order; an empty result may
// come back as nil.
func requireSameSteps(t *testing.T, want, got []store.Step) {
	t.Helper()
	require.Len(t, got, len(want), "steps recorded: %+v", got)
	for i := range want {
		require.Equal(t, want[i].Name, got[i].Name, "name of step %d", i)
		require.True(t, bytes.Equal(want[i].Result, got[i].Result), "result of step %q: %q", want[i].Name, got[i].Result)
		require.Equal(t, want[i].Failed, got[i].Failed, "Failed of step %q", want[i].Name)
	}
}

// testNewKeyHasNoSteps: the claim of a key never claimed has no steps.
func testNewKeyHasNoSteps(t *testing.T, s store.StepStore) {
	rec, claimed, _ := claim(t, s, "new", "fp", longLease)
	require.True(t, claimed)
	require.Empty(t, rec.Steps)
}

// testStepsOutliveARelease: steps saved before a release come back, in
// the order saved and byte for byte, to the next claim.
func testStepsOutliveARelease(t *testing.T, s store.StepStore) {
	owner := mustClaim(t, s, "released", "fp", longLease)
	for _, step := range sampleSteps() {
		saveStep(t, s, "released", owner, step)
	}
	requireSameSteps(t, sampleSteps(), stepsAfterRelease(t, s, "released", owner))
}

// testStepsOutliveATakeover: steps saved by an owner whose lease lapsed
// come back to the claim that takes the key over, which adds its own.
func testStepsOutliveATakeover(t *testing.T, s store.StepStore) {
	first := mustClaim(t, s, "crashed", "fp", shortLease)
	saveStep(t, s, "crashed", first, sampleSteps()[0])
	sleepPastShortLease()
	rec, claimed, token := claim(t, s, "crashed", "fp", longLease)
	require.True(t, claimed, "the takeover wins")
	requireSameSteps(t, sampleSteps()[:1], rec.Steps)
	second := store.Lease{Token: token, Fence: rec.Owner.Fence}
	saveStep(t, s, "crashed", second, sampleSteps()[1])
	requireSameSteps(t, sampleSteps()[:2], stepsAfterRelease(t, s, "crashed", second))
}

// testStaleOwnerSavesNoStep: after a takeover, and after the key
// completed, the old lease's SaveStep is refused and records nothing.
func testStaleOwnerSavesNoStep(t *testing.T, s store.StepStore) {
	stale, current := takeover(t, s, "crashed")
	requireNotOwner(t, s.SaveStep(t.Context(), "crashed", stale, store.Step{Name: "late", Result: []byte("x")}), "SaveStep")
	require.Empty(t, stepsAfterRelease(t, s, "crashed", current), "steps after a refused SaveStep")

	owner := mustClaim(t, s, "done", "fp", longLease)
	complete(t, s, "done", owner, sampleResponse())
	requireNotOwner(t, s.SaveStep(t.Context(), "done", owner, store.Step{Name: "late"}), "SaveStep after Complete")
	requireNotOwner(t, s.SaveStep(t.Context(), "missing", owner, store.Step{Name: "late"}), "SaveStep on a missing key")
}

// testSavingANameAgainChangesNothing: a step saved twice under one name,
// as a resend after a lost reply is, is kept once, as first saved.
func testSavingANameAgainChangesNothing(t *testing.T, s store.StepStore) {
	owner := mustClaim(t, s, "resent", "fp", longLease)
	saveStep(t, s, "resent", owner, store.Step{Name: "charge", Result: []byte("first")})
	saveStep(t, s, "resent", owner, store.Step{Name: "charge", Result: []byte("second")})
	requireSameSteps(t, []store.Step{{Name: "charge", Result: []byte("first")}}, stepsAfterRelease(t, s, "resent", owner))
}

// testCompleteDropsSteps: once a key completed and its record expired,
// the key's next first claim has no steps.
func testCompleteDropsSteps(t *testing.T, s store.StepStore) {
	owner := mustClaim(t, s, "done", "fp", longLease)
	saveStep(t, s, "done", owner, sampleSteps()[0])
	require.NoError(t, s.Complete(t.Context(), "done", owner, sampleResponse(), shortLease))
	sleepPastShortLease()
	rec, claimed, _ := claim(t, s, "done", "fp", longLease)
	require.True(t, claimed, "a claim after the retention wins")
	require.Empty(t, rec.Steps)
}

// testStepsAreBounded: a result over store.MaxStepBytes, and a step past
// store.MaxSteps, are refused with ErrStepLimit and recorded nowhere.
func testStepsAreBounded(t *testing.T, s store.StepStore) {
	owner := mustClaim(t, s, "bounded", "fp", longLease)
	err := s.SaveStep(t.Context(), "bounded", owner, store.Step{Name: "big", Result: make([]byte, store.MaxStepBytes+1)})
	require.ErrorIs(t, err, store.ErrStepLimit, "a result over MaxStepBytes")
	saveStep(t, s, "bounded", owner, store.Step{Name: "at-the-bound", Result: make([]byte, store.MaxStepBytes)})
	for i := 1; i < store.MaxSteps; i++ {
		saveStep(t, s, "bounded", owner, store.Step{Name: fmt.Sprint("step-", i)})
	}
	err = s.SaveStep(t.Context(), "bounded", owner, store.Step{Name: "one-too-many"})
	require.ErrorIs(t, err, store.ErrStepLimit, "a step past MaxSteps")
	steps := stepsAfterRelease(t, s, "bounded", owner)
	require.Len(t, steps, store.MaxSteps)
	require.Equal(t, "at-the-bound", steps[0].Name)
	require.Len(t, steps[0].Result, store.MaxStepBytes)
}

// testStepIsOnlyLent: changing a step's result after SaveStep returned
// changes nothing the store keeps.
func testStepIsOnlyLent(t *testing.T, s store.StepStore) {
	owner := mustClaim(t, s, "lent", "fp", longLease)
	result := []byte("kept as saved")
	saveStep(t, s, "lent", owner, store.Step{Name: "charge", Result: result})
	copy(result, "CHANGED")
	requireSameSteps(t, []store.Step{{Name: "charge", Result: []byte("kept as saved")}}, stepsAfterRelease(t, s, "lent", owner))
}

// testConcurrentStepsAllKept: goroutines of one owner saving steps of
// their own at once each get theirs kept, once.
func testConcurrentStepsAllKept(t *testing.T, s store.StepStore) {
	owner := mustClaim(t, s, "concurrent", "fp", longLease)
	var wg sync.WaitGroup
	for i := range store.MaxSteps {
		wg.Go(func() {
			name := fmt.Sprint("step-", i)
			for range 2 { // the second is a resend
				if err := s.SaveStep(t.Context(), "concurrent", owner, store.Step{Name: name, Result: []byte(name)}); err != nil {
					t.Errorf("SaveStep(%q): %v", name, err)
				}
			}
		})
	}
	wg.Wait()
	steps := stepsAfterRelease(t, s, "concurrent", owner)
	require.Len(t, steps, store.MaxSteps)
	seen := map[string]bool{}
	for _, step := range steps {
		require.Equal(t, step.Name, string(step.Result), "each step keeps its own result")
		require.False(t, seen[step.Name], "step %q kept twice", step.Name)
		seen[step.Name] = true
	}
}

// testInspectShowsSteps: where the store is also a store.Admin, Inspect
// shows an in-flight record's steps, in the order saved, byte for byte,
// for an operator to see how far a run got.
func testInspectShowsSteps(t *testing.T, s store.StepStore) {
	admin, ok := s.(store.Admin)
	if !ok {
		t.Skip("the store is not a store.Admin")
	}
	owner := mustClaim(t, s, "inspected", "fp", longLease)
	for _, step := range sampleSteps() {
		saveStep(t, s, "inspected", owner, step)
	}
	rec, found := inspect(t, admin, "inspected")
	require.True(t, found)
	requireSameSteps(t, sampleSteps(), rec.Steps)
}
