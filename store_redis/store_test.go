package redisstore_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/storetest"
	"github.com/seed43327c4c/idempotency/store/storetest/tcpproxy"
	redisstore "github.com/seed43327c4c/idempotency/store_redis"
)

// TestAwkwardKeys: keys that hold braces, percent signs or zero bytes, are
// empty, or are long work on a Cluster (each script's two keys stay in one
// slot) and never collide with one another.
func TestAwkwardKeys(t *testing.T) {
	keys := []string{"", "{", "}", "}{", "{}", "{a}b", "a{b}", "%", "%7B", "%257B", "%%", "plain",
		"\x00", "\x00\x04POST", strings.Repeat("k", 4096)}
	forEachServer(t, func(t *testing.T, client redis.UniversalClient) {
		s, _ := newStore(t, client)
		ctx := t.Context()
		for _, key := range keys {
			rec, claimed, err := s.Claim(ctx, key, "fp "+key, "token "+key, time.Minute)
			require.NoError(t, err, "Claim(%q)", key)
			require.True(t, claimed, "Claim(%q) must win: no other key may share its record", key)
			resp := &store.Response{Status: http.StatusCreated, Body: []byte("body " + key)}
			require.NoError(t, s.Complete(ctx, key, rec.Owner, resp, time.Minute), "Complete(%q)", key)
		}
		for _, key := range keys {
			rec, claimed, err := s.Claim(ctx, key, "other", "another token", time.Minute)
			require.NoError(t, err, "Claim(%q)", key)
			require.False(t, claimed, "Claim(%q) again", key)
			assert.Equal(t, "fp "+key, rec.Fingerprint, "key %q", key)
			require.NotNil(t, rec.Response, "key %q", key)
			assert.Equal(t, "body "+key, string(rec.Response.Body), "key %q", key)
		}
	})
}

// TestEveryKeyExpires: a record is one key, in flight, done or released,
// and carries an expiry; the in-flight record outlives its lease by the
// abandoned retention, a released one included.
func TestEveryKeyExpires(t *testing.T) {
	forEachServer(t, func(t *testing.T, client redis.UniversalClient) {
		s, prefix := newStore(t, client, redisstore.WithAbandonedRetention(time.Hour))
		ctx := t.Context()
		rec, _, err := s.Claim(ctx, "running", "fp", "token", time.Minute)
		require.NoError(t, err)
		done, _, err := s.Claim(ctx, "done", "fp", "token", time.Minute)
		require.NoError(t, err)
		require.NoError(t, s.Complete(ctx, "done", done.Owner, nil, 2*time.Hour))

		ttls := keyTTLs(t, client, prefix)
		require.Len(t, ttls, 2, "an in-flight record and a done record, one key each: %v", ttls)
		inFlight := ttls[recordKey(prefix, "running")]
		assert.Greater(t, inFlight, time.Hour, "an in-flight record outlives its lease")
		assert.LessOrEqual(t, inFlight, time.Hour+time.Minute)
		assert.Greater(t, ttls[recordKey(prefix, "done")], time.Hour, "a done record is kept for its retention")
		assert.LessOrEqual(t, ttls[recordKey(prefix, "done")], 2*time.Hour)

		require.NoError(t, s.Release(ctx, "running", rec.Owner))
		ttls = keyTTLs(t, client, prefix)
		assert.Len(t, ttls, 2, "Release keeps the record: %v", ttls)
		assert.Greater(t, ttls[recordKey(prefix, "running")], time.Hour, "a released record keeps its expiry")
	})
}

// keyTTLs returns the time left on every key under prefix.
func keyTTLs(t *testing.T, client redis.UniversalClient, prefix string) map[string]time.Duration {
	t.Helper()
	ttls := make(chan map[string]time.Duration, 16)
	require.NoError(t, forEachNode(t.Context(), client, func(ctx context.Context, node *redis.Client) error {
		keys, err := node.Keys(ctx, prefix+"*").Result()
		m := make(map[string]time.Duration)
		for _, key := range keys {
			m[key] = node.PTTL(ctx, key).Val()
		}
		ttls <- m
		return err
	}))
	close(ttls)
	all := make(map[string]time.Duration)
	for m := range ttls {
		for k, v := range m {
			all[k] = v
		}
	}
	return all
}

// TestStaleCompleteChangesNothing: after a takeover, the stale owner's
// Complete is refused, and the record the new owner holds is, field for
// field and in its expiry, what it was before it.
func TestStaleCompleteChangesNothing(t *testing.T) {
	forEachServer(t, func(t *testing.T, client redis.UniversalClient) {
		s, prefix := newStore(t, client)
		ctx := t.Context()
		stale, _ := lapsedTakeover(t, s, s, "pay")

		record := recordKey(prefix, "pay")
		before := client.Get(ctx, record).Val()
		require.Equal(t, "1,2,86400000,0,0,10,7,0;fp-currentcurrent", before)

		resp := &store.Response{Status: http.StatusCreated, Body: []byte("stale")}
		require.ErrorIs(t, s.Complete(ctx, "pay", stale, resp, time.Hour), store.ErrNotOwner)
		require.ErrorIs(t, s.Complete(ctx, "pay", stale, nil, time.Hour), store.ErrNotOwner)

		assert.Equal(t, before, client.Get(ctx, record).Val(), "the record is untouched")
		assert.Greater(t, client.PTTL(ctx, record).Val(), 24*time.Hour+30*time.Second, "the lease is not shortened")
	})
}

// TestFenceGrowsAcrossTakeovers: each takeover of a lapsed lease gets the
// next fencing number, and once the abandoned retention is over too the
// key is forgotten and starts again at 1.
func TestFenceGrowsAcrossTakeovers(t *testing.T) {
	forEachServer(t, func(t *testing.T, client redis.UniversalClient) {
		const lease = 50 * time.Millisecond
		s, _ := newStore(t, client, redisstore.WithAbandonedRetention(2*time.Second))
		ctx := t.Context()
		for want := int64(1); want <= 3; want++ {
			rec, claimed, err := s.Claim(ctx, "crashy", "fp", "token", lease)
			require.NoError(t, err)
			require.True(t, claimed)
			require.Equal(t, want, rec.Owner.Fence, "takeover %d", want)
			time.Sleep(4 * lease)
		}
		time.Sleep(2500 * time.Millisecond)
		rec, claimed, err := s.Claim(ctx, "crashy", "fp", "token", lease)
		require.NoError(t, err)
		require.True(t, claimed)
		assert.Equal(t, int64(1), rec.Owner.Fence, "an abandoned record is forgotten after its retention")
	})
}

// TestUnreachableServer: when Redis cannot be reached, every method
// returns an error that wraps the driver's, prefixed with the package
// name, and never store.ErrNotOwner.
func TestUnreachableServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	s := redisstore.New(client)
	ctx := t.Context()
	owner := store.Lease{Token: "token", Fence: 1}

	_, _, claimErr := s.Claim(ctx, "key", "fp", "token", time.Minute)
	for op, err := range map[string]error{
		"Claim":    claimErr,
		"Renew":    s.Renew(ctx, "key", owner, time.Minute),
		"Complete": s.Complete(ctx, "key", owner, nil, time.Hour),
		"Release":  s.Release(ctx, "key", owner),
	} {
		t.Run(op, func(t *testing.T) {
			var opErr *net.OpError
			require.ErrorAs(t, err, &opErr, "%s wraps the dial error", op)
			assert.NotErrorIs(t, err, store.ErrNotOwner, op)
			assert.Regexp(t, `^redisstore: \w+: `, err.Error(), op)
		})
	}
}

// deafClient is New's panic for a client whose calls a stalled connection
// holds past their context's deadline.
const deafClient = "redisstore: New expects a client with ContextTimeoutEnabled: true, without which a stalled connection ignores the middleware's deadlines"

// TestMisconfigurationPanics: New and the options panic, naming the
// package, on values that cannot work.
func TestMisconfigurationPanics(t *testing.T) {
	client := redis.NewClient(&redis.Options{ContextTimeoutEnabled: true})
	deaf := []redis.UniversalClient{redis.NewClient(&redis.Options{}),
		redis.NewClusterClient(&redis.ClusterOptions{}), redis.NewRing(&redis.RingOptions{})}
	t.Cleanup(func() {
		for _, c := range append(deaf, client) {
			_ = c.Close()
		}
	})
	for _, tc := range []struct {
		name, panic string
		build       func()
	}{
		{"nil client", "redisstore: New expects a non-nil client",
			func() { redisstore.New(nil) }},
		{"braces in the prefix", "redisstore: WithPrefix expects a prefix without '{' or '}'",
			func() { redisstore.New(client, redisstore.WithPrefix("app{1}:")) }},
		{"no abandoned retention", "redisstore: WithAbandonedRetention expects d > 0",
			func() { redisstore.New(client, redisstore.WithAbandonedRetention(0)) }},
		{"a client that ignores deadlines", deafClient,
			func() { redisstore.New(deaf[0]) }},
		{"a Cluster client that ignores deadlines", deafClient,
			func() { redisstore.New(deaf[1]) }},
		{"a Ring that ignores deadlines", deafClient,
			func() { redisstore.New(deaf[2]) }},
	} {
		t.Run(tc.name, func(t *testing.T) { assert.PanicsWithValue(t, tc.panic, tc.build) })
	}
}

// TestCorruptRecord: a value the store did not write (a stray HSET or
// SET, a half-restored backup) makes Claim return an error, never panic
// or invent a response, whether the claim's SET or its script reads it.
func TestCorruptRecord(t *testing.T) {
	forEachServer(t, func(t *testing.T, client redis.UniversalClient) {
		s, prefix := newStore(t, client)
		scripted := redisstore.ScriptedClaims(redisstore.New(client, redisstore.WithPrefix(prefix)))
		ctx := t.Context()
		t.Run("a-hash", func(t *testing.T) {
			require.NoError(t, client.HSet(ctx, recordKey(prefix, "a-hash"), "state", "2", "fp", "fp", "fence", "1").Err())
			requireClaimFails(t, s, "a-hash")
			requireClaimFails(t, scripted, "a-hash")
		})
		for key, value := range map[string]string{
			"not-a-record":      "paid",
			"string-bad-header": "2,1,0,0,201,2,0,1;fp\x05",
			"string-too-short":  "2,1,0,0,201,20,0,0;fp",
			"string-overflow":   "2,1,0,0,201,9223372036854775807,1,0;fp",
			"string-state-0":    "0,1,0,0,201,2,0,0;fp",
			"string-state-7":    "7,1,0,0,201,2,0,0;fp",
			"string-plus-sign":  "2,+1,0,0,201,2,0,0;fp",
			"string-state-01":   "01,1,0,0,201,2,0,0;fp",
			"string-waited-2":   "2,1,0,2,201,2,0,0;fp",
			"string-long-fence": "2,1234567890123456,0,0,201,2,0,0;fp",
		} {
			t.Run(key, func(t *testing.T) {
				require.NoError(t, client.Set(ctx, recordKey(prefix, key), value, time.Minute).Err())
				requireClaimFails(t, s, key)
				requireClaimFails(t, scripted, key)
			})
		}
	})
}

// TestFullMemoryStillReplays: on a server whose memory is full, with
// maxmemory-policy noeviction, a claim of a new key fails, as every write
// does, while a duplicate of a completed key is still answered: the SET
// the server refuses leaves the claim to the script, which only reads.
func TestFullMemoryStillReplays(t *testing.T) {
	client := startRedis(t, freePort(t), "maxmemory-policy noeviction\n").client(t)
	s := redisstore.New(client) // on a server of the test's own, gone when it ends
	owner := claim(t, s, "done")
	require.NoError(t, s.Complete(t.Context(), "done", owner, &store.Response{Status: http.StatusCreated, Body: []byte("paid")}, time.Hour))
	require.NoError(t, client.ConfigSet(t.Context(), "maxmemory", "1").Err())
	rec, claimed, err := s.Claim(t.Context(), "done", "fp", "another", time.Minute)
	require.NoError(t, err)
	require.False(t, claimed)
	require.NotNil(t, rec.Response)
	require.Equal(t, "paid", string(rec.Response.Body))
	_, _, err = s.Claim(t.Context(), "new", "fp", "another", time.Minute)
	require.ErrorContains(t, err, "OOM")
}

// TestFullMemoryStillRecordsOutcomes: on a server whose memory filled up
// (maxmemory-policy noeviction) while requests ran, their owners still
// renew, complete and release their keys, so that a duplicate replays the
// response instead of running the request again once the lease lapses.
func TestFullMemoryStillRecordsOutcomes(t *testing.T) {
	client := startRedis(t, freePort(t), "maxmemory-policy noeviction\n").client(t)
	s := redisstore.New(client) // on a server of the test's own, gone when it ends
	ctx := t.Context()
	paid, refused := claim(t, s, "paid"), claim(t, s, "refused")
	require.NoError(t, client.ConfigSet(ctx, "maxmemory", "1").Err())
	require.NoError(t, s.Renew(ctx, "paid", paid, time.Minute))
	require.NoError(t, s.Release(ctx, "refused", refused))
	require.NoError(t, s.Complete(ctx, "paid", paid, &store.Response{Status: http.StatusCreated, Body: []byte("paid")}, time.Hour))
	rec, claimed, err := s.Claim(ctx, "paid", "fp", "another", time.Minute)
	require.NoError(t, err)
	require.False(t, claimed)
	require.NotNil(t, rec.Response)
	require.Equal(t, "paid", string(rec.Response.Body))
}

// TestFullMemoryReleaseKeepsAnExpiry: a release under full memory in a
// record's last millisecond, when it has 0 ms left, still leaves the
// record (or nothing) with an expiry, never a record that stays for good.
// Forty releases, each a little later in its record's 2 ms life.
func TestFullMemoryReleaseKeepsAnExpiry(t *testing.T) {
	client := startRedis(t, freePort(t), "maxmemory-policy noeviction\n").client(t)
	s := redisstore.New(client, redisstore.WithAbandonedRetention(time.Millisecond))
	ctx := t.Context()
	for i := range 40 {
		key := strconv.Itoa(i)
		require.NoError(t, client.ConfigSet(ctx, "maxmemory", "0").Err())
		rec, claimed, err := s.Claim(ctx, key, "fp", "owner", time.Millisecond)
		require.NoError(t, err)
		require.True(t, claimed)
		require.NoError(t, client.ConfigSet(ctx, "maxmemory", "1").Err())
		time.Sleep(time.Duration(i%20) * 100 * time.Microsecond)
		_ = s.Release(ctx, key, rec.Owner) // refused once the lease has lapsed
	}
	require.NoError(t, client.ConfigSet(ctx, "maxmemory", "0").Err())
	keys, err := client.Keys(ctx, "*").Result()
	require.NoError(t, err)
	for _, k := range keys {
		// -1 is no expiry; 0 ms left, or the key gone since KEYS (-2), is fine.
		require.NotEqual(t, time.Duration(-1), client.PTTL(ctx, k).Val(), "%s has no expiry", k)
	}
}

// TestLargeFence: a takeover that raises a fencing number to 10^14 writes
// it in full, so that its owner completes the record and duplicates
// replay it; the claim script writes the number itself.
func TestLargeFence(t *testing.T) {
	client := standalone(t)
	s, prefix := newStore(t, client)
	ctx := t.Context()
	released := "1,99999999999999,60000,0,0,2,0,0;fp"
	require.NoError(t, client.Set(ctx, recordKey(prefix, "pay"), released, time.Minute).Err())
	rec, claimed, err := s.Claim(ctx, "pay", "fp", "new", time.Minute)
	require.NoError(t, err)
	require.True(t, claimed, "the released key is taken over")
	require.EqualValues(t, int64(100_000_000_000_000), rec.Owner.Fence)
	require.NoError(t, s.Complete(ctx, "pay", rec.Owner, &store.Response{Status: http.StatusCreated}, time.Minute))
	done, claimed, err := s.Claim(ctx, "pay", "fp", "another", time.Minute)
	require.NoError(t, err)
	require.False(t, claimed)
	require.Equal(t, rec.Owner.Fence, done.Owner.Fence)
}

// requireClaimFails requires a Claim of key to return an error and no
// record.
func requireClaimFails(t *testing.T, s *redisstore.Store, key string) {
	t.Helper()
	rec, claimed, err := s.Claim(t.Context(), key, "fp", "token", time.Minute)
	require.Error(t, err, key)
	assert.Regexp(t, `^redisstore: claim: `, err.Error(), key)
	assert.False(t, claimed, key)
	assert.Equal(t, store.Record{}, rec, key)
}

// TestLongestAbandonedRetention: an abandoned retention as long as a
// time.Duration goes does not overflow into a record that expires at once
// while its lease still runs, which would let a second claim win.
func TestLongestAbandonedRetention(t *testing.T) {
	forEachServer(t, func(t *testing.T, client redis.UniversalClient) {
		s, _ := newStore(t, client, redisstore.WithAbandonedRetention(math.MaxInt64))
		ctx := t.Context()
		first, claimed, err := s.Claim(ctx, "pay", "fp", "first", 30*time.Second)
		require.NoError(t, err)
		require.True(t, claimed)
		require.NoError(t, s.Renew(ctx, "pay", first.Owner, 30*time.Second))
		time.Sleep(20 * time.Millisecond)
		_, claimed, err = s.Claim(ctx, "pay", "fp", "second", 30*time.Second)
		require.NoError(t, err)
		require.False(t, claimed, "a second claim won while the first one's lease runs")
	})
}

// TestConformance runs the shared store suite against standalone Redis and
// against a Redis Cluster.
func TestConformance(t *testing.T) {
	forEachServer(t, func(t *testing.T, client redis.UniversalClient) {
		storetest.Run(t, func(t *testing.T) store.Store {
			s, _ := newStore(t, client)
			return s
		})
	})
}

// lossyConn is a connection to the real Redis that loses the reply to the
// first call of the store (a claim's SET, or a script's EVALSHA) written
// once armed: the call reaches the server and runs, then the connection
// drops, as a network blip or a proxy's idle kill would do. go-redis then
// sends the call again on a new connection, as it does by default
// (MaxRetries 3).
type lossyConn struct {
	net.Conn
	armed   *atomic.Bool
	dropped bool
}

func (c *lossyConn) Write(b []byte) (int, error) {
	lower := bytes.ToLower(b)
	call := bytes.Contains(lower, []byte("evalsha")) || bytes.Contains(lower, []byte("$3\r\nset\r\n"))
	if call && c.armed.CompareAndSwap(true, false) {
		c.dropped = true
	}
	return c.Conn.Write(b)
}

func (c *lossyConn) Read(b []byte) (int, error) {
	if c.dropped {
		time.Sleep(200 * time.Millisecond) // the script runs on the server meanwhile
		_ = c.Conn.Close()
		return 0, io.EOF
	}
	return c.Conn.Read(b)
}

// lossyClient returns a client for REDIS_URL whose connections lose one
// reply after armed is set; it skips the test when REDIS_URL is unset.
func lossyClient(t *testing.T, armed *atomic.Bool) redis.UniversalClient {
	t.Helper()
	return standaloneWith(t, func(opts *redis.Options) {
		opts.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := new(net.Dialer).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &lossyConn{Conn: conn, armed: armed}, nil
		}
	})
}

// TestClaimSentAgainAfterALostReply: when the reply to a winning Claim is
// lost and go-redis sends the call again, the second run finds the key in
// flight under the caller's own token and reports it claimed, with the
// same fencing number: the request runs, instead of being told the key is
// in flight and leaving it locked for a whole lease with nobody running.
func TestClaimSentAgainAfterALostReply(t *testing.T) {
	armed := new(atomic.Bool)
	s, _ := newStore(t, lossyClient(t, armed))
	ctx := t.Context()
	_, _, err := s.Claim(ctx, "warm-up", "fp", "token-0", time.Minute) // loads the script
	require.NoError(t, err)

	armed.Store(true)
	rec, claimed, err := s.Claim(ctx, "pay", "fp", "token-1", time.Minute)
	require.NoError(t, err)
	require.False(t, armed.Load(), "the reply was lost")
	require.True(t, claimed, "the caller's own claim, sent again: %+v", rec)
	require.Equal(t, "token-1", rec.Owner.Token)
	require.EqualValues(t, 1, rec.Owner.Fence)
	require.NoError(t, s.Complete(ctx, "pay", rec.Owner, nil, time.Minute), "the caller holds the key")

	_, claimed, err = s.Claim(ctx, "pay", "fp", "token-2", time.Minute)
	require.NoError(t, err)
	require.False(t, claimed, "another request's claim still finds the key taken")
}

// TestCompleteSentAgainAfterALostReply: when the reply to a Complete is
// lost and go-redis sends the call again, the second run finds the record
// completed under the caller's own lease and succeeds, changing nothing:
// the response stays the first one.
func TestCompleteSentAgainAfterALostReply(t *testing.T) {
	armed := new(atomic.Bool)
	s, _ := newStore(t, lossyClient(t, armed))
	ctx := t.Context()
	warm, _, err := s.Claim(ctx, "warm-up", "fp", "token-0", time.Minute)
	require.NoError(t, err)
	require.NoError(t, s.Complete(ctx, "warm-up", warm.Owner, nil, time.Minute)) // loads the script
	rec, claimed, err := s.Claim(ctx, "pay", "fp", "token-1", time.Minute)
	require.NoError(t, err)
	require.True(t, claimed)

	armed.Store(true)
	first := &store.Response{Status: http.StatusCreated, Body: []byte("first")}
	require.NoError(t, s.Complete(ctx, "pay", rec.Owner, first, time.Minute), "the caller's own completion, sent again")
	require.False(t, armed.Load(), "the reply was lost")

	dup, claimed, err := s.Claim(ctx, "pay", "fp", "token-2", time.Minute)
	require.NoError(t, err)
	require.False(t, claimed)
	require.Equal(t, store.StateCompleted, dup.State)
	require.Equal(t, "first", string(dup.Response.Body))
}

// partitionable returns a store whose client reaches REDIS_URL through a
// proxy, and the proxy. The client heeds context deadlines
// (ContextTimeoutEnabled, which WithRecordTimeout needs), and its own read
// and write timeouts are far longer than a test waits, so only a deadline
// can end a call on a partitioned connection. The store's keys are deleted
// through a direct client when the test ends, after the proxy has closed.
func partitionable(t *testing.T) (*redisstore.Store, *tcpproxy.Proxy) {
	t.Helper()
	_, prefix := newStore(t, standalone(t))
	var proxy *tcpproxy.Proxy
	client := standaloneWith(t, func(opts *redis.Options) {
		proxy = startProxy(t, opts.Addr)
		opts.Addr = proxy.Addr()
		opts.ContextTimeoutEnabled = true
		opts.ReadTimeout, opts.WriteTimeout = time.Minute, time.Minute
	})
	return redisstore.New(client, redisstore.WithPrefix(prefix)), proxy
}

// TestRecordTimeoutOnAPartition: when Redis stops answering after the
// claim (the handler partitions the proxy, then answers), the call that
// records the outcome, Complete for a 201 and Release for a 500, gives up
// at the record timeout: the request returns instead of waiting on the
// silent connection, and the error handler is told of the deadline.
func TestRecordTimeoutOnAPartition(t *testing.T) {
	const recordTimeout = 300 * time.Millisecond
	for _, tc := range []struct {
		call   string
		status int
	}{
		{"complete", http.StatusCreated},
		{"release", http.StatusInternalServerError},
	} {
		t.Run(tc.call, func(t *testing.T) {
			t.Parallel()
			s, proxy := partitionable(t)
			errs := make(chan error, 10)
			h := idempotency.New(
				idempotency.WithStore(s),
				idempotency.WithRecordTimeout(recordTimeout),
				idempotency.WithErrorHandler(func(_ *http.Request, err error) { errs <- err }),
			)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				proxy.Partition()
				w.WriteHeader(tc.status)
			}))

			require.Equal(t, tc.status, serveWithin(t, 10*recordTimeout, h))
			require.Len(t, errs, 1, "one error reported")
			err := <-errs
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.True(t, strings.HasPrefix(err.Error(), "idempotency: "+tc.call+": "), "reported: %v", err)
		})
	}
}

// serveWithin sends a POST with a key through h and returns the status
// the client got, failing the test if the request has not returned within
// bound.
func serveWithin(t *testing.T, bound time.Duration, h http.Handler) int {
	t.Helper()
	done := make(chan int, 1)
	go func() { done <- post(h, "/payments", "k") }()
	select {
	case status := <-done:
		return status
	case <-time.After(bound):
		require.FailNow(t, "pinned", "the request has not returned %v after it was sent", bound)
		return 0
	}
}

// benchGoroutines is how many goroutines share the store in the
// benchmarks; .ci/bench-redis gives redis-benchmark as many clients.
const benchGoroutines = 32

// benchResponse is the small JSON response the benchmarks complete with.
var benchResponse = storetest.BenchResponse()

// BenchmarkClaimComplete measures what a first request costs the store:
// a Claim of a fresh key and a Complete with a small JSON response, from
// 32 goroutines sharing one store on REDIS_URL. It reports pairs/s, and
// from INFO commandstats the commands the server ran and the microseconds
// it spent per pair (exact only on a server nothing else uses, as
// .ci/bench-redis starts), and the MEMORY USAGE of one completed record.
func BenchmarkClaimComplete(b *testing.B) {
	client := standalone(b)
	s, prefix := newStore(b, client, redisstore.WithAbandonedRetention(time.Minute))
	ctx := b.Context()
	warmUp(b, s)
	before := serverWorkOf(b, client)
	var next atomic.Int64
	b.ResetTimer()
	inParallel(func() {
		for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
			if !claimComplete(b, s, strconv.FormatInt(i, 10)) {
				return
			}
		}
	})
	b.StopTimer()
	reportServerWork(b, serverWorkOf(b, client).since(before), "pair")
	bytes, err := client.MemoryUsage(ctx, recordKey(prefix, "1"), 0).Result()
	require.NoError(b, err)
	b.ReportMetric(float64(bytes), "record-bytes")
}

// BenchmarkReplay measures what a replay costs the store: Claims of one
// completed key from 32 goroutines. It reports replays/s, and the server's
// commands and microseconds per replay as BenchmarkClaimComplete does.
func BenchmarkReplay(b *testing.B) {
	client := standalone(b)
	s, _ := newStore(b, client)
	ctx := b.Context()
	warmUp(b, s)
	claimComplete(b, s, "done")
	before := serverWorkOf(b, client)
	var next atomic.Int64
	b.ResetTimer()
	inParallel(func() {
		for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
			rec, claimed, err := s.Claim(ctx, "done", "fp", "replay", time.Minute)
			if err != nil || claimed || rec.Response == nil {
				b.Errorf("Claim of a completed key = %+v, claimed %v, %v", rec, claimed, err)
				return
			}
		}
	})
	b.StopTimer()
	reportServerWork(b, serverWorkOf(b, client).since(before), "replay")
}

// claimComplete claims key and completes it with benchResponse, reporting
// whether both succeeded; a failure is reported on b.
func claimComplete(b *testing.B, s *redisstore.Store, key string) bool {
	rec, claimed, err := s.Claim(b.Context(), key, "fp", rand.Text(), time.Minute)
	if err != nil || !claimed {
		b.Errorf("Claim(%q) = claimed %v, %v", key, claimed, err)
		return false
	}
	if err := s.Complete(b.Context(), key, rec.Owner, benchResponse, time.Minute); err != nil {
		b.Errorf("Complete(%q) = %v", key, err)
		return false
	}
	return true
}

// warmUp loads the scripts and opens a connection per goroutine, so that
// the server's counts leave out what a client does once.
func warmUp(b *testing.B, s *redisstore.Store) {
	inParallel(func() { claimComplete(b, s, "warm-up "+rand.Text()) })
}

// inParallel runs loop in benchGoroutines goroutines and waits for them.
func inParallel(loop func()) {
	var wg sync.WaitGroup
	for range benchGoroutines {
		wg.Go(loop)
	}
	wg.Wait()
}

// reportServerWork reports b.N operations per second, and per operation
// the commands and microseconds of work, naming the operation per.
func reportServerWork(b *testing.B, work serverWork, per string) {
	n := float64(b.N)
	b.ReportMetric(n/b.Elapsed().Seconds(), per+"s/s")
	b.ReportMetric(float64(work.calls)/n, "server-cmds/"+per)
	b.ReportMetric(float64(work.usec)/n, "server-µs/"+per)
}
