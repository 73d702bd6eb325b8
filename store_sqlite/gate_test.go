package sqlitestore

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGateHoldsOffOtherProcessesClaims: while an owner's write of this
// process waits for the file (the gate entered), a helper process's claim
// of a free key stands back, and claims the key once the owner is done.
func TestGateHoldsOffOtherProcessesClaims(t *testing.T) {
	path := testFile(t)
	s := newTestStoreOn(t, path)
	h := startHelper(t, path)
	mustClaim(t, h, "warm", "helper", time.Minute) // the helper's gate is open

	conn, err := s.db.Conn(t.Context())
	require.NoError(t, err)
	g := s.openGate(t.Context(), conn)
	require.NoError(t, conn.Close())
	require.NotEmpty(t, g.path, "a gate across processes")
	g.enter()
	replied := make(chan Reply, 1)
	go func() {
		r, err := h.call("Claim", Call{Key: "k", Fingerprint: "fp", Token: "helper", Lease: time.Minute})
		assert.NoError(t, err)
		replied <- r
	}()
	select {
	case r := <-replied:
		g.leave()
		t.Fatalf("the claim did not stand back for the waiting owner: %+v", r)
	case <-time.After(300 * time.Millisecond):
	}
	g.leave()
	r := <-replied
	require.Empty(t, r.Err)
	assert.True(t, r.Claimed, "claimed once the owner is done")
}
