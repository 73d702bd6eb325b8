package store_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/storetest"
)

// migration returns a migration from a fresh memory store to another, and
// both stores.
func migration() (m store.Admin, old, new *store.Memory) {
	old, new = store.NewMemory(), store.NewMemory()
	return store.Migrate(old, new), old, new
}

func TestMigrateConformance(t *testing.T) {
	storetest.Run(t, func(*testing.T) store.Store { m, _, _ := migration(); return m })
}

func TestMigrateAdminConformance(t *testing.T) {
	storetest.RunAdmin(t, func(*testing.T) store.Admin { m, _, _ := migration(); return m })
}

func TestMigrateWatchConformance(t *testing.T) {
	storetest.RunWatch(t, func(*testing.T) store.Watcher { m, _, _ := migration(); return m.(store.Watcher) })
}

// TestMigrateOldRecords: a key the old store holds is answered from there
// (in flight stays in flight, done is replayed and copied into the new
// store), and a key it does not hold (missing, or a lapsed lease whose
// owner died before the cut) is claimed in the new store, where its
// completion or release then goes.
func TestMigrateOldRecords(t *testing.T) {
	t.Parallel()
	resp := &store.Response{Status: 201, Body: []byte(`{"id":"pay_1"}`)}
	cases := []struct {
		name string
		// prepare puts key's record in the old store.
		prepare func(t *testing.T, old *store.Memory, key string)
		// wantState is the state a migrating claim sees; 0 means it wins.
		wantState store.State
		// wantCopied is the state the new store holds after the claim.
		wantCopied store.State
	}{
		{"missing", func(*testing.T, *store.Memory, string) {}, 0, store.StateInFlight},
		{"in flight", func(t *testing.T, old *store.Memory, key string) {
			mustClaim(t, old, key, lease)
		}, store.StateInFlight, 0},
		{"completed", func(t *testing.T, old *store.Memory, key string) {
			require.NoError(t, old.Complete(t.Context(), key, mustClaim(t, old, key, lease), resp, retention))
		}, store.StateCompleted, store.StateCompleted},
		{"not replayable", func(t *testing.T, old *store.Memory, key string) {
			require.NoError(t, old.Complete(t.Context(), key, mustClaim(t, old, key, lease), nil, retention))
		}, store.StateUnreplayable, store.StateUnreplayable},
		{"lapsed lease", func(t *testing.T, old *store.Memory, key string) {
			mustClaim(t, old, key, short)
			time.Sleep(pastShort)
		}, 0, store.StateInFlight},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, old, new := migration()
			tc.prepare(t, old, "k")
			rec, claimed, err := m.Claim(t.Context(), "k", "fp-k", rand.Text(), lease)
			require.NoError(t, err)
			if tc.wantState == 0 {
				require.True(t, claimed, "a key the old store does not hold is claimed; got %+v", rec)
			} else {
				require.False(t, claimed)
				require.Equal(t, tc.wantState, rec.State)
				require.Equal(t, "fp-k", rec.Fingerprint)
				require.Empty(t, rec.Owner.Token)
			}
			if tc.wantState == store.StateCompleted {
				require.Equal(t, resp.Body, rec.Response.Body)
			}
			copied, found, err := new.Inspect(t.Context(), store.HashKey("k"))
			require.NoError(t, err)
			require.Equal(t, tc.wantCopied != 0, found, "the new store holds the key: %+v", copied)
			if found {
				require.Equal(t, tc.wantCopied, copied.State)
				require.Equal(t, "fp-k", copied.Fingerprint)
				require.Equal(t, rec.Response, copied.Response, "the copy holds the old store's response")
				require.LessOrEqual(t, copied.TTL, retention, "a copy keeps the retention it had left")
			}
		})
	}
}

// TestMigrateLeaseOps: a migrating claim of a key whose old lease lapsed
// is the new store's, marked in the old store (taking the lapsed record
// over there, so that the old store's fence grows); renewing, completing
// and releasing it act on both.
func TestMigrateLeaseOps(t *testing.T) {
	t.Parallel()
	resp := &store.Response{Status: 201, Body: []byte("done")}
	cases := []struct {
		name string
		end  func(ctx context.Context, s store.Store, owner store.Lease) error
		// want is the state of both stores' records after end; 0 means
		// none.
		want store.State
	}{
		{"complete", func(ctx context.Context, s store.Store, owner store.Lease) error {
			return s.Complete(ctx, "k", owner, resp, retention)
		}, store.StateCompleted},
		{"release", func(ctx context.Context, s store.Store, owner store.Lease) error {
			return s.Release(ctx, "k", owner)
		}, 0},
		{"renew", func(ctx context.Context, s store.Store, owner store.Lease) error {
			return s.Renew(ctx, "k", owner, lease)
		}, store.StateInFlight},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, old, new := migration()
			dead := mustClaim(t, old, "k", short)
			time.Sleep(pastShort)
			rec, claimed, err := m.Claim(t.Context(), "k", "fp-k", rand.Text(), short)
			require.NoError(t, err)
			require.True(t, claimed)
			marker, found, err := old.Inspect(t.Context(), store.HashKey("k"))
			require.NoError(t, err)
			require.True(t, found, "the claim is marked in the old store")
			require.Greater(t, marker.Owner.Fence, dead.Fence, "the marker took the lapsed lease over")
			require.NoError(t, tc.end(t.Context(), m, rec.Owner))

			for name, s := range map[string]*store.Memory{"new": new, "old": old} {
				got, found, err := s.Inspect(t.Context(), store.HashKey("k"))
				require.NoError(t, err)
				require.Equal(t, tc.want != 0, found, "the %s store holds a record", name)
				require.Equal(t, tc.want, got.State, "the %s store's record", name)
				switch tc.want {
				case store.StateInFlight:
					require.Greater(t, got.TTL, short, "the renewal reached the %s store", name)
				case store.StateCompleted:
					require.Equal(t, resp.Body, got.Response.Body, "the %s store's response", name)
				}
			}
		})
	}
}

// TestMigrateStaleMarker: a marker left in flight in the old store after
// its claim completed in the new store (the old store did not get the
// Complete) does not hold the key off: duplicates replay the new store's
// record.
func TestMigrateStaleMarker(t *testing.T) {
	t.Parallel()
	m, old, new := migration()
	ctx := t.Context()
	owner := mustClaim(t, new, "k", lease)
	require.NoError(t, new.Complete(ctx, "k", owner, &store.Response{Status: 201, Body: []byte("done")}, retention))
	mustClaim(t, old, "k", lease)
	rec, claimed, err := m.Claim(ctx, "k", "fp-k", rand.Text(), lease)
	require.NoError(t, err)
	require.False(t, claimed)
	require.Equal(t, store.StateCompleted, rec.State)
	require.Equal(t, "done", string(rec.Response.Body))
}

// TestMigrateRacesRunOnce: workers racing for one key through two
// migrating stores over the same two stores (two processes in the cut)
// and on the old store alone (an old version still deployed) claim it once
// in all, whatever the old store holds, and a key done in the old store is
// replayed to every one of them.
func TestMigrateRacesRunOnce(t *testing.T) {
	t.Parallel()
	const racers, rounds = 24, 50
	cases := []struct {
		name       string
		prepare    func(t *testing.T, old *store.Memory, key string)
		lapse      bool // sleep past a short lease after preparing
		wantWinner bool
		wantReplay bool
	}{
		{"missing", func(*testing.T, *store.Memory, string) {}, false, true, false},
		{"completed in the old store", func(t *testing.T, old *store.Memory, key string) {
			resp := &store.Response{Status: 201, Body: []byte(key)}
			require.NoError(t, old.Complete(t.Context(), key, mustClaim(t, old, key, lease), resp, retention))
		}, false, false, true},
		{"in flight in the old store", func(t *testing.T, old *store.Memory, key string) {
			mustClaim(t, old, key, lease)
		}, false, false, false},
		{"lapsed in the old store", func(t *testing.T, old *store.Memory, key string) {
			mustClaim(t, old, key, short)
		}, true, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			old, new := store.NewMemory(), store.NewMemory()
			workers := []store.Store{store.Migrate(old, new), store.Migrate(old, new), old}
			for round := range rounds {
				tc.prepare(t, old, fmt.Sprint("k", round))
			}
			if tc.lapse {
				time.Sleep(pastShort)
			}
			for round := range rounds {
				key := fmt.Sprint("k", round)
				var won, replayed atomic.Int32
				storetest.Together(racers, func(i int) {
					rec, claimed, err := workers[i%len(workers)].Claim(t.Context(), key, "fp-"+key, rand.Text(), lease)
					require.NoError(t, err)
					switch {
					case claimed:
						won.Add(1)
					case rec.State == store.StateCompleted:
						require.Equal(t, key, string(rec.Response.Body))
						replayed.Add(1)
					}
				})
				if tc.wantWinner {
					require.Equal(t, int32(1), won.Load(), "claims of %q won", key)
				} else {
					require.Zero(t, won.Load(), "claims of %q won", key)
				}
				if tc.wantReplay {
					require.Equal(t, int32(racers), replayed.Load())
					copied, found, err := new.Inspect(t.Context(), store.HashKey(key))
					require.NoError(t, err)
					require.True(t, found)
					require.Equal(t, key, string(copied.Response.Body), "copied once, intact")
				}
			}
		})
	}
}

// oldWriter is a new store that, on each Claim, first lets a worker still
// running on the old store alone claim the key there: the rolling deploy's
// race between a migrating worker's look into the old store and its claim.
type oldWriter struct {
	*store.Memory
	old *store.Memory
}

func (w oldWriter) Claim(ctx context.Context, key, fingerprint, token string, lease time.Duration) (store.Record, bool, error) {
	if _, _, err := w.old.Claim(ctx, key, "fp-old", rand.Text(), lease); err != nil {
		return store.Record{}, false, err
	}
	return w.Memory.Claim(ctx, key, fingerprint, token, lease)
}

// TestMigrateOldWriterFirst: a key an old-version worker claims in the old
// store after the migrating claim looked there, but before it marked it
// there, loses the migrating claim (the old writer's record is returned)
// and leaves the new store without a record.
func TestMigrateOldWriterFirst(t *testing.T) {
	t.Parallel()
	old, new := store.NewMemory(), store.NewMemory()
	m := store.Migrate(old, oldWriter{Memory: new, old: old})
	rec, claimed, err := m.Claim(t.Context(), "k", "fp-k", rand.Text(), lease)
	require.NoError(t, err)
	require.False(t, claimed)
	require.Equal(t, store.StateInFlight, rec.State)
	require.Equal(t, "fp-old", rec.Fingerprint)
	_, found, err := new.Inspect(t.Context(), store.HashKey("k"))
	require.NoError(t, err)
	require.False(t, found, "the new store's claim is undone")
}

// TestMigrateOldWritersSeeTheClaim: a worker still running on the old
// store alone finds a migrating claim's key in flight, then replays its
// response.
func TestMigrateOldWritersSeeTheClaim(t *testing.T) {
	t.Parallel()
	m, old, _ := migration()
	ctx := t.Context()
	rec, claimed, err := m.Claim(ctx, "k", "fp-k", rand.Text(), lease)
	require.NoError(t, err)
	require.True(t, claimed)
	got, claimed := claim(t, old, "k", lease)
	require.False(t, claimed, "the old store holds the key")
	require.Equal(t, store.StateInFlight, got.State)

	require.NoError(t, m.Complete(ctx, "k", rec.Owner, &store.Response{Status: 201, Body: []byte("paid")}, retention))
	got, claimed = claim(t, old, "k", lease)
	require.False(t, claimed)
	require.Equal(t, store.StateCompleted, got.State)
	require.Equal(t, "paid", string(got.Response.Body))
}

// TestMigrateAdmin: Inspect and Find see the records of both stores, the
// new store's first; Delete deletes from both.
func TestMigrateAdmin(t *testing.T) {
	t.Parallel()
	m, old, new := migration()
	ctx := t.Context()
	require.NoError(t, old.Complete(ctx, "both", mustClaim(t, old, "both", lease), nil, retention))
	require.NoError(t, new.Complete(ctx, "both", mustClaim(t, new, "both", lease), &store.Response{Status: 201}, retention))
	require.NoError(t, old.Complete(ctx, "old", mustClaim(t, old, "old", lease), nil, retention))
	mustClaim(t, new, "new", lease)

	rec, found, err := m.Inspect(ctx, store.HashKey("both"))
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, store.StateCompleted, rec.State, "the new store's record comes first")
	rec, found, err = m.Inspect(ctx, store.HashKey("old"))
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, store.StateUnreplayable, rec.State)

	hashes, err := m.Find(ctx, "", 10)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{store.HashKey("both"), store.HashKey("old"), store.HashKey("new")}, hashes)
	hashes, err = m.Find(ctx, "", 2)
	require.NoError(t, err)
	require.Len(t, hashes, 2)

	_, err = m.Delete(ctx, store.HashKey("new"), false)
	require.ErrorIs(t, err, store.ErrLeaseLive)
	deleted, err := m.Delete(ctx, store.HashKey("both"), false)
	require.NoError(t, err)
	require.True(t, deleted)
	for _, s := range []*store.Memory{old, new} {
		_, found, err := s.Inspect(ctx, store.HashKey("both"))
		require.NoError(t, err)
		require.False(t, found, "deleted from both stores")
	}
}

// TestMigrateWatch: a key in flight in the old store is watched there, and
// one claimed through the migration in the new store.
func TestMigrateWatch(t *testing.T) {
	t.Parallel()
	m, old, _ := migration()
	w := m.(store.Watcher)
	ctx := t.Context()
	owner := mustClaim(t, old, "old", lease)
	changed := storetest.MustWatch(t, w, "old")
	require.False(t, storetest.ClosedWithin(changed, storetest.QuietFor), "in flight in the old store")
	require.NoError(t, old.Complete(ctx, "old", owner, nil, retention))
	require.True(t, storetest.ClosedWithin(changed, storetest.WakeWithin), "completed in the old store")

	rec, claimed, err := m.Claim(ctx, "new", "fp-new", rand.Text(), lease)
	require.NoError(t, err)
	require.True(t, claimed)
	changed = storetest.MustWatch(t, w, "new")
	require.False(t, storetest.ClosedWithin(changed, storetest.QuietFor), "in flight in the new store")
	require.NoError(t, m.Release(ctx, "new", rec.Owner))
	require.True(t, storetest.ClosedWithin(changed, storetest.WakeWithin), "released in the new store")
}

// down is a memory store whose Ping fails.
type down struct{ *store.Memory }

var errDown = errors.New("down")

func (down) Ping(context.Context) error { return errDown }

// TestMigratePing: a migration answers while both stores do, and fails
// when either does, naming it.
func TestMigratePing(t *testing.T) {
	cases := []struct {
		name     string
		old, new store.Admin
		want     string
	}{
		{"both answer", store.NewMemory(), store.NewMemory(), ""},
		{"old down", down{store.NewMemory()}, store.NewMemory(), "the old store"},
		{"new down", store.NewMemory(), down{store.NewMemory()}, "the new store"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := store.Migrate(tc.old, tc.new).(store.Pinger).Ping(t.Context())
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, errDown)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestMigratePanicsOnBadInput(t *testing.T) {
	m := store.NewMemory()
	require.PanicsWithValue(t, "store: Migrate expects two different stores, got one store twice", func() { store.Migrate(m, m) })
	require.PanicsWithValue(t, "store: Migrate expects two stores, got nil", func() { store.Migrate(nil, m) })
	require.NotPanics(t, func() { store.Migrate(m, store.NewMemory()) })
}
