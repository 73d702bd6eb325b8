package pgstore

import (
	"fmt"
	"strings"
	"time"
)

// WithTombstones makes the store keep, for d after a done row's retention
// ends, a tombstone of it (its key, fingerprint, fence and completion
// time), which Claim returns as a store.StateExpired record, so that a
// retry later than the retention is refused instead of run again. Off by
// default; d must be positive, in whole microseconds.
func WithTombstones(d time.Duration) Option {
	if d <= 0 {
		panic("pgstore: WithTombstones expects d > 0")
	}
	return func(s *Store) { s.tombstones = d }
}

// tombstoneTimeSQL stands for the store's tombstone time in its statements;
// newStatements writes the interval in its place.
const tombstoneTimeSQL = `'@tombstones'::interval`

// rowEndSQL is when row t ends, to be swept or taken over: a done row's
// retention end plus the tombstone time, any other row's expires_at. A
// done row between the two is a tombstone, whether or not the sweeper has
// yet turned it into one (entombSQL), so a claim never writes to show one.
const rowEndSQL = `(t.expires_at + CASE WHEN t.state IN (2, 3) THEN ` + tombstoneTimeSQL + ` ELSE interval '0' END)`

// rowStateSQL is row t's state as a claim reports it: expired (4) once a
// done row's retention has ended.
const rowStateSQL = `CASE WHEN t.state IN (2, 3) AND t.expires_at <= statement_timestamp() THEN 4::smallint ELSE t.state END`

// tombstoneReplacer writes d in place of tombstoneTimeSQL.
func tombstoneReplacer(d time.Duration) *strings.Replacer {
	return strings.NewReplacer(tombstoneTimeSQL, fmt.Sprintf("interval '%d microseconds'", d.Microseconds()))
}
