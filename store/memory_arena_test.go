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
// own body; a fingerprint a caller was given before the records moved has
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
		completeBody(t, m, fmt.Sprint("k", i), body(i), d)
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
	for i := 0; i < n; i += 10 {
		rec, claimed := claim(t, m, fmt.Sprint("k", i), lease)
		require.False(t, claimed)
		require.Equal(t, string(body(i)), string(rec.Response.Body))
		require.Equal(t, "fp-"+fmt.Sprint("k", i), rec.Fingerprint)
	}
	require.Equal(t, "fp-k0", given.Fingerprint)
}

// TestMemoryArenaLargeResponse: a body larger than a quarter chunk gets a
// chunk of its own, which goes with its record: the arena holds nothing
// once the record has been taken over.
func TestMemoryArenaLargeResponse(t *testing.T) {
	t.Parallel()
	m := store.NewMemory(store.WithMaxBytes(math.MaxInt))
	big := []byte(strings.Repeat("x", 3*chunkSize))
	rec := completeBody(t, m, "big", big, short)
	require.Equal(t, big, rec.Response.Body)
	held, live := store.MemoryArena(m)
	require.Equal(t, len(big)+len("big")+len("fp-big"), live)
	require.Less(t, held, live+live/8, "a chunk of the data's size")

	time.Sleep(pastShort)
	mustClaim(t, m, "big", lease) // takes the expired record over
	held, live = store.MemoryArena(m)
	require.Zero(t, held)
	require.Zero(t, live)
}
