package store_test

import (
	"crypto/rand"
	"fmt"
	"math"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/storetest"
)

const (
	lease     = time.Minute
	retention = time.Hour
	// short is a lease or retention meant to expire during a test, long
	// enough for the calls that must see it live to come first even on a
	// loaded machine; pastShort is well past it.
	short     = 250 * time.Millisecond
	pastShort = 600 * time.Millisecond
)

func TestMemoryConformance(t *testing.T) {
	storetest.Run(t, func(*testing.T) store.Store { return store.NewMemory() })
}

func TestMemoryTombstoneConformance(t *testing.T) {
	storetest.RunTombstones(t, func(*testing.T) store.Store { return store.NewMemory(store.WithTombstones(storetest.TombstoneTime)) })
}

func TestMemoryWatchConformance(t *testing.T) {
	storetest.RunWatch(t, func(*testing.T) store.Watcher { return store.NewMemory() })
}

// TestMemoryUnwatchedKeysAllocateNothing: claiming, releasing and
// completing a key nobody watches allocates nothing for watches, whether
// or not another key is watched: the hot path of the default store pays
// for wake-ups only when a caller waits.
func TestMemoryUnwatchedKeysAllocateNothing(t *testing.T) {
	resp := &store.Response{Status: http.StatusCreated, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte("{}")}
	for _, watched := range []bool{false, true} {
		t.Run(fmt.Sprint("another key watched: ", watched), func(t *testing.T) {
			m := store.NewMemory()
			ctx := t.Context()
			if watched {
				mustClaim(t, m, "watched", lease)
				_ = storetest.MustWatch(t, m, "watched")
			}
			allocs := testing.AllocsPerRun(100, func() {
				rec, _, _ := m.Claim(ctx, "k", "fp", "token", lease)
				_ = m.Release(ctx, "k", rec.Owner)
				rec, _, _ = m.Claim(ctx, "k", "fp", "token", lease)
				_ = m.Complete(ctx, "k", rec.Owner, resp, 0) // the next Claim takes the expired record over
			})
			require.Zero(t, allocs)
		})
	}
}

// tokenLen is the length of the tokens claim draws (rand.Text).
const tokenLen = 26

// claim claims key on m with a fresh token and requires no error.
func claim(t *testing.T, m *store.Memory, key string, d time.Duration) (store.Record, bool) {
	t.Helper()
	rec, ok, err := m.Claim(t.Context(), key, "fp-"+key, rand.Text(), d)
	require.NoError(t, err)
	return rec, ok
}

// mustClaim claims key on m, requires the claim to win, and returns the lease.
func mustClaim(t *testing.T, m *store.Memory, key string, d time.Duration) store.Lease {
	t.Helper()
	rec, ok := claim(t, m, key, d)
	require.True(t, ok, "claim on %q must win", key)
	return rec.Owner
}

// completeBody claims key, completes it with a 201 carrying body for
// retention, and returns the record a duplicate's claim then sees.
func completeBody(t *testing.T, m *store.Memory, key string, body []byte, retention time.Duration) store.Record {
	t.Helper()
	owner := mustClaim(t, m, key, lease)
	require.NoError(t, m.Complete(t.Context(), key, owner, &store.Response{Status: 201, Body: body}, retention))
	rec, ok := claim(t, m, key, lease)
	require.False(t, ok)
	return rec
}

// requireFull requires a claim on the new key to fail with ErrFull.
func requireFull(t *testing.T, m *store.Memory, key string) {
	t.Helper()
	_, ok, err := m.Claim(t.Context(), key, "fp", "token", lease)
	require.ErrorIs(t, err, store.ErrFull)
	require.False(t, ok)
}

func TestMemoryFencing(t *testing.T) {
	t.Parallel()
	m := store.NewMemory()
	ctx := t.Context()

	first := mustClaim(t, m, "k", short)
	require.Equal(t, int64(1), first.Fence, "a new key starts at 1")
	time.Sleep(pastShort)
	second := mustClaim(t, m, "k", short)
	require.Equal(t, int64(2), second.Fence, "a takeover is the previous fence + 1")
	time.Sleep(pastShort)
	third := mustClaim(t, m, "k", lease)
	require.Equal(t, int64(3), third.Fence)

	require.NoError(t, m.Complete(ctx, "k", third, nil, short))
	time.Sleep(pastShort)
	fourth := mustClaim(t, m, "k", lease)
	require.Equal(t, int64(4), fourth.Fence, "an expired completed record not yet swept is taken over in place")

	require.NoError(t, m.Release(ctx, "k", fourth))
	require.Equal(t, int64(5), mustClaim(t, m, "k", lease).Fence, "fences keep growing after a release")
	require.Equal(t, int64(6), mustClaim(t, m, "other", lease).Fence, "one counter for the whole store")

	// A dead owner's key swept to make room is taken over with a higher fence.
	swept := store.NewMemory(store.WithMaxRecords(1))
	dead := mustClaim(t, swept, "k", short)
	time.Sleep(pastShort)
	filler := mustClaim(t, swept, "filler", lease) // sweeps "k" to make room
	require.Equal(t, 1, store.MemoryLen(swept))
	require.NoError(t, swept.Release(ctx, "filler", filler))
	require.Greater(t, mustClaim(t, swept, "k", lease).Fence, dead.Fence)
}

func TestMemoryLapsedOwnerMayFinish(t *testing.T) {
	t.Parallel()
	m := store.NewMemory()
	ctx := t.Context()
	renewed := mustClaim(t, m, "renewed", short)
	completed := mustClaim(t, m, "completed", short)
	time.Sleep(pastShort)

	require.NoError(t, m.Renew(ctx, "renewed", renewed, lease), "nobody took the key over")
	rec, ok := claim(t, m, "renewed", lease)
	require.False(t, ok)
	require.Equal(t, store.StateInFlight, rec.State)

	require.NoError(t, m.Complete(ctx, "completed", completed, &store.Response{Status: http.StatusOK}, retention))
	rec, ok = claim(t, m, "completed", lease)
	require.False(t, ok)
	require.Equal(t, store.StateCompleted, rec.State)
}

// TestMemoryLapsedOwnerFinishesThroughASweep: the owner of a lapsed lease
// completes its key even when the sweep that its Complete makes, to find
// room for the response, removes the record: the key is done (here not
// replayable, the response being too large still), never free to run
// again.
func TestMemoryLapsedOwnerFinishesThroughASweep(t *testing.T) {
	t.Parallel()
	m := store.NewMemory(store.WithMaxBytes(100))
	owner := mustClaim(t, m, "k", short)
	time.Sleep(pastShort)
	require.NoError(t, m.Complete(t.Context(), "k", owner, &store.Response{Status: http.StatusOK, Body: make([]byte, 101)}, retention))
	rec, ok := claim(t, m, "k", lease)
	require.False(t, ok, "the key is done")
	require.Equal(t, store.StateUnreplayable, rec.State)
	require.Equal(t, 1, store.MemoryLen(m))
}

// TestMemoryPing: a store answers its health call, full of live records
// too (a full store still replays and decides duplicates).
func TestMemoryPing(t *testing.T) {
	m := store.NewMemory(store.WithMaxRecords(1))
	require.NoError(t, m.Ping(t.Context()))
	mustClaim(t, m, "a", lease)
	requireFull(t, m, "b")
	require.NoError(t, m.Ping(t.Context()))
}

func TestMemoryFullOfLiveRecords(t *testing.T) {
	t.Parallel()
	m := store.NewMemory(store.WithMaxRecords(3))
	ctx := t.Context()
	a := mustClaim(t, m, "a", lease)
	b := mustClaim(t, m, "b", lease)
	mustClaim(t, m, "c", lease)
	requireFull(t, m, "d")

	rec, ok := claim(t, m, "a", lease)
	require.False(t, ok, "a key already present is claimed as usual")
	require.Equal(t, store.StateInFlight, rec.State)
	require.NoError(t, m.Renew(ctx, "a", a, lease))
	require.NoError(t, m.Complete(ctx, "a", a, &store.Response{Status: http.StatusOK}, retention))
	requireFull(t, m, "d")

	require.NoError(t, m.Release(ctx, "b", b))
	mustClaim(t, m, "d", lease)
	requireFull(t, m, "e")
	require.Equal(t, 3, store.MemoryLen(m))
}

func TestMemoryExpiredRecordsMakeRoom(t *testing.T) {
	t.Parallel()
	ok := &store.Response{Status: http.StatusOK}
	// Each case leaves the key "expiring" with a short time left, set by
	// the call the case names, after a long lease.
	cases := map[string]func(t *testing.T, m *store.Memory){
		"claim": func(t *testing.T, m *store.Memory) {
			mustClaim(t, m, "expiring", short)
		},
		"renew": func(t *testing.T, m *store.Memory) {
			owner := mustClaim(t, m, "expiring", lease)
			require.NoError(t, m.Renew(t.Context(), "expiring", owner, short))
		},
		"complete": func(t *testing.T, m *store.Memory) {
			owner := mustClaim(t, m, "expiring", lease)
			require.NoError(t, m.Complete(t.Context(), "expiring", owner, ok, short))
		},
		"complete-unreplayable": func(t *testing.T, m *store.Memory) {
			owner := mustClaim(t, m, "expiring", lease)
			require.NoError(t, m.Complete(t.Context(), "expiring", owner, nil, short))
		},
	}
	for name, expire := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			m := store.NewMemory(store.WithMaxRecords(3))
			mustClaim(t, m, "live", lease)
			done := mustClaim(t, m, "done", lease)
			require.NoError(t, m.Complete(t.Context(), "done", done, ok, retention))
			expire(t, m)
			requireFull(t, m, "new-1")

			time.Sleep(pastShort)
			mustClaim(t, m, "new-1", lease)
			requireFull(t, m, "new-2")
			rec, claimed := claim(t, m, "live", lease)
			require.False(t, claimed, "the sweep keeps live records")
			require.Equal(t, store.StateInFlight, rec.State)
			rec, claimed = claim(t, m, "done", lease)
			require.False(t, claimed, "the sweep keeps live records")
			require.Equal(t, store.StateCompleted, rec.State)
		})
	}
}

func TestMemorySweepsBeforeFull(t *testing.T) {
	t.Parallel()
	m := store.NewMemory()
	for i := range 100 {
		mustClaim(t, m, fmt.Sprint("old-", i), short)
	}
	mustClaim(t, m, "live", lease)
	time.Sleep(pastShort)
	for i := range 60 {
		mustClaim(t, m, fmt.Sprint("new-", i), lease)
	}
	require.Equal(t, 61, store.MemoryLen(m), "expired records are swept long before the store is full")
	rec, ok := claim(t, m, "live", lease)
	require.False(t, ok)
	require.Equal(t, store.StateInFlight, rec.State)
}

func TestMemoryHugeDurations(t *testing.T) {
	t.Parallel()
	m := store.NewMemory()
	forever := time.Duration(math.MaxInt64)
	owner := mustClaim(t, m, "k", forever)
	require.NoError(t, m.Renew(t.Context(), "k", owner, forever))
	rec, ok := claim(t, m, "k", lease)
	require.False(t, ok, "a lease that would overflow the clock never ends")
	require.Positive(t, rec.TTL)

	require.NoError(t, m.Complete(t.Context(), "k", owner, nil, forever))
	rec, ok = claim(t, m, "k", lease)
	require.False(t, ok)
	require.Equal(t, store.StateUnreplayable, rec.State)
	require.Positive(t, rec.TTL)
}

func TestWithMaxRecordsPanicsOnBadInput(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, -1} {
		require.PanicsWithValue(t, "store: WithMaxRecords expects n > 0", func() { store.WithMaxRecords(n) })
	}
}

func TestMemoryByteCap(t *testing.T) {
	t.Parallel()
	m := store.NewMemory(store.WithMaxBytes(1000))
	complete := func(key string, body []byte, retention time.Duration) store.Record {
		t.Helper()
		return completeBody(t, m, key, body, retention)
	}
	require.Equal(t, store.StateCompleted, complete("small", make([]byte, 600), time.Second).State)
	rec := complete("no-room", make([]byte, 600), time.Hour)
	require.Equal(t, store.StateUnreplayable, rec.State, "over the cap: done, not replayable")
	require.Nil(t, rec.Response)

	time.Sleep(1200 * time.Millisecond) // "small" expires; its bytes are freed by a sweep
	require.Equal(t, store.StateCompleted, complete("fits-again", make([]byte, 900), time.Hour).State)
	require.Equal(t, store.StateUnreplayable, complete("too-big", make([]byte, 1001), time.Hour).State)
}

// TestMemoryCopiesTheBody: the store keeps a copy of the body it is given,
// counting its length, not its array's capacity, against the byte cap; the
// caller may reuse its array once Complete returns. Duplicates get a body
// capped at its length, so that an append by one cannot write into what
// the others share.
func TestMemoryCopiesTheBody(t *testing.T) {
	t.Parallel()
	m := store.NewMemory(store.WithMaxBytes(100))
	complete := func(key string, body []byte) store.Record {
		t.Helper()
		return completeBody(t, m, key, body, retention)
	}
	require.Equal(t, store.StateCompleted, complete("roomy", make([]byte, 10, 101)).State,
		"10 bytes in an array of 101 fit a cap of 100")

	body := append(make([]byte, 0, 64), "paid"...)
	rec := complete("spare", body)
	require.Equal(t, store.StateCompleted, rec.State)
	copy(body, "lost") // the caller reuses its array
	require.Equal(t, len(rec.Response.Body), cap(rec.Response.Body), "the returned body is capped")
	_ = append(rec.Response.Body, " twice"...)
	again, _ := claim(t, m, "spare", lease)
	require.Equal(t, "paid", string(again.Response.Body))
}

// TestMemoryCountsDecodedResponses: the decoded response the store keeps
// for every duplicate counts against WithMaxBytes, and is freed with its
// record; a store with no room left for it decodes for each duplicate
// instead of keeping one.
func TestMemoryCountsDecodedResponses(t *testing.T) {
	t.Parallel()
	header := http.Header{"Content-Type": {"application/json"}, "Location": {"/payments/1"}, "Link": {"</a>", "</b>"}}
	completeWithHeader := func(m *store.Memory, key string, retention time.Duration) {
		t.Helper()
		owner := mustClaim(t, m, key, lease)
		resp := &store.Response{Status: 201, Header: header.Clone(), Body: make([]byte, 100)}
		require.NoError(t, m.Complete(t.Context(), key, owner, resp, retention))
	}

	roomy := store.NewMemory(store.WithMaxBytes(10_000))
	completeWithHeader(roomy, "k", short)
	stored := store.MemoryBytes(roomy)
	first, _ := claim(t, roomy, "k", lease)
	withDecoded := store.MemoryBytes(roomy)
	require.Greater(t, withDecoded, stored+len("application/json/payments/1</a></b>"), "the decoded copy is counted")
	second, _ := claim(t, roomy, "k", lease)
	require.Same(t, first.Response, second.Response, "one decoded response, shared")
	require.Equal(t, withDecoded, store.MemoryBytes(roomy))
	time.Sleep(pastShort)
	mustClaim(t, roomy, "k", lease) // takes over the expired record
	require.Zero(t, store.MemoryBytes(roomy), "the record's bytes, decoded copy included, are freed")

	full := store.NewMemory(store.WithMaxBytes(stored))
	completeWithHeader(full, "k", retention)
	first, _ = claim(t, full, "k", lease)
	second, _ = claim(t, full, "k", lease)
	require.NotSame(t, first.Response, second.Response, "no room to keep a decoded copy")
	require.Equal(t, first.Response, second.Response)
	require.Equal(t, stored, store.MemoryBytes(full))
}

func TestWithMaxBytesPanicsOnBadInput(t *testing.T) {
	t.Parallel()
	require.PanicsWithValue(t, "store: WithMaxBytes expects n > 0", func() { store.WithMaxBytes(0) })
}

// BenchmarkMemory measures the store's share of the middleware's cost: a
// first request (claim a new key, complete it with a 1 KiB JSON response)
// and a duplicate (claim a completed key, which returns the stored response).
func BenchmarkMemory(b *testing.B) {
	resp := &store.Response{
		Status: http.StatusCreated,
		Header: http.Header{"Content-Type": {"application/json"}, "Location": {"/payments/pay_1"}},
		Body:   make([]byte, 1024),
	}
	b.Run("claim+complete", func(b *testing.B) {
		// A fresh store per batch of keys keeps the map's size realistic
		// and the keys new; making the keys is not measured.
		keys := make([]string, 1<<12)
		for i := range keys {
			keys[i] = fmt.Sprint("key-", i)
		}
		ctx := b.Context()
		var m *store.Memory
		i := 0
		b.ReportAllocs()
		for b.Loop() {
			if i%len(keys) == 0 {
				b.StopTimer()
				m = store.NewMemory()
				b.StartTimer()
			}
			key := keys[i%len(keys)]
			i++
			rec, ok, err := m.Claim(ctx, key, "fp", "token", lease)
			if err != nil || !ok {
				b.Fatal(ok, err)
			}
			if err := m.Complete(ctx, key, rec.Owner, resp, retention); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("claim-on-completed", func(b *testing.B) {
		ctx := b.Context()
		m := store.NewMemory()
		rec, _, _ := m.Claim(ctx, "key", "fp", "token", lease)
		if err := m.Complete(ctx, "key", rec.Owner, resp, retention); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			rec, ok, err := m.Claim(ctx, "key", "fp", "other", lease)
			if err != nil || ok || rec.Response == nil {
				b.Fatal(ok, err)
			}
		}
	})
}

// heapInUse returns the bytes of live heap objects after a collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestMemoryDecodedEstimateCoversTheHeap: what the store counts for the
// decoded copies it keeps is at least what they hold on the heap, for one
// header name up to sixty, around the sizes where a map grows. The test is
// not parallel, so nothing else allocates while it measures.
func TestMemoryDecodedEstimateCoversTheHeap(t *testing.T) {
	headers := map[string]http.Header{
		"1": {"Content-Type": {"application/json"}},
		"3": {"Content-Type": {"application/json"}, "Location": {"/payments/1"}, "Link": {"</a>", "</b>"}},
	}
	for _, names := range []int{8, 9, 12, 15, 16, 29, 57, 60} {
		many := http.Header{}
		for i := range names {
			many.Set(fmt.Sprintf("X-Header-%02d", i), "value")
		}
		headers[fmt.Sprint(names)] = many
	}
	for name, header := range headers {
		t.Run(name+" names", func(t *testing.T) {
			const n = 3000
			m := store.NewMemory(store.WithMaxRecords(n), store.WithMaxBytes(math.MaxInt))
			for i := range n {
				key := fmt.Sprint("k", i)
				owner := mustClaim(t, m, key, lease)
				resp := &store.Response{Status: 201, Header: header.Clone(), Body: make([]byte, 64)}
				require.NoError(t, m.Complete(t.Context(), key, owner, resp, retention))
			}
			countedBefore, heapBefore := store.MemoryBytes(m), heapInUse()
			for i := range n {
				claim(t, m, fmt.Sprint("k", i), lease) // the first duplicate: decoded and kept
			}
			counted := store.MemoryBytes(m) - countedBefore
			held := int(heapInUse() - heapBefore)
			runtime.KeepAlive(m)
			t.Logf("per record: %d bytes held, %d counted", held/n, counted/n)
			require.LessOrEqual(t, held, counted)
		})
	}
}

// TestMemoryKeepsNoCallerString: a completed record keeps no string the
// caller passed: not the key of the Complete (nor of the Claim before it),
// nor, once it has decoded the response, that of a duplicate's Claim. Each
// key here is a substring of a 1 MiB string, so keeping one keeps a MiB;
// the records themselves hold a few hundred bytes each. The test is not
// parallel, so nothing else allocates while it measures.
func TestMemoryKeepsNoCallerString(t *testing.T) {
	const n, mib = 40, 1 << 20
	keyIn := func(i int) string { return (fmt.Sprintf("key-%03d-", i) + strings.Repeat("k", mib))[:64] }
	m := store.NewMemory()
	requireHeld := func(before uint64, what string) {
		t.Helper()
		held := int(heapInUse() - before)
		require.Less(t, held, n*mib/4, "%d records hold %d bytes: the keys of %s are kept", n, held, what)
	}
	before := heapInUse()
	for i := range n {
		owner := mustClaim(t, m, keyIn(i), lease)
		resp := &store.Response{Status: 201, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte("{}")}
		require.NoError(t, m.Complete(t.Context(), keyIn(i), owner, resp, retention))
	}
	requireHeld(before, "the claims or completes")
	for i := range n {
		rec, ok := claim(t, m, keyIn(i), lease) // a duplicate: decodes and keeps the response
		require.False(t, ok)
		require.Equal(t, "{}", string(rec.Response.Body))
	}
	requireHeld(before, "the duplicates")
	runtime.KeepAlive(m)
}

// TestMemoryHeaderValueKeepsOnlyItself: a header value a duplicate got
// (as a connection's HPACK table keeps the values it sent) keeps a few
// bytes alive after its record is swept, not the record's body.
func TestMemoryHeaderValueKeepsOnlyItself(t *testing.T) {
	const body = 8 << 20
	m := store.NewMemory(store.WithMaxBytes(4 * body))
	owner := mustClaim(t, m, "k", lease)
	resp := &store.Response{Status: 200, Header: http.Header{"Etag": {`"v1"`}}, Body: make([]byte, body)}
	require.NoError(t, m.Complete(t.Context(), "k", owner, resp, short))
	etag := func() string {
		rec, _ := claim(t, m, "k", lease)
		return rec.Response.Header["Etag"][0]
	}()
	time.Sleep(pastShort)
	mustClaim(t, m, "k", lease) // takes over the expired record, dropping it
	require.Zero(t, store.MemoryBytes(m))
	held := heapInUse()
	require.Less(t, held, uint64(body/2), "an ETag value of %d bytes holds %d bytes after its record was dropped", len(etag), held)
	runtime.KeepAlive(etag)
}
