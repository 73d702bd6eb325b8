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
// lock taken shared on the store's listening connection (see listener),
// for as long as it watches. The lock is the mark that someone waits: the
// statement that takes the key out of flight (completeSQL, releaseSQL, and
// so a transactional Commit) tries the same lock exclusively, and notifies
// the table's channel only when it cannot have it. A completion nobody
// watches thus sends no notification, and costs no more than one advisory
// lock taken and released, as a claim's is; the row carries no mark, so
// neither the table's size nor its HOT updates change, and a mark dies
// with the session that held it.
//
// The lock is in the two-int4 space of advisory locks, apart from the
// claims' bigint one: the table's OID and 32 bits of the row's key (its
// bytes 8 to 11; lockHash takes 0 to 7). Two keys whose bits are the same
// only cost a notification nobody needs.
const (
	// watchLockKeySQL is the watch lock of key $1.
	watchLockKeySQL = `'idempotency_keys'::regclass::oid::int4,
    ('x' || encode(substring($1::bytea FROM 9 FOR 4), 'hex'))::bit(32)::int4`

	// channelSQL is the table's channel: one per table, named after its
	// OID, which fits any schema and table name in a channel's 63 bytes.
	channelSQL = `'pgstore_' || 'idempotency_keys'::regclass::oid`

	// wakeSQL ends completeSQL and releaseSQL, whose UPDATE is the CTE done
	// returning the key: one row per row updated, so the command's row
	// count is the UPDATE's. If a watcher holds the key's watch lock, it
	// notifies the table's channel with the key in hex, delivered when the
	// transaction commits and never if it rolls back. Otherwise it holds
	// the lock until the commit, so a watcher arriving meanwhile waits for
	// the commit and then finds the key done (see watchLockSQL).
	wakeSQL = `
SELECT CASE WHEN pg_try_advisory_xact_lock(` + watchLockKeySQL + `) THEN NULL
            ELSE pg_notify(` + channelSQL + `, encode(done.key, 'hex')) END
FROM done`

	// watchLockSQL takes key $1's watch lock, shared with the key's other
	// watchers, waiting (at most the listener's lock_timeout) for a
	// completion holding it to commit. It must be a statement of its own,
	// before watchStateSQL: a statement's snapshot is taken when it starts,
	// and one taken before that wait would miss the completion.
	watchLockSQL = `SELECT pg_advisory_lock_shared(` + watchLockKeySQL + `)`

	// watchStateSQL tells whether key $1 ($2 its lockHash) is in flight:
	// its row is in flight under an owner (a released row has no token), or
	// an open transaction holds the key (a transactional claim, whose row
	// cannot be seen before it commits). The transaction holds the key's
	// claim lock exclusively; a plain claim's shared hold does not count.
	// The lock is tried at session level and released at once, within the
	// statement: a transaction-level hold would last as long as the
	// listener's batch, and a transactional claim of the key meanwhile
	// would find the key held.
	watchStateSQL = `
SELECT CASE WHEN pg_try_advisory_lock_shared(` + claimLockSQL + `$2::bigint)
            THEN NOT pg_advisory_unlock_shared(` + claimLockSQL + `$2::bigint)
            ELSE true END
    OR EXISTS (SELECT FROM idempotency_keys WHERE key = $1 AND state = 1 AND token <> '')`

	// unwatchSQL releases one hold of key $1's watch lock.
	unwatchSQL = `SELECT pg_advisory_unlock_shared(` + watchLockKeySQL + `)`
)

// errClosed is what Watch returns after Close.
var errClosed = errors.New("the store is closed")

// Watch implements store.Watcher. The first call starts the store's
// listener: one connection of its own, made from the pool's configuration,
// that listens on the table's channel until Close. Each call costs one
// round trip on that connection, shared with the calls queued meanwhile,
// and the first waits for the connection to be made (at most ctx); stop
// costs nothing to the caller, its lock being released by the listener.
// A key held by an open transaction (a TxStore's claim) is in flight: its
// watchers are woken by the transaction's Commit, not by a rollback, which
// the caller's poll finds.
// While the listener's connection is down (lost, being made again with a
// backoff) Watch returns an error, and the loss of the connection wakes
// every watcher at once, in flight or not, so that each looks again and
// polls. The sweeper's removal of an abandoned row wakes nobody either.
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

// Close ends the listener Watch started, if any, waking every watcher, and
// waits for its connection to close; Watch fails afterwards. It does not
// close the pool, and the store's other methods keep working. Calling it
// more than once, or on a store never watched, does nothing more.
func (s *Store) Close() {
	s.listener.close()
}

// watch is one call of Watch.
type watch struct {
	row     []byte // the key's row key
	payload string // how the table's channel names the key: row in hex
	changed chan struct{}
	result  chan error // receives the outcome of the watch's statements, once

	// Guarded by the listener's mu.
	gen     uint64 // the connection whose session holds the watch lock; 0 for none
	stopped bool   // stop was called
}

func newWatch(key string) *watch {
	row := rowKey(key)
	return &watch{row: row, payload: hex.EncodeToString(row), changed: make(chan struct{}), result: make(chan error, 1)}
}
