package main

// The multi-process harness: build the example binary once, start it with
// given flags on a free loopback port, kill its workers, and stop it.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// exampleBuild is the example binary, built once per test binary run and
// removed by TestMain.
var exampleBuild struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// buildExample returns the path of the example binary, building it on the
// first call (with -race when this test binary has it).
func buildExample(t testing.TB) string {
	t.Helper()
	exampleBuild.once.Do(func() {
		dir, err := os.MkdirTemp("", "idempotency-example-")
		if err != nil {
			exampleBuild.err = err
			return
		}
		exampleBuild.dir = dir
		path := filepath.Join(dir, "example")
		args := []string{"build", "-o", path}
		if raceBuilt() {
			args = append(args, "-race")
		}
		out, err := exec.Command("go", append(args, ".")...).CombinedOutput()
		if err != nil {
			exampleBuild.err = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		exampleBuild.path = path
	})
	require.NoError(t, exampleBuild.err)
	return exampleBuild.path
}

// raceBuilt reports whether this test binary runs with the race detector.
func raceBuilt() bool {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range info.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

func TestMain(m *testing.M) {
	if backend := os.Getenv(jobWorkerEnv); backend != "" {
		os.Exit(runJobWorker(backend)) // a job worker of jobs_test.go
	}
	code := m.Run()
	if exampleBuild.dir != "" {
		_ = os.RemoveAll(exampleBuild.dir)
	}
	os.Exit(code)
}

// exampleProc is a running example binary.
type exampleProc struct {
	// URL is the service's base URL, http://127.0.0.1:PORT.
	URL string

	t       testing.TB
	cmd     *exec.Cmd
	log     *syncBuffer
	exited  chan struct{} // closed once the process has exited; waitErr is then set
	waitErr error
	stopped bool
}

// startExample starts the example binary with args on a free loopback port
// (it adds -addr) and returns once it answers GET /payments and, with
// -workers N, once N workers have logged "worker started". The process is
// stopped when the test ends (see Stop).
func startExample(t testing.TB, args ...string) *exampleProc {
	t.Helper()
	bin := buildExample(t)
	addr := freeAddr(t)
	cmd := exec.Command(bin, append([]string{"-addr", addr}, args...)...)
	p := &exampleProc{URL: "http://" + addr, t: t, cmd: cmd, log: &syncBuffer{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.log, p.log
	cmd.SysProcAttr = workerAttr()   // stopped with this test binary, should it die
	cmd.WaitDelay = 10 * time.Second // workers left behind must not hold its log open forever
	require.NoError(t, cmd.Start())
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(p.Stop)

	workers := 1
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "-workers="); ok {
			workers, _ = strconv.Atoi(v)
		} else if a == "-workers" && i+1 < len(args) {
			workers, _ = strconv.Atoi(args[i+1])
		}
	}
	p.waitWorkers(workers)
	return p
}

// waitWorkers waits until the service answers GET /payments and at least n
// worker processes are alive, as the log tells. It fails the test if the
// process exits or a minute passes first.
func (p *exampleProc) waitWorkers(n int) {
	p.t.Helper()
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(time.Minute)
	for {
		select {
		case <-p.exited:
			p.t.Fatalf("example exited: %v\n%s", p.waitErr, p.log)
		default:
		}
		if len(p.Pids()) >= n {
			req, _ := http.NewRequest(http.MethodGet, p.URL+"/payments", nil)
			asCaller(req, testAccount)
			resp, err := client.Do(req)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("example not ready with %d workers after a minute\n%s", n, p.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Pids returns the pids of the live worker processes, in the order they
// started: those that logged "worker started" and of which the supervisor
// has not logged "worker exited". With -workers 1 it is the one process.
func (p *exampleProc) Pids() []int {
	log := p.log.String()
	exited := logPids(log, "worker exited")
	var live []int
	for _, pid := range logPids(log, "worker started") {
		if !slices.Contains(exited, pid) {
			live = append(live, pid)
		}
	}
	return live
}

// Kill sends SIGKILL to the worker pid, which must be one of Pids, and
// waits until it is gone from Pids. Under a supervisor (-workers above 1) a
// new worker takes its place: wait for it with waitWorkers. With -workers 1
// the worker is the example process itself: Kill waits for it to exit, and
// Stop then has nothing left to check.
func (p *exampleProc) Kill(pid int) {
	p.t.Helper()
	require.Contains(p.t, p.Pids(), pid, "not a live worker of this example")
	proc, err := os.FindProcess(pid)
	require.NoError(p.t, err)
	require.NoError(p.t, proc.Kill())
	if pid == p.cmd.Process.Pid {
		<-p.exited
		p.stopped = true
		return
	}
	require.Eventually(p.t, func() bool { return !slices.Contains(p.Pids(), pid) }, time.Minute,
		10*time.Millisecond, "the supervisor did not see worker %d exit\n%s", pid, p.log)
}

// killAtRandom SIGKILLs kills workers, one every interval, each chosen at
// random among the workers that were already running at the previous kill
// (so that no worker is killed right after its start), and returns their
// pids.
func (p *exampleProc) killAtRandom(kills int, interval time.Duration) []int {
	p.t.Helper()
	var killed, before []int
	for range kills {
		var pids, candidates []int
		for deadline := time.Now().Add(time.Minute); len(candidates) == 0; {
			// Every worker may have started since the last kill (restarts
			// are slow on a loaded machine): give them an interval more.
			require.True(p.t, time.Now().Before(deadline), "no worker ran a whole interval\n%s", p.log)
			time.Sleep(interval)
			pids = p.Pids()
			candidates = slices.DeleteFunc(slices.Clone(pids), func(pid int) bool {
				return before != nil && !slices.Contains(before, pid)
			})
			if len(candidates) == 0 {
				before = pids
			}
		}
		victim := candidates[rand.IntN(len(candidates))]
		before = pids
		p.Kill(victim)
		killed = append(killed, victim)
	}
	return killed
}

// Log returns everything the process and its workers have written so far.
func (p *exampleProc) Log() string { return p.log.String() }

// Stop sends SIGTERM and waits for the process to exit. The test fails if
// it does not exit cleanly within 30 seconds (it is then killed) or if the
// race detector reported anything. Stop runs at the end of every test that
// started the process; calling it again does nothing.
func (p *exampleProc) Stop() {
	p.t.Helper()
	if p.stopped {
		return
	}
	p.stopped = true
	_ = p.cmd.Process.Signal(syscall.SIGTERM) // it may have exited already
	select {
	case <-p.exited:
		assert.NoError(p.t, p.waitErr, "example exit status")
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
		p.t.Errorf("example did not stop within 30s of SIGTERM")
	}
	assert.NotContains(p.t, p.Log(), "WARNING: DATA RACE")
	if p.t.Failed() {
		p.t.Logf("example log:\n%s", p.Log())
	}
}

func TestExampleRefusesMemoryStoreWithWorkers(t *testing.T) {
	out, err := exec.Command(buildExample(t), "-addr", "127.0.0.1:0", "-store", "memory", "-workers", "2").CombinedOutput()
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "want a non-zero exit, got %v\n%s", err, out)
	assert.Equal(t, 2, exit.ExitCode())
	assert.Contains(t, string(out), "the memory store keeps its records inside one process")
	assert.Contains(t, string(out), "use -store redis, -store postgres or -store mysql")
}

// postTracked sends one payment request to p in the background, on a
// connection of its own: net/http's transport sends a request that carries
// an Idempotency-Key again, on a new connection, when a reused keep-alive
// connection dies before any response, and that second try would reach a
// restarted worker. The channel gets the request's error (nil if an answer
// came); holder tells which worker holds the connection's server end.
func postTracked(t *testing.T, p *exampleProc, key, body string) (<-chan error, func() int) {
	t.Helper()
	var mu sync.Mutex
	var clientAddr string
	dialer := &net.Dialer{}
	client := &http.Client{Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := dialer.DialContext(ctx, network, addr)
			if err == nil {
				mu.Lock()
				clientAddr = conn.LocalAddr().String()
				mu.Unlock()
			}
			return conn, err
		},
	}}
	req, err := http.NewRequest(http.MethodPost, p.URL+"/payments", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	asCaller(req, testAccount)
	done := make(chan error, 1)
	go func() {
		resp, err := client.Do(req)
		if err == nil {
			_ = resp.Body.Close()
		}
		done <- err
	}()
	holder := func() int {
		mu.Lock()
		defer mu.Unlock()
		return socketOwner(t, strings.TrimPrefix(p.URL, "http://"), clientAddr, p.Pids())
	}
	return done, holder
}

// socketOwner returns which of pids holds the server end, at server, of
// the TCP connection whose client end is at client (both IPv4 host:port).
func socketOwner(t *testing.T, server, client string, pids []int) int {
	t.Helper()
	tcp, err := os.ReadFile("/proc/net/tcp")
	require.NoError(t, err)
	local, remote := procAddr(t, server), procAddr(t, client)
	inode := ""
	for _, line := range strings.Split(string(tcp), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) > 9 && f[1] == local && f[2] == remote {
			inode = f[9]
		}
	}
	require.NotEmpty(t, inode, "no server socket for client %s", client)
	for _, pid := range pids {
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)) // a worker may be gone
		for _, fd := range fds {
			link, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
			if link == "socket:["+inode+"]" {
				return pid
			}
		}
	}
	t.Fatalf("no worker of %v holds the connection from %s", pids, client)
	return 0
}

// procAddr writes an IPv4 host:port as /proc/net/tcp does.
func procAddr(t *testing.T, hostport string) string {
	t.Helper()
	ap, err := netip.ParseAddrPort(hostport)
	require.NoError(t, err)
	ip := ap.Addr().As4()
	return fmt.Sprintf("%02X%02X%02X%02X:%04X", ip[3], ip[2], ip[1], ip[0], ap.Port())
}
