package store_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/storetest"
)

func TestMemoryStepsConformance(t *testing.T) {
	storetest.RunSteps(t, func(*testing.T) store.StepStore { return store.NewMemory() })
}

// TestMemoryStepRetention: a released key's steps are kept for the step
// retention, then swept; under a live lease they stay past it.
func TestMemoryStepRetention(t *testing.T) {
	step := store.Step{Name: "charge", Result: []byte(`{"id":"ch_1"}`)}
	for _, tc := range []struct {
		name      string
		held      bool // a claim holds the key while the retention passes
		wantSteps int
	}{
		{"released", false, 0},
		{"held", true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := store.NewMemory(store.WithStepRetention(short), store.WithMaxRecords(4))
			owner := claimWith(t, m, "k", time.Minute)
			require.NoError(t, m.SaveStep(t.Context(), "k", owner, step))
			if !tc.held {
				require.NoError(t, m.Release(t.Context(), "k", owner))
			}
			time.Sleep(pastShort)
			for _, key := range []string{"a", "b", "c"} { // new keys make the store sweep
				claimWith(t, m, key, time.Minute)
			}
			if tc.held {
				require.NoError(t, m.Release(t.Context(), "k", owner))
			}
			rec, claimed, err := m.Claim(t.Context(), "k", "fp", "next", time.Minute)
			require.NoError(t, err)
			require.True(t, claimed)
			require.Len(t, rec.Steps, tc.wantSteps)
		})
	}
}

// TestMemoryStepsCountAgainstMaxBytes: steps share the byte cap with
// stored responses, a step past it gets ErrFull, and a forced delete of
// the key frees its steps' bytes.
func TestMemoryStepsCountAgainstMaxBytes(t *testing.T) {
	m := store.NewMemory(store.WithMaxBytes(1000))
	owner := claimWith(t, m, "k", time.Minute)
	require.NoError(t, m.SaveStep(t.Context(), "k", owner, store.Step{Name: "a", Result: make([]byte, 900)}))
	require.ErrorIs(t, m.SaveStep(t.Context(), "k", owner, store.Step{Name: "b", Result: make([]byte, 200)}), store.ErrFull)

	deleted, err := m.Delete(t.Context(), store.HashKey("k"), true)
	require.NoError(t, err)
	require.True(t, deleted)
	other := claimWith(t, m, "other", time.Minute)
	require.NoError(t, m.SaveStep(t.Context(), "other", other, store.Step{Name: "a", Result: make([]byte, 900)}), "the deleted key's bytes are free")
	rec, claimed, err := m.Claim(t.Context(), "k", "fp", "next", time.Minute)
	require.NoError(t, err)
	require.True(t, claimed)
	require.Empty(t, rec.Steps, "a deleted key's steps")
}

// claimWith claims key for lease under a fresh token and returns the lease.
func claimWith(t *testing.T, m *store.Memory, key string, lease time.Duration) store.Lease {
	t.Helper()
	token := "token-" + key
	rec, claimed, err := m.Claim(t.Context(), key, "fp", token, lease)
	require.NoError(t, err)
	require.True(t, claimed, "claim of %q", key)
	return rec.Owner
}
