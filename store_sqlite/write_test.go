package sqlitestore

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
)

// TestOwnerWaitsWhileOthersCommit: with a busy timeout of 200 ms, an
// owner's Complete queued behind another handle's transactions, which hold
// the write lock for 150 ms each, 4 in a row, waits past the busy timeout
// as long as they commit, and completes; behind one transaction that
// holds the lock 600 ms without committing, it gives up with ErrBusy.
func TestOwnerWaitsWhileOthersCommit(t *testing.T) {
	path := testFile(t)
	db, err := Open(t.Context(), path, 200*time.Millisecond)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	s := New(db)
	require.NoError(t, s.Migrate(t.Context()))
	other := openTestDB(t, path)
	_, err = other.Exec(`CREATE TABLE other_writes (n INTEGER)`)
	require.NoError(t, err)

	for _, c := range []struct {
		name    string
		commits int // commits of the other handle while it holds the lock
		want    error
	}{
		{"others commit", 4, nil},
		{"stuck lock", 0, ErrBusy},
	} {
		t.Run(c.name, func(t *testing.T) {
			key := "k-" + c.name
			rec := mustClaim(t, s, key, "owner", time.Minute)
			conn, err := other.Conn(t.Context())
			require.NoError(t, err)
			defer conn.Close()
			_, err = conn.ExecContext(t.Context(), "BEGIN IMMEDIATE")
			require.NoError(t, err)
			held := make(chan struct{})
			go func() {
				defer close(held)
				if c.commits == 0 {
					time.Sleep(600 * time.Millisecond)
				}
				for i := range c.commits {
					time.Sleep(150 * time.Millisecond)
					_, err := conn.ExecContext(context.Background(), "INSERT INTO other_writes VALUES (?)", i)
					assert.NoError(t, err)
					// Committed and begun again in one call, so that the
					// owner finds no moment with the lock free.
					next := "; BEGIN IMMEDIATE"
					if i == c.commits-1 {
						next = ""
					}
					_, err = conn.ExecContext(context.Background(), "COMMIT"+next)
					assert.NoError(t, err)
				}
				if c.commits == 0 {
					_, err := conn.ExecContext(context.Background(), "ROLLBACK")
					assert.NoError(t, err)
				}
			}()
			err = s.Complete(t.Context(), key, rec.Owner, &store.Response{Status: 201}, time.Hour)
			<-held
			if c.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, c.want)
		})
	}
}
