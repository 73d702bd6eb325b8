package pgstore

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
)

const (
	// listenerLockTimeout bounds how long a watch waits for a completion
	// holding its key's watch lock to commit (see watchLockSQL): a plain
	// completion holds it for its commit, a transactional Commit for one
	// round trip more. Past it the connection is made again.
	listenerLockTimeout = "1s"
	// listenerTimeout bounds making the listener's connection and each
	// exchange on it; past it the connection is taken for dead.
	listenerTimeout = 10 * time.Second
	// firstBackoff and maxBackoff bound the wait before the listener makes
	// its connection again after losing it: the first, doubled after each
	// failure that follows.
	firstBackoff = 100 * time.Millisecond
	maxBackoff   = 5 * time.Second
	// listenerName is the listener's application_name unless the pool's
	// configuration sets one.
	listenerName = "pgstore listener"
)

// errListenerDown is what Watch returns while the listener's connection is
// being made again.
var errListenerDown = errors.New("the listening connection is down; poll")

// listenerState is whether the listener serves watches.
type listenerState int

const (
	listenerIdle       listenerState = iota // never started
	listenerConnecting                      // making its first connection: watches wait for it
	listenerUp                              // listening: watches are served
	listenerDown                            // lost its connection, making it again: watches fail
	listenerClosed                          // Close was called
)

// listener is a store's listening connection and its watchers. One
// goroutine (run) owns the connection: it LISTENs on the table's channel,
// runs the watches' statements in turn, and otherwise waits for a
// notification, which it dispatches to the watchers of the key named in
// the payload. A watch queued while it waits interrupts the wait; a
// notification arriving during a statement is kept by pgx for the next
// wait. Any error on the connection ends it: its session's watch locks go
// with it, so every watcher is woken, the queued watches fail, and the
// connection is made again after a backoff.
type listener struct {
	s *Store

	mu        sync.Mutex
	state     listenerState
	gen       uint64                         // counts connections made; the current one while up
	pid       uint32                         // the current connection's backend, for tests
	queue     []*watch                       // watches whose statements have not run
	unlocks   [][]byte                       // rows whose watch lock to release once on connection gen
	watchers  map[string]map[*watch]struct{} // watches in flight, by payload
	interrupt context.CancelFunc             // ends the current wait for a notification
	cancel    context.CancelFunc             // ends run
	ended     chan struct{}                  // closed when run has returned
}

func newListener(s *Store) *listener {
	return &listener{s: s, watchers: make(map[string]map[*watch]struct{})}
}

// enqueue queues w's statements, starting the listener on the first call.
func (l *listener) enqueue(w *watch) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch l.state {
	case listenerClosed:
		return errClosed
	case listenerDown:
		return errListenerDown
	case listenerIdle:
		ctx, cancel := context.WithCancel(context.Background())
		l.state, l.cancel, l.ended = listenerConnecting, cancel, make(chan struct{})
		go l.run(ctx)
	}
	l.queue = append(l.queue, w)
	l.wakeRun()
	return nil
}

// stop ends w: it no longer waits, and its watch lock, if its connection
// still holds it, is released by run.
func (l *listener) stop(w *watch) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if w.stopped {
		return
	}
	w.stopped = true
	delete(l.watchers[w.payload], w)
	if len(l.watchers[w.payload]) == 0 {
		delete(l.watchers, w.payload)
	}
	if w.gen != 0 && w.gen == l.gen && l.state == listenerUp {
		l.unlocks = append(l.unlocks, w.row)
		l.wakeRun()
	}
}

// wakeRun interrupts run's wait for a notification, if it waits, so that
// it runs what was queued. l.mu is held.
func (l *listener) wakeRun() {
	if l.interrupt != nil {
		l.interrupt()
	}
}

// close ends run, if it was started, and waits for it.
func (l *listener) close() {
	l.mu.Lock()
	started := l.state != listenerIdle && l.state != listenerClosed
	l.state = listenerClosed
	l.mu.Unlock()
	if started {
		l.cancel()
		<-l.ended
	}
}

// run makes the listening connection and serves it, again after each
// loss, until ctx ends.
func (l *listener) run(ctx context.Context) {
	defer close(l.ended)
	backoff := firstBackoff
	for {
		conn, err := l.connect(ctx)
		if err == nil {
			backoff = firstBackoff
			err = l.serve(ctx, conn)
			closeCtx, cancel := context.WithTimeout(context.Background(), listenerTimeout)
			_ = conn.Close(closeCtx) // the connection is done with either way
			cancel()
		}
		l.lost(err)
		if ctx.Err() != nil {
			return
		}
		l.s.logger.ErrorContext(ctx, "pgstore: the listener for waiting requests lost its connection; they poll meanwhile",
			"table", l.s.name, "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// connect makes a connection from the pool's configuration that listens
// on the table's channel, and marks the listener up.
func (l *listener) connect(ctx context.Context) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, listenerTimeout)
	defer cancel()
	cfg := l.s.pool.Config().ConnConfig
	cfg.OnNotification = nil // pgx keeps them for WaitForNotification
	// A watch interrupts WaitForNotification by ending its context, and
	// the connection's read deadline ends the wait at once, leaving the
	// connection usable. A pool that sends a cancel request instead would
	// make each interrupt last until its fallback deadline: an idle
	// server ignores the request (or it cancels the next statement).
	cfg.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: c.Conn()}
	}
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = make(map[string]string)
	}
	params := cfg.RuntimeParams
	// Each statement sees what committed before it (see watchLockSQL).
	params["default_transaction_isolation"] = "read committed"
	params["lock_timeout"] = listenerLockTimeout
	if params["application_name"] == "" {
		params["application_name"] = listenerName
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	// The pool's own set-up (a search_path, say) applies here too, so that
	// the table's name means the table the store's statements use.
	if after := l.s.pool.Config().AfterConnect; after != nil {
		err = after(ctx, conn)
	}
	var channel string
	if err == nil {
		err = conn.QueryRow(ctx, l.s.sql.channel).Scan(&channel)
	}
	if err == nil {
		_, err = conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize())
	}
	if err != nil {
		_ = conn.Close(ctx)
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.state, l.gen, l.pid = listenerUp, l.gen+1, conn.PgConn().PID()
	return conn, nil
}

// serve runs the queued statements on conn and dispatches its
// notifications until an error, or ctx ending, ends it.
func (l *listener) serve(ctx context.Context, conn *pgx.Conn) error {
	for {
		l.mu.Lock()
		queue, unlocks, gen := l.queue, l.unlocks, l.gen
		l.queue, l.unlocks = nil, nil
		waitCtx, interrupt := context.WithCancel(ctx)
		l.interrupt = interrupt
		l.mu.Unlock()

		if len(queue) > 0 || len(unlocks) > 0 {
			interrupt()
			if err := l.runQueued(ctx, conn, gen, queue, unlocks); err != nil {
				l.fail(queue, err)
				return err
			}
			continue
		}
		n, err := conn.WaitForNotification(waitCtx)
		interrupted := waitCtx.Err() != nil
		interrupt()
		if n != nil {
			l.dispatch(n.Payload)
		}
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil && !interrupted:
			return err
		}
	}
}

// runQueued releases one hold of each of unlocks' watch locks, then
// starts each of queue's watches on conn (connection gen), all in one
// round trip: it takes the watch's lock, then reads whether its key is in
// flight, and registers the watch or wakes it at once. Registering after
// the read leaves no gap: a notification that arrived meanwhile waits in
// pgx for the next WaitForNotification, which comes after.
func (l *listener) runQueued(ctx context.Context, conn *pgx.Conn, gen uint64, queue []*watch, unlocks [][]byte) error {
	ctx, cancel := context.WithTimeout(ctx, listenerTimeout)
	defer cancel()
	var b pgx.Batch
	for _, row := range unlocks {
		b.Queue(l.s.sql.unwatch, row)
	}
	inFlight := make([]bool, len(queue))
	for i, w := range queue {
		// Statements of their own, so that each read's snapshot is taken
		// after its lock (see watchLockSQL).
		b.Queue(l.s.sql.watchLock, w.row)
		b.Queue(l.s.sql.watchState, w.row, lockHash(w.row)).QueryRow(func(row pgx.Row) error { return row.Scan(&inFlight[i]) })
	}
	if err := conn.SendBatch(ctx, &b).Close(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, w := range queue {
		w.gen = gen
		switch {
		case w.stopped: // Watch gave up waiting for this
			l.unlocks = append(l.unlocks, w.row)
		case inFlight[i]:
			if l.watchers[w.payload] == nil {
				l.watchers[w.payload] = make(map[*watch]struct{})
			}
			l.watchers[w.payload][w] = struct{}{}
		default:
			close(w.changed)
		}
		w.result <- nil
	}
	return nil
}

// dispatch wakes the watchers of the key whose notification's payload is
// payload.
func (l *listener) dispatch(payload string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for w := range l.watchers[payload] {
		close(w.changed)
	}
	delete(l.watchers, payload)
}

// fail ends watches whose statements did not run with err.
func (l *listener) fail(queue []*watch, err error) {
	for _, w := range queue {
		w.result <- err
	}
}

// lost marks the listener down (unless it is closed) after its connection
// ended with err, or failed to be made: every watcher is woken, since the
// locks that marked them went with the session, and the queued watches
// fail.
func (l *listener) lost(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != listenerClosed {
		l.state = listenerDown
		err = errors.Join(errListenerDown, err)
	} else {
		err = errClosed
	}
	l.gen++ // no unlock is meant for the next connection
	for _, ws := range l.watchers {
		for w := range ws {
			close(w.changed)
		}
	}
	clear(l.watchers)
	l.fail(l.queue, err)
	l.queue, l.unlocks, l.interrupt = nil, nil, nil
}
