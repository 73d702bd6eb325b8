package mysqlstore

import (
	"context"
	"database/sql"
	_ "embed"
	"fmt"
	"strings"
	"time"
)

// schemaSQL creates the table, claimSQL its claim procedure; see Migrate.
var (
	//go:embed schema.sql
	schemaSQL string
	//go:embed claim.sql
	claimSQL string
)

// lockNameSQL is the name of the key named lock a transactional claim
// holds, as claim.sql computes it from the key column.
const lockNameSQL = "CONCAT('idempotency:', LEFT(SHA2(CONCAT(DATABASE(), '.idempotency_keys.', HEX(`key`)), 256), 52))"

// liveSQL is true for a row whose lease or retention has not ended.
const liveSQL = "IF(held = 1, IS_USED_LOCK(" + lockNameSQL + ") IS NOT NULL, expires_at > UTC_TIMESTAMP(6))"

// The owner's statements touch a key only while it is in flight under the
// owner's token and fence; the args after the SET's come in the order
// `key`, token, fence.
const (
	ownerWhereSQL = " WHERE `key` = ? AND token = ? AND fence = ? AND state = 1"

	callClaimSQL = "CALL `idempotency_keys_claim`(?, ?, ?, ?, ?, ?)"

	renewSQL = "UPDATE `idempotency_keys` SET expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND" +
		ownerWhereSQL + " AND held = 0"

	completeSQL = "UPDATE `idempotency_keys` SET state = ?, status = ?, header = ?, body = ?, held = 0," +
		" steps = NULL, step_names = NULL, step_count = 0, completed_at = UTC_TIMESTAMP(6)," +
		" expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND" + ownerWhereSQL

	// releaseSQL ends the lease and clears the token. The row stays in
	// flight, so the next claim takes it over with a higher fence.
	releaseSQL = "UPDATE `idempotency_keys` SET token = '', expires_at = UTC_TIMESTAMP(6)" +
		ownerWhereSQL + " AND held = 0"

	// ownedSQL reads the state of the row owner's token and fence last
	// wrote, to tell an update that changed nothing from a lost key.
	ownedSQL = "SELECT state, held FROM `idempotency_keys` WHERE `key` = ? AND token = ? AND fence = ?"
)

// statements holds the store's SQL, written against the default table
// name and rewritten once by New for the configured one, and prepares
// the hot ones on first use.
type statements struct {
	schema, claimProcedure          string // see Migrate
	claim, renew, complete, release *prepared
	owned, saveStep, stepState      *prepared
	rewrite                         *strings.Replacer
}

func newStatements(db *sql.DB, table string) statements {
	r := strings.NewReplacer(DefaultTable, table)
	p := func(query string) *prepared {
		return &prepared{db: db, query: r.Replace(query), lock: make(chan struct{}, 1)}
	}
	return statements{
		schema:         r.Replace(schemaSQL),
		claimProcedure: r.Replace(claimSQL),
		claim:          p(callClaimSQL),
		renew:          p(renewSQL),
		complete:       p(completeSQL),
		release:        p(releaseSQL),
		owned:          p(ownedSQL),
		saveStep:       p(saveStepSQL),
		stepState:      p(stepStateSQL),
		rewrite:        r,
	}
}

// txClaim is the transactional claim's CALL with its arguments written in
// (hex literals): one round trip on a connection the pool's prepared
// statement may not know.
func (s statements) txClaim(row, fingerprint, token []byte, tombstones time.Duration) string {
	return fmt.Sprintf("%s(X'%x', X'%x', X'%x', 0, TRUE, %d)", strings.TrimSuffix(s.claim.query, "(?, ?, ?, ?, ?, ?)"),
		row, fingerprint, token, tombstones.Microseconds())
}

// prepared is a statement prepared on first use, so that each call is one
// round trip (database/sql prepares it again on each new connection). A
// failed preparation is tried again by the next call.
type prepared struct {
	db    *sql.DB
	query string
	lock  chan struct{} // held while preparing, given up at ctx's end
	stmt  *sql.Stmt
}

func (p *prepared) get(ctx context.Context) (*sql.Stmt, error) {
	select {
	case p.lock <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-p.lock }()
	if p.stmt == nil {
		stmt, err := p.db.PrepareContext(ctx, p.query)
		if err != nil {
			return nil, err
		}
		p.stmt = stmt
	}
	return p.stmt, nil
}

// exec runs the statement on the pool.
func (p *prepared) exec(ctx context.Context, args ...any) (sql.Result, error) {
	stmt, err := p.get(ctx)
	if err != nil {
		return nil, err
	}
	return stmt.ExecContext(ctx, args...)
}

// queryRow runs the statement on the pool.
func (p *prepared) queryRow(ctx context.Context, args ...any) (*sql.Row, error) {
	stmt, err := p.get(ctx)
	if err != nil {
		return nil, err
	}
	return stmt.QueryRowContext(ctx, args...), nil
}
