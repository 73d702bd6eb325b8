package sqlitestore

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/headercodec"
	"github.com/seed43327c4c/idempotency/store/storetest"
)

const (
	// benchProcesses is how many processes share the file in both
	// benchmarks, as the workers of one host do.
	benchProcesses = 4
	// benchGoroutines is how many goroutines of each process make pairs.
	benchGoroutines = 4
	// benchEnv runs this test binary as one process of a benchmark: its
	// value is "store" or "direct", a space, the pairs to make and the
	// database file (see benchProcess).
	benchEnv = "SQLITESTORE_TEST_BENCH"
)

// benchResponse is the response both benchmarks store with every pair,
// with storetest.BenchFingerprint and storetest.BenchToken.
var benchResponse = storetest.BenchResponse()

// BenchmarkClaimComplete measures what a first request costs the store: a
// Claim of a new key and the Complete of its response, made by
// benchProcesses processes on one file, benchGoroutines goroutines each.
// Compare pairs/s with BenchmarkDirect.
func BenchmarkClaimComplete(b *testing.B) { runBenchProcesses(b, "store") }

// BenchmarkDirect runs the store's own claim and complete statements
// straight through database/sql, with the same processes, goroutines,
// file settings and arguments: the ceiling BenchmarkClaimComplete is
// measured against.
func BenchmarkDirect(b *testing.B) { runBenchProcesses(b, "direct") }

// runBenchProcesses starts benchProcesses copies of this test binary on a
// fresh file, each making its share of b.N pairs in mode, and times them
// from the moment all are ready until the last has finished.
func runBenchProcesses(b *testing.B, mode string) {
	path := testFile(b)
	newTestStoreOn(b, path)
	share := (b.N + benchProcesses - 1) / benchProcesses
	type process struct {
		cmd   *exec.Cmd
		start io.WriteCloser
	}
	var procs []process
	for range benchProcesses {
		cmd, start, ready := startChild(b, fmt.Sprintf("%s=%s %d %s", benchEnv, mode, share, path))
		line, err := bufio.NewReader(ready).ReadString('\n')
		require.NoError(b, err, "a benchmark process did not start")
		require.Equal(b, "ready\n", line)
		procs = append(procs, process{cmd, start})
	}
	b.ResetTimer()
	for _, p := range procs {
		require.NoError(b, p.start.Close()) // the signal to start
	}
	for _, p := range procs {
		require.NoError(b, p.cmd.Wait(), "a benchmark process failed")
	}
	b.StopTimer()
	b.ReportMetric(float64(benchProcesses*share)/b.Elapsed().Seconds(), "pairs/s")
	var completed int
	require.NoError(b, openTestDB(b, path).QueryRow(`SELECT count(*) FROM idempotency_keys WHERE state = 2`).Scan(&completed))
	require.Equal(b, benchProcesses*share, completed, "every pair completed a record")
}

// benchProcess is one process of a benchmark (see benchEnv): it opens the
// file, says "ready" on stdout, waits for stdin to close, makes its pairs
// and exits.
func benchProcess(spec string) error {
	var mode, path string
	var pairs int
	if _, err := fmt.Sscanf(spec, "%s %d %s", &mode, &pairs, &path); err != nil {
		return fmt.Errorf("%s=%q: %w", benchEnv, spec, err)
	}
	db, err := Open(context.Background(), path, time.Minute)
	if err != nil {
		return err
	}
	defer db.Close()
	pair := storePair(New(db))
	if mode == "direct" {
		pair = directPair(db)
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)

	prefix := strconv.Itoa(os.Getpid()) + "-"
	var next atomic.Int64
	errs := make(chan error, benchGoroutines)
	var wg sync.WaitGroup
	for range benchGoroutines {
		wg.Go(func() {
			for n := next.Add(1); n <= int64(pairs); n = next.Add(1) {
				if err := pair(context.Background(), prefix+strconv.FormatInt(n, 10)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// storePair makes one pair through s.
func storePair(s *Store) func(ctx context.Context, key string) error {
	return func(ctx context.Context, key string) error {
		rec, claimed, err := s.Claim(ctx, key, storetest.BenchFingerprint, storetest.BenchToken, 30*time.Second)
		if err != nil || !claimed {
			return fmt.Errorf("claim %q: claimed %v, err %v", key, claimed, err)
		}
		return s.Complete(ctx, key, rec.Owner, benchResponse, 24*time.Hour)
	}
}

// directPair makes one pair with the store's statements run on db, their
// arguments as the store passes them.
func directPair(db *sql.DB) func(ctx context.Context, key string) error {
	header := headercodec.Encode(benchResponse.Header)
	return func(ctx context.Context, key string) error {
		var claimed bool
		var state, fence, ttl int64
		var fp, h, body []byte
		var status sql.NullInt64
		row := store.HashKey(key)
		err := db.QueryRowContext(ctx, claimSQL, row, []byte(storetest.BenchFingerprint), []byte(storetest.BenchToken), int64(30000)).
			Scan(&claimed, &state, &fp, &fence, &status, &h, &body, &ttl)
		if err != nil || !claimed {
			return fmt.Errorf("claim %q: claimed %v, err %v", key, claimed, err)
		}
		_, err = db.ExecContext(ctx, completeSQL, row, []byte(storetest.BenchToken), fence,
			int(store.StateCompleted), benchResponse.Status, header, benchResponse.Body, int64(86400000))
		return err
	}
}

// BenchmarkTxRequest measures what the transactional mode costs against
// the plain store, in one process through one handle: a request is a
// claim of a new key, one ledger INSERT, work (a sleep standing for the
// rest of the handler, after the INSERT) and the stored response, made by
// goroutines at once. In the plain mode the INSERT commits on its own and
// the requests overlap; in the transactional mode it runs in the
// request's transaction, which holds the file's write lock until the
// commit, so the requests' transactions run one at a time.
func BenchmarkTxRequest(b *testing.B) {
	for _, work := range []time.Duration{0, 10 * time.Millisecond} {
		for _, goroutines := range []int{1, 4, 16} {
			for _, mode := range []string{"plain", "tx"} {
				b.Run(fmt.Sprintf("work=%v/goroutines=%d/%s", work, goroutines, mode), func(b *testing.B) {
					s := newTestTxStore(b)
					request := plainRequest(s.Store, work)
					if mode == "tx" {
						request = txRequest(s, work)
					}
					var next atomic.Int64
					errs := make(chan error, goroutines)
					b.ResetTimer()
					var wg sync.WaitGroup
					for range goroutines {
						wg.Go(func() {
							for n := next.Add(1); n <= int64(b.N); n = next.Add(1) {
								if err := request(context.Background(), strconv.FormatInt(n, 10)); err != nil {
									errs <- err
									return
								}
							}
						})
					}
					wg.Wait()
					b.StopTimer()
					close(errs)
					require.NoError(b, <-errs)
					b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "requests/s")
				})
			}
		}
	}
}

// benchInsert is the handler's INSERT in BenchmarkTxRequest.
const benchInsert = `INSERT INTO ledger (key, run) VALUES (?, 'bench')`

// plainRequest is BenchmarkTxRequest's request through the plain store.
func plainRequest(s *Store, work time.Duration) func(ctx context.Context, key string) error {
	return func(ctx context.Context, key string) error {
		rec, claimed, err := s.Claim(ctx, key, storetest.BenchFingerprint, storetest.BenchToken, 30*time.Second)
		if err != nil || !claimed {
			return fmt.Errorf("claim %q: claimed %v, err %v", key, claimed, err)
		}
		if _, err := s.db.ExecContext(ctx, benchInsert, key); err != nil {
			return err
		}
		time.Sleep(work)
		return s.Complete(ctx, key, rec.Owner, benchResponse, 24*time.Hour)
	}
}

// txRequest is BenchmarkTxRequest's request in transactional mode.
func txRequest(s *TxStore, work time.Duration) func(ctx context.Context, key string) error {
	return func(ctx context.Context, key string) error {
		txCtx, _, tx, err := s.BeginClaim(ctx, key, storetest.BenchFingerprint, storetest.BenchToken)
		if err != nil || tx == nil {
			return fmt.Errorf("claim %q: claimed %v, err %v", key, tx != nil, err)
		}
		q, err := Tx(txCtx)
		if err == nil {
			_, err = q.ExecContext(txCtx, benchInsert, key)
		}
		if err != nil {
			return errors.Join(err, tx.Rollback(ctx))
		}
		time.Sleep(work)
		return tx.Commit(ctx, benchResponse, 24*time.Hour)
	}
}
