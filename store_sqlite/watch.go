package sqlitestore

import (
	"context"
	"errors"
	"sync"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/keywatch"
)

var _ store.Watcher = (*Store)(nil)

// errOneConnection is what Watch returns for a database of one connection,
// which the poller would take from the store's own statements.
var errOneConnection = errors.New("sqlitestore: watch: the database allows one connection, which the poller would hold; poll")

// Watch implements store.Watcher. SQLite tells no connection about
// another's commits, so a watch is woken two ways:
//
//   - the Complete or Release of the key by this Store wakes its watchers
//     at once, when the statement has committed;
//   - while at least one key is watched, a goroutine of the store (the
//     poller) holds one connection of its database and asks it every 2 ms
//     whether any other connection, of this process or another, committed
//     since its last look (PRAGMA data_version). After a commit, and after
//     each new watch, it reads in one query which watched keys are still in
//     flight under a live lease, and wakes the watchers of the others.
//
// So a watch of a key that is missing, done, or in flight under a lease
// that has ended is closed by the poller's first look, a few milliseconds
// after Watch; a completion by another Store, a sweep of the row, or a
// lease that lapses are seen at the first commit after them. The poller
// stops when the last watch stops, whose stop waits for it to return its
// connection (at most the end of its current query), and starts again
// with the next watch. If it fails (the database was closed, say), it logs
// the error with the store's logger (see WithLogger), wakes every watcher
// and stops.
//
// Watch needs a database that allows at least two connections: on one of
// db.SetMaxOpenConns(1) it returns an error, and the caller polls. It
// never touches the database itself, and ctx is unused. Nothing is
// allocated for watches by Complete and Release while no key is watched.
func (s *Store) Watch(_ context.Context, key string) (<-chan struct{}, func(), error) {
	if s.db.Stats().MaxOpenConnections == 1 {
		return nil, nil, errOneConnection
	}
	row := store.HashKey(key)
	w := &s.watches
	w.mu.Lock()
	defer w.mu.Unlock()
	kw := w.keys.Add(row)
	w.fresh = true
	if w.poller == nil {
		ctx, cancel := context.WithCancel(context.Background())
		w.poller = &poller{cancel: cancel, exited: make(chan struct{})}
		go s.poll(ctx, w.poller.exited)
	}
	return kw.Changed(), func() { w.unwatch(row, kw) }, nil
}

// watches are the keys of a store being watched.
type watches struct {
	mu     sync.Mutex
	keys   keywatch.Set // by row key
	fresh  bool         // a key was watched since the poller's last look at the keys
	poller *poller      // the running poller; nil when none runs
}

// poller is a running poller (see Store.poll).
type poller struct {
	cancel context.CancelFunc // ends it; called with watches.mu held
	exited chan struct{}      // closed when it has returned
}

// unwatch stops one of kw's watchers of row (see keywatch.Set.Stop), and
// the last watch of the store stops the poller and waits for it, so that
// its connection is back in the pool on return.
func (w *watches) unwatch(row string, kw *keywatch.Watch) {
	w.mu.Lock()
	w.keys.Stop(row, kw)
	p := w.poller
	if w.keys.Len() > 0 || p == nil {
		w.mu.Unlock()
		return
	}
	w.poller = nil
	p.cancel()
	w.mu.Unlock()
	<-p.exited
}

// watched returns the watch of key, if it is watched: while no key is
// watched it returns nil before it hashes key.
func (w *watches) watched(key string) (row string, kw *keywatch.Watch) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.keys.Len() == 0 {
		return "", nil
	}
	row = store.HashKey(key)
	return row, w.keys.Watched(row)
}

// wake closes kw, the watch of row, unless it was woken already (by the
// poller, or by another completion), and forgets it: a later watch of the
// key gets a watch of its own.
func (w *watches) wake(row string, kw *keywatch.Watch) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.keys.WakeWatch(row, kw)
}

// endingExec runs ownerExec for a statement that takes key out of flight
// (complete, release), and once it succeeded wakes the watchers of key
// whose watch started before it: a watch that starts later, perhaps of a
// new claim of the key, is left to the poller's look.
func (s *Store) endingExec(ctx context.Context, op, sql, key string, owner store.Lease, args ...any) error {
	row, kw := s.watches.watched(key)
	if err := s.ownerExec(ctx, op, ending, sql, key, owner, args...); err != nil {
		return err
	}
	if kw != nil {
		s.watches.wake(row, kw)
	}
	return nil
}
