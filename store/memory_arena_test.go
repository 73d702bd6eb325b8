package store_test

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
)

// chunkSize is the size of the arena's chunks, as the store sets it.
const chunkSize = 64 << 10

// TestMemoryArenaCompacts: records kept long, one in ten among records
// that expire soon, do not keep alive the chunks they shared with them.
// Once the short ones are swept the arena holds at most twice the long
// ones' bytes and four chunks, and every long record still replays its
// own body, decoded from the data where it was moved (no duplicate came
// before); a fingerprint a caller was given before the records moved has
// not changed.
func TestMemoryArenaCompacts(t *testing.T) {
	t.Parallel()
	const n = 1000
	m := store.NewMemory(store.WithMaxBytes(math.MaxInt))
	body := func(i int) []byte { return []byte(fmt.Sprintf("%04d", i) + strings.Repeat("b", 1020)) }
	for i := range n {
		d := short
		if i%10 == 0 {
			d = retention
		}
		key := fmt.Sprint("k", i)
		owner := mustClaim(t, m, key, lease)
		require.NoError(t, m.Complete(t.Context(), key, owner, &store.Response{Status: 201, Body: body(i)}, d))
	}
	before, _ := store.MemoryArena(m)
	require.Greater(t, before, n*1024, "every body in the arena")
	given, _ := claim(t, m, "k0", lease)

	time.Sleep(pastShort)
	mustClaim(t, m, "new", lease) // the first new key sweeps
	require.Equal(t, n/10+1, store.MemoryLen(m), "the short records are swept")
	held, live := store.MemoryArena(m)
	require.Greater(t, live, n/10*1024)
	require.LessOrEqual(t, held, 2*live+4*chunkSize, "%d records' data of %d bytes keep %d bytes of chunks", n/10, live, held)

	for i := n; i < 2*n; i++ { // new records fill new chunks
		completeBody(t, m, fmt.Sprint("k", i), body(i), retention)
	}
	for i := 10; i < n; i += 10 { // k0 was decoded before the move
		rec, claimed := claim(t, m, fmt.Sprint("k", i), lease)
		require.False(t, claimed)
		require.Equal(t, string(body(i)), string(rec.Response.Body))
		require.Equal(t, "fp-"+fmt.Sprint("k", i), rec.Fingerprint)
	}
	require.Equal(t, "fp-k0", given.Fingerprint)
}

// TestMemoryArenaLargeResponse: data larger than a quarter chunk gets a
// chunk of its own, even when the chunk being filled has room for it, and
// that chunk goes with its record: once the record has been taken over,
// the arena holds only the chunk of the small record beside it.
func TestMemoryArenaLargeResponse(t *testing.T) {
	t.Parallel()
	m := store.NewMemory(store.WithMaxBytes(math.MaxInt))
	completeBody(t, m, "small", []byte("x"), retention)
	_, small := store.MemoryArena(m)
	big := []byte(strings.Repeat("x", 20<<10)) // over a quarter chunk, under the room left
	rec := completeBody(t, m, "big", big, short)
	require.Equal(t, big, rec.Response.Body)
	held, live := store.MemoryArena(m)
	require.Equal(t, small+tokenLen+len("big")+len("fp-big")+len(big), live)
	require.Greater(t, held, chunkSize+len(big), "a chunk of its own")
	require.Less(t, held, chunkSize+(live-small)*9/8, "of about the data's size")

	time.Sleep(pastShort)
	mustClaim(t, m, "big", lease) // takes the expired record over
	held, live = store.MemoryArena(m)
	require.Equal(t, chunkSize, held)
	require.Equal(t, small, live)
}

// TestMemoryLongKeys: a key over 63 bytes is kept as its SHA-256 in hex, so
// a record holds 64 bytes of key however long the caller's is (a route as
// the client sent it), and the key still counts against WithMaxBytes;
// long keys that differ in their last byte stay apart, and so do a long
// key and the hash of it sent as a key.
func TestMemoryLongKeys(t *testing.T) {
	t.Parallel()
	m := store.NewMemory(store.WithMaxBytes(math.MaxInt))
	long := strings.Repeat("/payments", 1000)
	keys := []string{long + "a", long + "b", store.HashKey(long + "a"), strings.Repeat("k", 63), strings.Repeat("k", 64)}
	for _, key := range keys {
		completeBody(t, m, key, []byte("body of "+key), retention)
	}
	for _, key := range keys {
		rec, claimed := claim(t, m, key, lease)
		require.False(t, claimed)
		require.Equal(t, "body of "+key, string(rec.Response.Body))
		require.Equal(t, "fp-"+key, rec.Fingerprint)
	}
	want := 0 // each record's token, kept key, fingerprint and body
	for _, key := range keys {
		want += tokenLen + min(len(key), 64) + len("fp-"+key) + len("body of "+key)
	}
	_, live := store.MemoryArena(m)
	require.Equal(t, want, live, "no record keeps a key of more than 64 bytes")

	capped := store.NewMemory(store.WithMaxBytes(100))
	require.Equal(t, store.StateUnreplayable, completeBody(t, capped, strings.Repeat("k", 60), nil, retention).State,
		"60 bytes of key and 63 of fingerprint go over a cap of 100")
}
