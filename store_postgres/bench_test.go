package pgstore

import (
	"context"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store/storetest"
)

// benchConns is how many connections, and goroutines or pgbench clients,
// both benchmarks use.
const benchConns = 16

// benchResponse is the response both benchmarks store with every pair,
// with storetest.BenchFingerprint and storetest.BenchToken.
var benchResponse = storetest.BenchResponse()

// benchStore returns a store on a fresh table reached through a pool of its
// own of benchConns connections, all opened before it returns. The table is
// dropped through the shared test pool, so that the benchmark may close the
// store's pool first (see hotShare).
func benchStore(b *testing.B) *Store {
	cfg := testConfig(b)
	cfg.MaxConns, cfg.MinConns = benchConns, benchConns
	p := connect(b, cfg)
	b.Cleanup(p.Close)
	s := New(p, WithTable(testTable(b)))
	require.NoError(b, s.Migrate(context.Background()))
	b.Cleanup(func() { dropTable(b, New(testPool(b), WithTable(s.table))) })
	require.Eventually(b, func() bool { return p.Stat().TotalConns() == benchConns }, 10*time.Second, 10*time.Millisecond)
	return s
}

// BenchmarkClaimComplete measures what a first request costs the store: a
// Claim of a new key and the Complete of its response, from benchConns
// goroutines over benchConns connections. Compare pairs/s with
// BenchmarkPgbench. It also reports the share of its updates that were HOT
// (hot-%) and the table's and indexes' size per record (bytes/record).
func BenchmarkClaimComplete(b *testing.B) {
	s := benchStore(b)
	runPairs(b, s, func(ctx context.Context, key string) error {
		rec, claimed, err := s.Claim(ctx, key, storetest.BenchFingerprint, storetest.BenchToken, 30*time.Second)
		if err != nil || !claimed {
			return fmt.Errorf("claim: claimed %v, err %v", claimed, err)
		}
		return s.Complete(ctx, key, rec.Owner, benchResponse, 24*time.Hour)
	})
	b.ReportMetric(bytesPerRecord(b, s, b.N), "bytes/record")
	s.pool.Close()
	b.ReportMetric(hotShare(b, s, b.N), "hot-%")
}

// BenchmarkTxClaimCommit measures what a first request costs the
// transactional mode: a BeginClaim of a new key and the Commit of its
// response, with no write of the handler's. Compare pairs/s with
// BenchmarkClaimComplete.
func BenchmarkTxClaimCommit(b *testing.B) {
	s := &TxStore{Store: benchStore(b)}
	runPairs(b, s.Store, func(ctx context.Context, key string) error {
		_, _, tx, err := s.BeginClaim(ctx, key, storetest.BenchFingerprint, storetest.BenchToken)
		if err != nil || tx == nil {
			return fmt.Errorf("begin claim: claimed %v, err %v", tx != nil, err)
		}
		return tx.Commit(ctx, benchResponse, 24*time.Hour)
	})
}

// BenchmarkTxMiddleware measures a first request through the middleware
// in transactional mode whose handler calls no step and writes no row:
// the non-step path, which steps must leave as it was. Compare pairs/s
// across changes to the transactional mode.
func BenchmarkTxMiddleware(b *testing.B) {
	s := &TxStore{Store: benchStore(b)}
	h := idempotency.New(idempotency.WithStore(s))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"pay_1"}`))
	}))
	runPairs(b, s.Store, func(_ context.Context, key string) error {
		if w := sendTo(h, key, nil); w.Code != http.StatusCreated {
			return fmt.Errorf("status %d: %s", w.Code, w.Body)
		}
		return nil
	})
}

// runPairs times pair on b.N new keys from benchConns goroutines, reports
// pairs/s, and requires every key completed in s's table.
func runPairs(b *testing.B, s *Store, pair func(ctx context.Context, key string) error) {
	ctx := context.Background()
	prefix := testTable(b)
	var seq atomic.Int64
	b.SetParallelism((benchConns + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			key := prefix + strconv.FormatInt(seq.Add(1), 10)
			if err := pair(ctx, key); err != nil {
				b.Errorf("%q: %v", key, err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
	b.StopTimer()
	requireAllCompleted(b, s, b.N)
}

// BenchmarkPgbench runs the minimal pair through pgbench, as prepared
// statements from benchConns clients, on a fresh table of the same server:
// an INSERT ... ON CONFLICT DO NOTHING of a new key, then an UPDATE of the
// row by key and token storing the response, the least SQL a claim and a
// complete can be. It is the ceiling BenchmarkClaimComplete is measured
// against. Its pairs/s is pgbench's tps without connection time; it also
// reports hot-% and bytes/record as BenchmarkClaimComplete does. It is
// skipped when pgbench is not installed.
func BenchmarkPgbench(b *testing.B) {
	pgbench, err := exec.LookPath("pgbench")
	if err != nil {
		b.Skip("pgstore: pgbench is not installed; it comes with the PostgreSQL client packages")
	}
	s := benchStore(b)
	s.pool.Close() // pgbench brings its own connections
	s.pool = testPool(b)
	script := b.TempDir() + "/pair.sql"
	require.NoError(b, os.WriteFile(script, []byte(pgbenchScript(s)), 0o600))
	perClient := (b.N + benchConns - 1) / benchConns

	b.ResetTimer()
	out, err := exec.Command(pgbench, "-n", "-M", "prepared", "-c", strconv.Itoa(benchConns),
		"-j", strconv.Itoa(runtime.GOMAXPROCS(0)), "-t", strconv.Itoa(perClient), "-f", script,
		"-D", "fp="+storetest.BenchFingerprint, "-D", "token="+storetest.BenchToken,
		"-D", "header="+byteaArray(encodeHeader(benchResponse.Header)), "-D", "body="+bytea(benchResponse.Body),
		testConfig(b).ConnString()).CombinedOutput()
	b.StopTimer()
	require.NoError(b, err, "pgbench: %s", out)
	m := regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`).FindSubmatch(out)
	require.NotNil(b, m, "pgbench printed no tps: %s", out)
	tps, err := strconv.ParseFloat(string(m[1]), 64)
	require.NoError(b, err)
	b.ReportMetric(tps, "pairs/s")
	n := benchConns * perClient
	requireAllCompleted(b, s, n)
	b.ReportMetric(bytesPerRecord(b, s, n), "bytes/record")
	b.ReportMetric(hotShare(b, s, n), "hot-%")
}

// bytesPerRecord is the size of s's table, its TOAST table and its indexes
// divided by the n records it holds.
func bytesPerRecord(b *testing.B, s *Store, n int) float64 {
	var size int64
	require.NoError(b, s.pool.QueryRow(context.Background(),
		"SELECT pg_total_relation_size($1::regclass)", s.name).Scan(&size))
	return float64(size) / float64(n)
}

// hotShare is the percentage of the updates of s's table that were HOT, as
// pg_stat_user_tables counts them once all n updates are there: a
// server process reports its counts when it goes idle for a second or
// exits, which is why the caller closes the connections that updated
// first.
func hotShare(b *testing.B, s *Store, n int) float64 {
	var updated, hot int64
	require.Eventually(b, func() bool {
		require.NoError(b, testPool(b).QueryRow(context.Background(),
			"SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relid = $1::regclass", s.name).
			Scan(&updated, &hot))
		return updated >= int64(n)
	}, 30*time.Second, 100*time.Millisecond, "pg_stat_user_tables counts every update")
	return 100 * float64(hot) / float64(updated)
}

// requireAllCompleted requires the table to hold n rows, all completed: no
// claim or complete of a benchmark was lost.
func requireAllCompleted(b *testing.B, s *Store, n int) {
	var total, completed int
	require.NoError(b, s.pool.QueryRow(context.Background(),
		"SELECT count(*), count(*) FILTER (WHERE state = 2) FROM "+s.name).Scan(&total, &completed))
	require.Equal(b, n, total, "rows")
	require.Equal(b, n, completed, "completed rows")
}

// pgbenchScript is the minimal pair as a pgbench transaction, on s's
// table: a random new key (as long as the store's hashed keys), inserted
// in flight, then completed with the benchmark's response.
func pgbenchScript(s *Store) string {
	return strings.NewReplacer("idempotency_keys", s.name).Replace(`\set key random(1000000000000000000, 9223372036854775806)
INSERT INTO idempotency_keys (key, fingerprint, state, token, fence, expires_at)
VALUES (sha256(int8send(:key)), :fp::bytea, 1, :token::bytea, 1,
        statement_timestamp() + interval '30 seconds')
ON CONFLICT DO NOTHING;
UPDATE idempotency_keys
SET state = 2, status = 201, header = :header::bytea[], body = :body::bytea,
    expires_at = statement_timestamp() + interval '24 hours'
WHERE key = sha256(int8send(:key)) AND token = :token::bytea;
`)
}

// bytea is b in bytea's hex input format.
func bytea(b []byte) string { return `\x` + hex.EncodeToString(b) }

// byteaArray is a bytea[] literal holding elems.
func byteaArray(elems [][]byte) string {
	quoted := make([]string, len(elems))
	for i, e := range elems {
		quoted[i] = `"\\x` + hex.EncodeToString(e) + `"`
	}
	return "{" + strings.Join(quoted, ",") + "}"
}
