package main

// Jobs delivered more than once, to several worker processes, run once
// through idempotency.Do. The workers are this test binary run again
// (TestMain starts runJobWorker when jobWorkerEnv is set): no binary of
// their own to build, and nothing added to the example service.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
	pgstore "github.com/seed43327c4c/idempotency/store_postgres"
	redisstore "github.com/seed43327c4c/idempotency/store_redis"
	sqlitestore "github.com/seed43327c4c/idempotency/store_sqlite"
)

// The environment of a job worker: its backend (redis, postgres,
// postgres-tx or sqlite), the backend's URL (for sqlite, the file's path), the prefix of its job keys, how many
// jobs there are, and how long each job's work takes.
const (
	jobWorkerEnv = "IDEMPOTENCY_JOB_WORKER"
	jobURLEnv    = "IDEMPOTENCY_JOB_URL"
	jobPrefixEnv = "IDEMPOTENCY_JOB_PREFIX"
	jobCountEnv  = "IDEMPOTENCY_JOB_COUNT"
	jobDelayEnv  = "IDEMPOTENCY_JOB_DELAY"
)

// jobLedger appends one row per run of a job's work.
type jobLedger func(ctx context.Context, job string) error

// runJobWorker is a worker process: it receives every job, a fifth of them
// twice, in a random order, and runs each through idempotency.Do, which
// appends a row to the ledger. A job found in flight, or whose run failed,
// is delivered again later, as a queue does. It prints "ran JOB" as a job's
// work starts and "result JOB R" for each delivery's result, and returns
// the process's exit code.
func runJobWorker(backend string) int {
	ctx := context.Background()
	s, ledger, err := openJobBackend(ctx, backend, os.Getenv(jobURLEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "job worker:", err)
		return 2
	}
	n, _ := strconv.Atoi(os.Getenv(jobCountEnv))
	delay, _ := time.ParseDuration(os.Getenv(jobDelayEnv))
	prefix := os.Getenv(jobPrefixEnv)
	queue := rand.Perm(n)
	for range n / 5 {
		queue = slices.Insert(queue, rand.IntN(len(queue)+1), rand.IntN(n))
	}
	for len(queue) > 0 {
		job := prefix + strconv.Itoa(queue[0])
		result, err := idempotency.Do(ctx, s, job, func(ctx context.Context) ([]byte, error) {
			fmt.Println("ran", job)
			if err := ledger(ctx, job); err != nil {
				return nil, err
			}
			time.Sleep(delay)
			return fmt.Appendf(nil, "%s-by-%d", job, os.Getpid()), nil
		}, idempotency.DoRetention(time.Minute), idempotency.DoLease(2*time.Second))
		if err != nil {
			if !errors.Is(err, idempotency.ErrInFlight) {
				fmt.Fprintln(os.Stderr, "job worker:", job, err)
			}
			queue = append(queue[1:], queue[0]) // redelivered later
			time.Sleep(5 * time.Millisecond)
			continue
		}
		fmt.Println("result", job, string(result))
		queue = queue[1:]
	}
	return 0
}

// openJobBackend returns the store and ledger of a job worker: a Redis
// list, beside records under the job prefix, a Postgres table written through the pool or, with postgres-tx,
// in the claim's transaction, or a table in the SQLite file.
func openJobBackend(ctx context.Context, backend, url string) (store.Store, jobLedger, error) {
	prefix := os.Getenv(jobPrefixEnv)
	switch backend {
	case "redis":
		opts, err := redis.ParseURL(url)
		if err != nil {
			return nil, nil, err
		}
		opts.ContextTimeoutEnabled = true
		client := redis.NewClient(opts)
		return redisstore.New(client, redisstore.WithPrefix(prefix)), func(ctx context.Context, job string) error {
			return client.RPush(ctx, prefix+"ledger", job).Err()
		}, nil
	case "postgres", "postgres-tx":
		pool, err := pgxpool.New(ctx, url)
		if err != nil {
			return nil, nil, err
		}
		if backend == "postgres" {
			return pgstore.New(pool), func(ctx context.Context, job string) error {
				_, err := pool.Exec(ctx, "INSERT INTO job_ledger (job) VALUES ($1)", job)
				return err
			}, nil
		}
		return pgstore.NewTx(pool), func(ctx context.Context, job string) error {
			tx, ok := pgstore.Tx(ctx)
			if !ok {
				return errors.New("not in the claim's transaction")
			}
			_, err := tx.Exec(ctx, "INSERT INTO job_ledger (job) VALUES ($1)", job)
			return err
		}, nil
	case "sqlite":
		db, err := sqlitestore.Open(ctx, url, 0)
		if err != nil {
			return nil, nil, err
		}
		return sqlitestore.New(db), func(ctx context.Context, job string) error {
			_, err := db.ExecContext(ctx, "INSERT INTO job_ledger (job) VALUES (?)", job)
			return err
		}, nil
	}
	return nil, nil, fmt.Errorf("unknown backend %q", backend)
}

// jobWorkers runs job worker processes of one backend and collects their
// output.
type jobWorkers struct {
	t       *testing.T
	env     []string
	mu      sync.Mutex
	running map[*exec.Cmd]*syncBuffer
	exited  sync.WaitGroup
	out     []*syncBuffer
	failed  []string
}

func newJobWorkers(t *testing.T, backend, url string, jobs int, delay time.Duration) (*jobWorkers, string) {
	prefix := fmt.Sprintf("jobs-%d-%d:", os.Getpid(), time.Now().UnixNano())
	env := append(os.Environ(), jobWorkerEnv+"="+backend, jobURLEnv+"="+url, jobPrefixEnv+"="+prefix,
		jobCountEnv+"="+strconv.Itoa(jobs), jobDelayEnv+"="+delay.String())
	w := &jobWorkers{t: t, env: env, running: map[*exec.Cmd]*syncBuffer{}}
	t.Cleanup(func() {
		w.mu.Lock()
		for cmd := range w.running {
			_ = cmd.Process.Kill()
		}
		w.mu.Unlock()
		w.exited.Wait()
	})
	return w, prefix
}

// start starts one more worker.
func (w *jobWorkers) start() {
	cmd := exec.Command(os.Args[0])
	cmd.Env = w.env
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = workerAttr()
	require.NoError(w.t, cmd.Start())
	w.mu.Lock()
	w.running[cmd] = out
	w.out = append(w.out, out)
	w.mu.Unlock()
	w.exited.Go(func() {
		err := cmd.Wait()
		w.mu.Lock()
		defer w.mu.Unlock()
		if _, killed := w.running[cmd]; killed && err != nil {
			w.failed = append(w.failed, fmt.Sprintf("worker %d: %v\n%s", cmd.Process.Pid, err, out))
		}
		delete(w.running, cmd)
	})
}

// killOne sends SIGKILL to a running worker, chosen at random, and reports
// whether there was one.
func (w *jobWorkers) killOne() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	var cmds []*exec.Cmd
	for cmd := range w.running {
		cmds = append(cmds, cmd)
	}
	if len(cmds) == 0 {
		return false
	}
	victim := cmds[rand.IntN(len(cmds))]
	delete(w.running, victim) // its exit is not a failure
	_ = victim.Process.Kill()
	return true
}

// wait waits for every worker to finish its jobs, and returns how many
// times a job's work started and the results each job's deliveries got.
// Workers still running after 45 seconds are killed and fail the test.
func (w *jobWorkers) wait() (runs int, results map[string][]string) {
	finished := make(chan struct{})
	go func() { w.exited.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(45 * time.Second):
		w.mu.Lock()
		for cmd := range w.running {
			_ = cmd.Process.Kill()
		}
		w.mu.Unlock()
		<-finished
		w.t.Fatalf("the workers had not finished their jobs after 45 s:\n%v", w.failed)
	}
	require.Empty(w.t, w.failed)
	results = map[string][]string{}
	for _, out := range w.out {
		for line := range strings.Lines(out.String()) {
			fields := strings.Fields(line)
			switch {
			case len(fields) == 2 && fields[0] == "ran":
				runs++
			case len(fields) == 3 && fields[0] == "result":
				results[fields[1]] = append(results[fields[1]], fields[2])
			}
		}
	}
	return runs, results
}

// requireEachJobOnce checks that every job got results, all of them
// the same, and that the ledger holds one row per job, and returns it.
func requireEachJobOnce(t *testing.T, prefix string, jobs int, results map[string][]string, rows func(prefix string) []string) []string {
	t.Helper()
	require.Len(t, results, jobs)
	for job, got := range results {
		require.True(t, strings.HasPrefix(job, prefix), job)
		for _, r := range got {
			require.Equal(t, got[0], r, "job %s: every delivery gets the stored result", job)
		}
	}
	ledger := rows(prefix)
	assert.Len(t, ledger, jobs, "one row per job")
	assert.Len(t, distinct(ledger), jobs, "every job has its row")
	return ledger
}

// TestJobsRunOnceAcrossWorkers: four workers each receive the same 100
// jobs, some twice; each job's work appends a row to the ledger; the
// ledger ends with exactly one row per job, with Redis, with Postgres and
// with SQLite (the workers sharing one file).
func TestJobsRunOnceAcrossWorkers(t *testing.T) {
	const jobs = 100
	for _, backend := range []string{"redis", "postgres", "sqlite"} {
		t.Run(backend, func(t *testing.T) {
			url, rows := jobBackend(t, backend)
			w, prefix := newJobWorkers(t, backend, url, jobs, time.Millisecond)
			for range 4 {
				w.start()
			}
			runs, results := w.wait()
			requireEachJobOnce(t, prefix, jobs, results, rows)
			assert.Equal(t, jobs, runs, "each job's work ran once")
		})
	}
}

// TestJobsInTransactionsSurviveKilledWorkers: with the transactional
// store, four workers run the same 100 jobs while workers are SIGKILLed at
// random, mid-job, up to six times (until every worker is done), and
// replaced by workers that receive every job again.
// A killed run's row is rolled back with its claim, so the ledger still
// ends with exactly one row per job.
func TestJobsInTransactionsSurviveKilledWorkers(t *testing.T) {
	const jobs, kills = 100, 6
	url, rows := jobBackend(t, "postgres-tx")
	w, prefix := newJobWorkers(t, "postgres-tx", url, jobs, 40*time.Millisecond)
	for range 4 {
		w.start()
	}
	killed := 0
	for range kills {
		time.Sleep(time.Duration(100+rand.IntN(200)) * time.Millisecond)
		if !w.killOne() {
			break // every worker is done: a fast machine
		}
		killed++
		w.start()
	}
	runs, results := w.wait()
	ledger := requireEachJobOnce(t, prefix, jobs, results, rows)
	t.Logf("%d workers killed; %d runs of the jobs' work for %d rows", killed, runs, len(ledger))
	assert.Positive(t, killed, "no worker was killed")
	assert.Greater(t, runs, jobs, "some run was cut off by a kill and ran again")
}

// jobBackend prepares a backend for job workers and returns its URL and a
// function that reads the ledger's rows of the jobs under a prefix.
func jobBackend(t *testing.T, backend string) (string, func(prefix string) []string) {
	if backend == "sqlite" {
		f := newSQLiteFile(t)
		require.NoError(t, sqlitestore.New(f.db).Migrate(t.Context()))
		_, err := f.db.Exec("CREATE TABLE job_ledger (job TEXT NOT NULL)")
		require.NoError(t, err)
		return f.path, func(string) []string {
			rows, err := f.db.Query("SELECT job FROM job_ledger")
			require.NoError(t, err)
			defer rows.Close()
			return readJobs(t, rows)
		}
	}
	if backend == "redis" {
		url := redisURL(t)
		opts, err := redis.ParseURL(url)
		require.NoError(t, err)
		client := redis.NewClient(opts)
		t.Cleanup(func() { _ = client.Close() })
		return url, func(prefix string) []string {
			t.Cleanup(func() { removeKeys(t, client, prefix) })
			rows, err := client.LRange(context.Background(), prefix+"ledger", 0, -1).Result()
			require.NoError(t, err)
			return rows
		}
	}
	db := newPGTestDB(t)
	pool, err := pgxpool.New(t.Context(), db.URL)
	require.NoError(t, err)
	defer pool.Close()
	require.NoError(t, pgstore.New(pool).Migrate(t.Context()))
	db.exec(t, "CREATE TABLE "+db.schema+".job_ledger (job text NOT NULL)")
	db.exec(t, "GRANT ALL ON "+db.schema+".job_ledger TO "+db.role)
	return db.URL, func(prefix string) []string {
		rows, err := db.admin.Query(context.Background(), "SELECT job FROM "+db.schema+".job_ledger")
		require.NoError(t, err)
		defer rows.Close()
		return readJobs(t, rows)
	}
}

// readJobs returns the job column of every row of rows, from
// database/sql or pgx alike.
func readJobs(t *testing.T, rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}) []string {
	t.Helper()
	var jobs []string
	for rows.Next() {
		var job string
		require.NoError(t, rows.Scan(&job))
		jobs = append(jobs, job)
	}
	require.NoError(t, rows.Err())
	return jobs
}

func distinct(rows []string) map[string]bool {
	seen := map[string]bool{}
	for _, r := range rows {
		seen[r] = true
	}
	return seen
}
