package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"time"
)

// workerEnv is set in the environment of a worker process: it makes the
// re-executed binary serve instead of supervising.
const workerEnv = "IDEMPOTENCY_EXAMPLE_WORKER"

const (
	// quickExit: a worker that exits sooner than this after it was started
	// counts as failing at start-up; the supervisor then waits a little
	// longer before each restart, up to maxQuickExits times 200 ms.
	quickExit = 2 * time.Second
	// maxQuickExits quick exits in a row of every worker make the
	// supervisor give up and exit. While another worker keeps running (a
	// backend outage stops new workers starting, not running ones serving),
	// a failing one is restarted every second instead.
	maxQuickExits = 5
	// stopTimeout is how long stopping waits for workers to finish their
	// requests before it kills them.
	stopTimeout = shutdownTimeout + 5*time.Second
)

// superviseWorkers runs cfg.workers copies of this binary, with the same
// flags, as worker processes sharing cfg.addr, until ctx ends.
func superviseWorkers(ctx context.Context, cfg config, logger *slog.Logger) error {
	// The workers bind cfg.addr with SO_REUSEPORT, which would let them
	// join the sockets of another server started the same way (another
	// copy of this example, say, with a store of its own) and split its
	// traffic. A plain bind fails on such a port, so try one first.
	probe, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return fmt.Errorf("%s is not free (is another copy of this example running?): %w", cfg.addr, err)
	}
	if err := probe.Close(); err != nil {
		return err
	}
	// Open the backend once here, so that a backend that cannot work fails
	// now, with its own message, rather than in a restart loop.
	_, _, closeBackend, err := openBackend(ctx, cfg, backendTimeout)
	if err != nil {
		return err
	}
	closeBackend()
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this binary to start workers: %w", err)
	}
	s := supervisor{workers: cfg.workers, log: logger, command: func() *exec.Cmd {
		cmd := exec.Command(exe, os.Args[1:]...)
		cmd.Env = append(os.Environ(), workerEnv+"=1")
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		cmd.SysProcAttr = workerAttr()
		return cmd
	}}
	logger.Info("supervisor started", "pid", os.Getpid(), "workers", cfg.workers, "store", cfg.store)
	if err := s.run(ctx); err != nil {
		return err
	}
	logger.Info("supervisor stopped", "pid", os.Getpid())
	return nil
}

// supervisor keeps a number of worker processes running: it starts them,
// starts another whenever one exits, and stops them all when asked.
type supervisor struct {
	workers int
	command func() *exec.Cmd // a new, unstarted worker process
	log     *slog.Logger
}

// workerExit tells the supervisor that the worker in slot has exited.
type workerExit struct {
	slot   int
	pid    int
	err    error
	uptime time.Duration
}

// run starts the workers and keeps them running until ctx ends, then stops
// them and returns nil. It returns an error, after stopping the others, if
// a worker cannot be started, or if every worker keeps exiting right after
// its start (see maxQuickExits).
func (s *supervisor) run(ctx context.Context) error {
	exits := make(chan workerExit)
	live := make(map[int]*os.Process)
	start := func(slot int) error {
		cmd := s.command()
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("starting a worker: %w", err)
		}
		live[cmd.Process.Pid] = cmd.Process
		s.log.Info("worker spawned", "pid", cmd.Process.Pid)
		began := time.Now()
		go func() {
			err := cmd.Wait()
			exits <- workerExit{slot: slot, pid: cmd.Process.Pid, err: err, uptime: time.Since(began)}
		}()
		return nil
	}

	var err error
	for slot := 0; slot < s.workers && err == nil; slot++ {
		err = start(slot)
	}
	quick := make([]int, s.workers)
	for err == nil && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case e := <-exits:
			delete(live, e.pid)
			s.log.Warn("worker exited", "pid", e.pid, "err", e.err, "uptime", e.uptime)
			if e.uptime >= quickExit {
				quick[e.slot] = 0
			} else {
				quick[e.slot]++
			}
			if !slices.ContainsFunc(quick, func(n int) bool { return n < maxQuickExits }) {
				err = fmt.Errorf("every worker exited %d times in a row right after starting; giving up", maxQuickExits)
				continue
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(min(quick[e.slot], maxQuickExits)) * 200 * time.Millisecond):
				s.log.Info("restarting the worker", "exited", e.pid)
				err = start(e.slot)
			}
		}
	}
	s.stop(live, exits)
	return err
}

// stop sends SIGTERM to every live worker, kills those still running after
// stopTimeout, and returns once all have exited.
func (s *supervisor) stop(live map[int]*os.Process, exits <-chan workerExit) {
	for _, p := range live {
		_ = p.Signal(syscall.SIGTERM) // it may have exited already; its exit is still received below
	}
	timeout := time.After(stopTimeout)
	for len(live) > 0 {
		select {
		case e := <-exits:
			delete(live, e.pid)
			s.log.Info("worker exited", "pid", e.pid, "err", e.err)
		case <-timeout:
			for pid, p := range live {
				s.log.Warn("worker did not stop in time; killing it", "pid", pid)
				_ = p.Kill()
			}
			timeout = nil
		}
	}
}
