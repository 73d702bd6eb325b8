package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"time"

	"github.com/seed43327c4c/idempotency/store/keywatch"
)

// pollInterval is how often the poller asks its connection whether another
// connection committed (see Watch).
const pollInterval = 2 * time.Millisecond

// dataVersionSQL returns a number that changes between two of its runs on
// one connection if, and only if, another connection committed to the
// file in between, in this process or another: SQLite reads it from the
// WAL index, so it costs no disk read. The connection's own commits do not
// change it; the poller's connection makes none.
const dataVersionSQL = `PRAGMA data_version`

// inFlightSQL returns which of the row keys in the JSON array ?1 are in
// flight under a lease that has not ended on SQLite's clock: the others
// are done, missing (never claimed, or swept), released (whose lease
// ended when it was released) or lapsed, and the next Claim of each
// decides without waiting.
var inFlightSQL = onSQLiteClock(`
SELECT key FROM idempotency_keys
WHERE key IN (SELECT value FROM json_each(?1)) AND state = 1 AND expires_at > NOW`)

// poll is the poller (see Watch): it runs until ctx ends, on one
// connection of the store's database, and looks at the watched keys when
// another connection has committed, which it asks every s.pollEvery, or
// when a key was newly watched; its first look comes after one interval
// too. It closes exited when it returns. ctx bounds the wait for the
// connection, not the statements: under a context that can end, the
// driver starts a goroutine for each statement.
func (s *Store) poll(ctx context.Context, exited chan<- struct{}) {
	defer close(exited)
	conn, err := s.db.Conn(ctx)
	if err != nil {
		s.pollFailed(ctx, err)
		return
	}
	defer conn.Close()
	ticker := time.NewTicker(s.pollEvery)
	defer ticker.Stop()
	var seen int64 // the data version of the last look
	for {
		select {
		case <-ticker.C:
		case <-ctx.Done():
			return
		}
		var version int64
		if err := conn.QueryRowContext(context.Background(), dataVersionSQL).Scan(&version); err != nil {
			s.pollFailed(ctx, err)
			return
		}
		if rows, kws := s.watches.toLookAt(version != seen); len(rows) > 0 {
			if err := s.look(conn, rows, kws); err != nil {
				s.pollFailed(ctx, err)
				return
			}
			seen = version
		}
	}
}

// toLookAt returns the watched keys and their watches when the poller is
// to look at them: after a commit by another connection (committed), or
// when a key was newly watched. Otherwise it returns none.
func (w *watches) toLookAt(committed bool) (rows []string, kws []*keywatch.Watch) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !committed && !w.fresh {
		return nil, nil
	}
	w.fresh = false
	for row, kw := range w.keys.All() {
		rows = append(rows, row)
		kws = append(kws, kw)
	}
	return rows, kws
}

// look reads which of rows are in flight and wakes the watches of the
// others, kws[i] being the watch of rows[i] when the poller took it.
func (s *Store) look(conn *sql.Conn, rows []string, kws []*keywatch.Watch) error {
	list, err := json.Marshal(rows)
	if err != nil {
		return err
	}
	found, err := conn.QueryContext(context.Background(), inFlightSQL, string(list))
	if err != nil {
		return err
	}
	defer found.Close()
	inFlight := make(map[string]bool)
	for found.Next() {
		var row string
		if err := found.Scan(&row); err != nil {
			return err
		}
		inFlight[row] = true
	}
	if err := found.Err(); err != nil {
		return err
	}
	s.watches.mu.Lock()
	defer s.watches.mu.Unlock()
	for i, row := range rows {
		if !inFlight[row] {
			s.watches.keys.WakeWatch(row, kws[i])
		}
	}
	return nil
}

// pollFailed ends the poller of ctx after err, unless the last watch has
// stopped it meanwhile: err is logged, and every watch is woken, since a
// commit may go unseen until the next watch starts another poller.
func (s *Store) pollFailed(ctx context.Context, err error) {
	w := &s.watches
	w.mu.Lock()
	defer w.mu.Unlock()
	if ctx.Err() != nil { // the last watch stopped it: w.poller is another's, or nil
		return
	}
	s.logger.Error("sqlitestore: the poller of waiting requests failed; they poll meanwhile", "err", err)
	for row, kw := range w.keys.All() {
		w.keys.WakeWatch(row, kw)
	}
	w.poller = nil
}
