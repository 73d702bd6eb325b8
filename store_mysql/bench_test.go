package mysqlstore

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store/headercodec"
	"github.com/seed43327c4c/idempotency/store/storetest"
)

// benchConns is how many connections, and goroutines, both benchmarks use.
const benchConns = 16

// benchResponse is the response both benchmarks store with every pair.
var benchResponse = storetest.BenchResponse()

// benchStore returns a store on a fresh table through a pool of its own of
// benchConns connections, all opened, counting its round trips.
func benchStore(b *testing.B) (*Store, *roundTrips) {
	cfg := testConfig(b)
	rt := &roundTrips{}
	cfg.DialFunc = rt.dial
	db := openDB(b, cfg, benchConns)
	fillPool(b, db)
	return newTestStoreOn(b, db), rt
}

// runPairs runs pair for b.N new keys from benchConns goroutines and
// reports pairs/s and round trips per pair.
func runPairs(b *testing.B, rt *roundTrips, pair func(ctx context.Context, key string) error) {
	ctx := context.Background()
	var seq atomic.Int64
	b.SetParallelism((benchConns + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	before := rt.n.Load()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := pair(ctx, "bench-"+strconv.FormatInt(seq.Add(1), 10)); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
	b.ReportMetric(float64(rt.n.Load()-before)/float64(b.N), "round-trips/pair")
}

// BenchmarkClaimComplete measures what a first request costs the store: a
// Claim of a new key and the Complete of its response. Compare pairs/s
// with BenchmarkInsertUpdate.
func BenchmarkClaimComplete(b *testing.B) {
	s, rt := benchStore(b)
	runPairs(b, rt, func(ctx context.Context, key string) error {
		rec, _, err := s.Claim(ctx, key, storetest.BenchFingerprint, storetest.BenchToken, 30*time.Second)
		if err == nil {
			err = s.Complete(ctx, key, rec.Owner, benchResponse, 24*time.Hour)
		}
		return err
	})
}

// BenchmarkInsertUpdate runs the least SQL a claim and a complete can be,
// as prepared statements through the same kind of pool on the same table:
// a plain INSERT of a new key in flight, then an UPDATE by key and token
// storing the response. It is the ceiling BenchmarkClaimComplete is
// measured against.
func BenchmarkInsertUpdate(b *testing.B) {
	s, rt := benchStore(b)
	insert := prepare(b, s.db, s.sql.rewrite.Replace("INSERT INTO `idempotency_keys` (`key`, fingerprint, state, token, fence, expires_at)"+
		" VALUES (?, ?, 1, ?, 1, UTC_TIMESTAMP(6) + INTERVAL 30 SECOND)"))
	update := prepare(b, s.db, s.sql.rewrite.Replace("UPDATE `idempotency_keys` SET state = 2, status = ?, header = ?, body = ?,"+
		" expires_at = UTC_TIMESTAMP(6) + INTERVAL 24 HOUR WHERE `key` = ? AND token = ?"))
	header := headercodec.Encode(benchResponse.Header)
	runPairs(b, rt, func(ctx context.Context, key string) error {
		row := sha256.Sum256([]byte(key))
		_, err := insert.ExecContext(ctx, row[:], []byte(storetest.BenchFingerprint), []byte(storetest.BenchToken))
		if err == nil {
			_, err = update.ExecContext(ctx, benchResponse.Status, header, benchResponse.Body, row[:], []byte(storetest.BenchToken))
		}
		return err
	})
}

func prepare(b *testing.B, db *sql.DB, query string) *sql.Stmt {
	stmt, err := db.Prepare(query)
	require.NoError(b, err)
	b.Cleanup(func() { _ = stmt.Close() })
	return stmt
}
