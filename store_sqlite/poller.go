package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"time"

	"github.com/seed43327c4c/idempotency/store/keywatch"
)

// pollInterval is how often the poller runs dataVersionSQL.
const pollInterval = 2 * time.Millisecond

// dataVersionSQL changes between two runs on one connection if and only if
// another connection, of any process, committed in between; the poller's
// connection commits nothing.
const dataVersionSQL = `PRAGMA data_version`

// inFlightSQL returns which row keys of the JSON array ?1 are in flight
// under a live lease: the next Claim of any other decides without waiting.
var inFlightSQL = onSQLiteClock(`
SELECT key FROM idempotency_keys
WHERE key IN (SELECT value FROM json_each(?1)) AND state = 1 AND expires_at > NOW`)

// poll is the poller (see Watch); it closes exited on return. ctx bounds
// the wait for the connection, not the statements: under a context that
// can end, the driver starts a goroutine per statement.
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

// toLookAt returns the watched keys and their watches if another
// connection committed or a key was newly watched, and otherwise none.
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

// look wakes kws[i], the watch of rows[i], if rows[i] is not in flight.
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

// pollFailed logs err, wakes every watch (a commit may go unseen until the
// next watch starts a poller) and ends the poller, unless the last watch
// stopped it already.
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
