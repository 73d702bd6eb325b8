package pgstore

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/seed43327c4c/idempotency/store"
)

var (
	_ store.Watcher = (*Store)(nil)
	_ store.Watcher = (*TxStore)(nil)
)

// A watcher of a key holds the key's watch lock, a session-level advisory
// lock taken shared on the store's listening connection. The statement
// that takes the key out of flight tries it exclusively and notifies only
// when it cannot have it, so a completion nobody watches sends nothing. The
// lock is the table's OID and bytes 8 to 11 of the row's key, in the
// two-int4 space apart from the claims' locks.
const (
	watchLockKeySQL = `'idempotency_keys'::regclass::oid::int4,
    ('x' || encode(substring($1::bytea FROM 9 FOR 4), 'hex'))::bit(32)::int4`

	// channelSQL is named after the table's OID, which fits any name in a
	// channel's 63 bytes.
	channelSQL = `'pgstore_' || 'idempotency_keys'::regclass::oid`

	// wakeSQL ends completeSQL and releaseSQL (the CTE done, one row per
	// row updated). If a watcher holds the watch lock, it notifies the key
	// in hex at commit; otherwise it holds the lock until the commit, so a
	// watcher arriving meanwhile waits and then finds the key done.
	wakeSQL = `
SELECT CASE WHEN pg_try_advisory_xact_lock(` + watchLockKeySQL + `) THEN NULL
            ELSE pg_notify(` + channelSQL + `, encode(done.key, 'hex')) END
FROM done`

	// watchLockSQL takes key $1's watch lock shared, waiting for a
	// completion holding it to commit. It must be a statement of its own,
	// before watchStateSQL: a snapshot taken before that wait would miss
	// the completion.
	watchLockSQL = `SELECT pg_advisory_lock_shared(` + watchLockKeySQL + `)`

	// watchStateSQL tells whether key $1 ($2 its lockHash) is in flight:
	// its row is in flight under an owner, or an open transaction holds the
	// key's claim lock exclusively. The lock is tried at session level and
	// released within the statement: a transaction-level hold would last
	// the listener's batch, and a transactional claim meanwhile would find
	// the key held.
	watchStateSQL = `
SELECT CASE WHEN pg_try_advisory_lock_shared(` + claimLockSQL + `$2::bigint)
            THEN NOT pg_advisory_unlock_shared(` + claimLockSQL + `$2::bigint)
            ELSE true END
    OR EXISTS (SELECT FROM idempotency_keys WHERE key = $1 AND state = 1 AND token <> '')`

	unwatchSQL = `SELECT pg_advisory_unlock_shared(` + watchLockKeySQL + `)`
)

var errClosed = errors.New("the store is closed")

// Watch implements store.Watcher. The first call starts the store's
// listener, a connection of its own made from the pool's configuration,
// until Close. A transactional claim's watchers are woken by its Commit,
// not by a rollback. While the listener's connection is down Watch returns
// an error, and its loss wakes every watcher.
func (s *Store) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	w := newWatch(key)
	if err := s.listener.enqueue(w); err != nil {
		return nil, nil, fmt.Errorf("pgstore: watch: %w", err)
	}
	select {
	case err := <-w.result:
		if err != nil {
			return nil, nil, fmt.Errorf("pgstore: watch: %w", err)
		}
	case <-ctx.Done():
		s.listener.stop(w)
		return nil, nil, fmt.Errorf("pgstore: watch: %w", ctx.Err())
	}
	return w.changed, func() { s.listener.stop(w) }, nil
}

// Close ends the listener Watch started, if any, waking every watcher;
// Watch fails afterwards. It does not close the pool. Calling it again does
// nothing.
func (s *Store) Close() {
	s.listener.close()
}

type watch struct {
	row     []byte
	payload string // row in hex
	changed chan struct{}
	result  chan error

	// Guarded by the listener's mu.
	gen     uint64 // the connection whose session holds the watch lock; 0 for none
	stopped bool   // stop was called
}

func newWatch(key string) *watch {
	row := rowKey(key)
	return &watch{row: row, payload: hex.EncodeToString(row), changed: make(chan struct{}), result: make(chan error, 1)}
}
