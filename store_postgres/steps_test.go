package pgstore

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
)

// TestStepsSurviveTheSweeper: a released key's steps stay through sweeps
// for the abandoned retention, and go with its row after it.
func TestStepsSurviveTheSweeper(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		retention time.Duration
		swept     int
		fence     int64
		steps     int
	}{
		{name: "within the abandoned retention", retention: time.Hour, swept: 0, fence: 2, steps: 1},
		{name: "past it", retention: time.Microsecond, swept: 1, fence: 1, steps: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newTestStore(t, WithAbandonedRetention(tc.retention))
			ctx := t.Context()
			rec := mustClaim(t, s, "k", "fp", "first", time.Minute)
			require.NoError(t, s.SaveStep(ctx, "k", rec.Owner, store.Step{Name: "charge", Result: []byte("ch_1")}))
			require.NoError(t, s.Release(ctx, "k", rec.Owner))
			time.Sleep(time.Millisecond)
			assert.Equal(t, tc.swept, mustDeleteExpired(t, s, 10))
			rec = mustClaim(t, s, "k", "fp", "second", time.Minute)
			assert.Equal(t, tc.fence, rec.Owner.Fence)
			assert.Len(t, rec.Steps, tc.steps)
		})
	}
}

// TestStepsOfAnotherRequest: a request of another fingerprint that takes
// a lapsed key over does not get the steps of the one before.
func TestStepsOfAnotherRequest(t *testing.T) {
	t.Parallel()
	s := newTestStore(t)
	ctx := t.Context()
	rec := mustClaim(t, s, "k", "fp", "first", time.Minute)
	require.NoError(t, s.SaveStep(ctx, "k", rec.Owner, store.Step{Name: "charge", Result: []byte("ch_1")}))
	require.NoError(t, s.Release(ctx, "k", rec.Owner))
	rec = mustClaim(t, s, "k", "other fp", "second", time.Minute)
	assert.Equal(t, int64(2), rec.Owner.Fence, "the row is taken over")
	assert.Empty(t, rec.Steps)
}

// TestSaveStepCost: a step costs one statement and one round trip, new
// or sent again.
func TestSaveStepCost(t *testing.T) {
	rt := &roundTrips{}
	s := newTestStoreOn(t, countedPool(t, rt, 1))
	rec := mustClaim(t, s, "k", "fp", "t", time.Minute)
	step := store.Step{Name: "charge", Result: []byte("ch_1")}
	require.NoError(t, s.SaveStep(t.Context(), "k", rec.Owner, step), "warms the statement cache")
	for _, name := range []string{"ledger", "ledger"} {
		statements, writes := rt.during(func() {
			require.NoError(t, s.SaveStep(t.Context(), "k", rec.Owner, store.Step{Name: name}))
		})
		assert.Equal(t, [2]int64{1, 1}, [2]int64{statements, writes}, "statements and writes of SaveStep(%q)", name)
	}
}

// TestInspectShowsSteps: an in-flight record is inspected with its steps.
func TestInspectShowsSteps(t *testing.T) {
	t.Parallel()
	s := newTestStore(t)
	rec := mustClaim(t, s, "k", "fp", "t", time.Minute)
	step := store.Step{Name: "charge", Result: []byte("ch_1")}
	require.NoError(t, s.SaveStep(t.Context(), "k", rec.Owner, step))
	got, found, err := s.Inspect(t.Context(), store.HashKey("k"))
	require.NoError(t, err)
	require.True(t, found)
	assert.Equal(t, []store.Step{step}, got.Steps)
}

func TestStepEncoding(t *testing.T) {
	for _, step := range []store.Step{
		{Name: "charge", Result: []byte(`{"id":"ch_1"}`)},
		{Name: "", Result: []byte{}},
		{Name: "declined", Result: []byte("card declined"), Failed: true},
		{Name: string(make([]byte, 300)), Result: []byte{0, 1, 2}},
	} {
		name, encoded := encodeStep(step)
		require.Equal(t, name, encoded[:len(name)], "the name is the element's start")
		got, err := decodeSteps([][]byte{encoded})
		require.NoError(t, err)
		assert.Equal(t, []store.Step{step}, got)
	}
	for _, bad := range [][]byte{{}, {5, 'a', 'b'}, {1, 'a'}, {1, 'a', 7}} {
		_, err := decodeSteps([][]byte{bad})
		assert.Error(t, err, "%q", bad)
	}
}

// TestSaveStepNeedsAToken: SaveStep refuses the empty token a released
// row keeps without asking the database.
func TestSaveStepNeedsAToken(t *testing.T) {
	s := New(testPool(t))
	err := s.SaveStep(context.Background(), "k", store.Lease{Fence: 1}, store.Step{Name: "x"})
	assert.ErrorIs(t, err, store.ErrNotOwner)
}
