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

	"github.com/seed43327c4c/idempotency/store"
)

// benchConns is how many connections, and goroutines or pgbench clients,
// both benchmarks use.
const benchConns = 16

// The values both benchmarks store with every pair: a payment API's
// response, a SHA-256 fingerprint, one owner token.
var (
	benchResponse = &store.Response{
		Status: http.StatusCreated,
		Header: http.Header{"Content-Type": {"application/json"}, "Location": {"/payments/pay_123"}},
		Body:   []byte(`{"id":"pay_123","amount":1000,"currency":"eur","status":"succeeded"}`),
	}
	benchFingerprint = strings.Repeat("9f86d081884c7d65", 4)
	benchToken       = "TQ3ZJ5VXQKWX6NMM7BYTFHRA2E"
)

// benchStore returns a store on a fresh table reached through a pool of
// benchConns connections, all opened before it returns.
func benchStore(b *testing.B) *Store {
	cfg := testConfig(b)
	cfg.MaxConns, cfg.MinConns = benchConns, benchConns
	p := connect(b, cfg)
	b.Cleanup(p.Close)
	s := New(p, WithTable(testTable(b)))
	require.NoError(b, s.Migrate(context.Background()))
	b.Cleanup(func() { dropTable(b, s) })
	require.Eventually(b, func() bool { return p.Stat().TotalConns() == benchConns }, 10*time.Second, 10*time.Millisecond)
	return s
}

// BenchmarkClaimComplete measures what a first request costs the store: a
// Claim of a new key and the Complete of its response, from benchConns
// goroutines over benchConns connections. Compare pairs/s with
// BenchmarkPgbench.
func BenchmarkClaimComplete(b *testing.B) {
	s := benchStore(b)
	ctx := context.Background()
	prefix := testTable(b)
	var seq atomic.Int64
	b.SetParallelism((benchConns + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			key := prefix + strconv.FormatInt(seq.Add(1), 10)
			rec, claimed, err := s.Claim(ctx, key, benchFingerprint, benchToken, 30*time.Second)
			if err != nil || !claimed {
				b.Errorf("claim %q: claimed %v, err %v", key, claimed, err)
				return
			}
			if err := s.Complete(ctx, key, rec.Owner, benchResponse, 24*time.Hour); err != nil {
				b.Errorf("complete %q: %v", key, err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
	b.StopTimer()
	requireAllCompleted(b, s, b.N)
}

// BenchmarkPgbench runs the store's own claim and complete statements
// through pgbench, as prepared statements from benchConns clients, on a
// fresh table of the same server: the ceiling BenchmarkClaimComplete is
// measured against. Its pairs/s is pgbench's tps without connection time.
// It is skipped when pgbench is not installed.
func BenchmarkPgbench(b *testing.B) {
	pgbench, err := exec.LookPath("pgbench")
	if err != nil {
		b.Skip("pgstore: pgbench is not installed; it comes with the PostgreSQL client packages")
	}
	s := benchStore(b)
	script := b.TempDir() + "/pair.sql"
	require.NoError(b, os.WriteFile(script, []byte(pgbenchScript(s)), 0o600))
	perClient := (b.N + benchConns - 1) / benchConns

	b.ResetTimer()
	out, err := exec.Command(pgbench, "-n", "-M", "prepared", "-c", strconv.Itoa(benchConns),
		"-j", strconv.Itoa(runtime.GOMAXPROCS(0)), "-t", strconv.Itoa(perClient), "-f", script,
		"-D", "fp="+benchFingerprint, "-D", "token="+benchToken,
		"-D", "header="+byteaArray(encodeHeader(benchResponse.Header)), "-D", "body="+bytea(benchResponse.Body),
		testConfig(b).ConnString()).CombinedOutput()
	b.StopTimer()
	require.NoError(b, err, "pgbench: %s", out)
	m := regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`).FindSubmatch(out)
	require.NotNil(b, m, "pgbench printed no tps: %s", out)
	tps, err := strconv.ParseFloat(string(m[1]), 64)
	require.NoError(b, err)
	b.ReportMetric(tps, "pairs/s")
	requireAllCompleted(b, s, benchConns*perClient)
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

// pgbenchScript is one pair as a pgbench transaction: the store's claim
// statement for a random new key (the key's number doubling as its lock
// hash), its row read into variables, and the
// store's complete statement for the fence the claim returned.
func pgbenchScript(s *Store) string {
	claim := strings.NewReplacer("$1", ":key", "$2", ":fp", "$3", ":token", "$4", "30000000",
		"$5", ":key", "$6", "false").Replace(s.sql.claim)
	complete := strings.NewReplacer("$1", ":key", "$2", ":token", "$3", ":c_fence", "$4", strconv.Itoa(int(store.StateCompleted)),
		"$5", strconv.Itoa(benchResponse.Status), "$6", ":header", "$7", ":body", "$8", "86400000000").Replace(s.sql.complete)
	return fmt.Sprintf("\\set key random(1000000000000000000, 9223372036854775806)\n%s\n\\gset c_\n%s;\n", claim, complete)
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
