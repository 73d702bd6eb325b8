package mysqlstore

import (
	"context"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
)

// roundTrips counts the round trips of the connections it dials: each time
// a connection reads after it wrote.
type roundTrips struct{ n atomic.Int64 }

func (rt *roundTrips) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &countedConn{Conn: c, rt: rt}, nil
}

type countedConn struct {
	net.Conn
	rt    *roundTrips
	wrote bool
}

func (c *countedConn) Write(b []byte) (int, error) {
	c.wrote = true
	return c.Conn.Write(b)
}

func (c *countedConn) Read(b []byte) (int, error) {
	if c.wrote {
		c.wrote = false
		c.rt.n.Add(1)
	}
	return c.Conn.Read(b)
}

// TestRoundTripsPerRequest: through the middleware, a first request costs
// two round trips (claim, complete), a replay or a request that finds its
// key in flight one, with and without interpolateParams.
func TestRoundTripsPerRequest(t *testing.T) {
	for _, interpolate := range []bool{false, true} {
		cfg := testConfig(t)
		cfg.InterpolateParams = interpolate
		rt := &roundTrips{}
		cfg.DialFunc = rt.dial
		s := newTestStoreOn(t, openDB(t, cfg, 1))
		holding := make(chan struct{})
		release := make(chan struct{})
		h := idempotency.New(idempotency.WithStore(s))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Idempotency-Key") == "held" {
				close(holding)
				<-release
			}
			w.WriteHeader(http.StatusCreated)
		}))
		sendTo(h, "warm-up") // prepares the statements
		sendTo(h, "warm-up")
		count := func(key string) int64 {
			before := rt.n.Load()
			sendTo(h, key)
			return rt.n.Load() - before
		}
		require.EqualValues(t, 2, count("k"), "first request (interpolateParams %v)", interpolate)
		require.EqualValues(t, 1, count("k"), "replay (interpolateParams %v)", interpolate)
		held := make(chan struct{})
		go func() { defer close(held); sendTo(h, "held") }()
		<-holding
		require.EqualValues(t, 1, count("held"), "in flight (interpolateParams %v)", interpolate)
		close(release)
		<-held
	}
}

// TestClaimOfAnExpiredLease: a claim takes over a lapsed lease with a
// higher fence, and the old owner's calls are refused.
func TestClaimOfAnExpiredLease(t *testing.T) {
	s := newTestStore(t)
	old := mustClaim(t, s, "k", "fp", 50*time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	taken := mustClaim(t, s, "k", "fp", longLease)
	require.Greater(t, taken.Owner.Fence, old.Owner.Fence)
	require.ErrorContains(t, s.Complete(context.Background(), "k", old.Owner, nil, longLease), "lease not held")
}

// TestLongToken: a token the table cannot keep is refused before the
// server is asked.
func TestLongToken(t *testing.T) {
	s := New(testDB(t))
	_, _, err := s.Claim(context.Background(), "k", "fp", string(make([]byte, 256)), longLease)
	require.ErrorContains(t, err, "owner token of 256 bytes, over the 255")
}
