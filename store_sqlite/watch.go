package sqlitestore

import (
	"context"
	"errors"
	"sync"

	"github.com/seed43327c4c/idempotency/store"
	"github.com/seed43327c4c/idempotency/store/keywatch"
)

var _ store.Watcher = (*Store)(nil)

// errOneConnection refuses a db of one connection, which the poller would
// take from the store's statements.
var errOneConnection = errors.New("sqlitestore: watch: the database allows one connection, which the poller would hold; poll")

// Watch implements store.Watcher. This Store's Complete or Release wakes
// the key's watchers once committed; other writers' commits are seen by a
// poller that, while any key is watched, holds a connection of db and
// checks PRAGMA data_version every 2 ms. The last watch's stop returns once
// that connection is back. A failing poller logs, wakes every watcher and
// stops. Watch refuses a db of one connection (the caller then polls).
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

// watches are a store's watched keys.
type watches struct {
	mu     sync.Mutex
	keys   keywatch.Set // by row key
	fresh  bool         // a key was watched since the poller's last look
	poller *poller      // nil when none runs
}

// poller is a running poller (see Store.poll).
type poller struct {
	cancel context.CancelFunc // ends it; called with watches.mu held
	exited chan struct{}      // closed when it has returned
}

// unwatch stops one of kw's watchers of row. The store's last watch stops
// the poller and waits, so that its connection is back in the pool.
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

// watched returns key's watch, or nil, without hashing key while nothing
// is watched.
func (w *watches) watched(key string) (row string, kw *keywatch.Watch) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.keys.Len() == 0 {
		return "", nil
	}
	row = store.HashKey(key)
	return row, w.keys.Watched(row)
}

// wake closes kw, the watch of row, unless already woken, and forgets it:
// a later watch of the key gets its own.
func (w *watches) wake(row string, kw *keywatch.Watch) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.keys.WakeWatch(row, kw)
}

// endingExec runs ownerExec for complete or release, then wakes key's
// watch if it started before: a later one, perhaps of a new claim, is left
// to the poller.
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
