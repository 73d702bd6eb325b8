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
	// listenerLockTimeout bounds a watch's wait for a completion holding
	// its key's watch lock to commit; past it the connection is made again.
	listenerLockTimeout = "1s"
	// listenerTimeout bounds making the connection and each exchange on it.
	listenerTimeout = 10 * time.Second
	// firstBackoff, doubled after each failure up to maxBackoff, is the
	// wait before the connection is made again.
	firstBackoff = 100 * time.Millisecond
	maxBackoff   = 5 * time.Second
	listenerName = "pgstore listener"
)

var errListenerDown = errors.New("the listening connection is down; poll")

type listenerState int

const (
	listenerIdle       listenerState = iota
	listenerConnecting               // making its first connection: watches wait for it
	listenerUp
	listenerDown // making its connection again: watches fail
	listenerClosed
)

// listener is a store's listening connection and its watchers. One
// goroutine (run) owns the connection: it runs the queued watches'
// statements, and otherwise waits for notifications, which a queued watch
// interrupts. Any error ends the connection, and its session's watch locks
// with it, so every watcher is woken and the connection is made again.
type listener struct {
	s *Store

	mu        sync.Mutex
	state     listenerState
	gen       uint64                         // counts connections made; the current one while up
	pid       uint32                         // for tests
	queue     []*watch                       // watches whose statements have not run
	unlocks   [][]byte                       // watch locks to release once on connection gen
	watchers  map[string]map[*watch]struct{} // by payload
	interrupt context.CancelFunc             // ends the current wait for a notification
	cancel    context.CancelFunc
	ended     chan struct{}
}

func newListener(s *Store) *listener {
	return &listener{s: s, watchers: make(map[string]map[*watch]struct{})}
}

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

// stop ends w; run releases its watch lock.
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

// wakeRun interrupts run's wait for a notification; l.mu is held.
func (l *listener) wakeRun() {
	if l.interrupt != nil {
		l.interrupt()
	}
}

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

func (l *listener) run(ctx context.Context) {
	defer close(l.ended)
	backoff := firstBackoff
	for {
		conn, err := l.connect(ctx)
		if err == nil {
			backoff = firstBackoff
			err = l.serve(ctx, conn)
			closeCtx, cancel := context.WithTimeout(context.Background(), listenerTimeout)
			_ = conn.Close(closeCtx)
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

func (l *listener) connect(ctx context.Context) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, listenerTimeout)
	defer cancel()
	cfg := l.s.pool.Config().ConnConfig
	cfg.OnNotification = nil // pgx keeps them for WaitForNotification
	// A watch interrupts WaitForNotification by ending its context: the
	// read deadline ends the wait at once and leaves the connection usable,
	// where a cancel request would be ignored by an idle server.
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
	// The pool's set-up (a search_path) applies, so the table's name means
	// the same table.
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

// runQueued releases unlocks' watch locks, then starts queue's watches, in
// one round trip: each takes its lock, reads whether its key is in flight,
// and is registered or woken. Registering after the read leaves no gap: a
// notification that arrived meanwhile waits in pgx for the next wait.
func (l *listener) runQueued(ctx context.Context, conn *pgx.Conn, gen uint64, queue []*watch, unlocks [][]byte) error {
	ctx, cancel := context.WithTimeout(ctx, listenerTimeout)
	defer cancel()
	var b pgx.Batch
	for _, row := range unlocks {
		b.Queue(l.s.sql.unwatch, row)
	}
	inFlight := make([]bool, len(queue))
	for i, w := range queue {
		// Statements of their own: each read's snapshot follows its lock.
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

func (l *listener) dispatch(payload string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for w := range l.watchers[payload] {
		close(w.changed)
	}
	delete(l.watchers, payload)
}

func (l *listener) fail(queue []*watch, err error) {
	for _, w := range queue {
		w.result <- err
	}
}

// lost marks the listener down after its connection ended or failed to
// be made: every watcher is woken, since its lock went with the session.
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
