package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/seed43327c4c/idempotency/store"
)

// TxStore is the transactional mode of the store: a store.TxStore whose
// handlers write through Tx, in the transaction that stores the response.
// The embedded Store serves the plain methods; both modes may share a file.
type TxStore struct {
	*Store
	// writing is held by the request whose transaction holds, or waits
	// for, the file's write lock.
	writing turn
}

var _ store.TxStore = (*TxStore)(nil)

// NewTx returns a store in transactional mode on db, with New's options;
// WithTxLease sets its claims' lease.
func NewTx(db *sql.DB, opts ...Option) *TxStore {
	return &TxStore{Store: New(db, opts...)}
}

// BeginClaim implements store.TxStore. It commits a claim as Claim does,
// under WithTxLease's lease, renewed until the handler's Tx holds the write
// lock: SQLite has one writer, so the lock is taken only then. A lost claim reports
// the holder's lease as its TTL. The claim ends a little before ctx's
// deadline, so that it returns in time; one made after it is released and
// answered as one that could not be decided in time (see Claim).
func (s *TxStore) BeginClaim(ctx context.Context, key, fingerprint, token string) (context.Context, store.Record, store.Tx, error) {
	// The caller rolls back a claim returned after its deadline: the claim
	// stops short of it, leaving the margin to return.
	claimCtx := ctx
	if deadline, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		claimCtx, cancel = context.WithDeadline(ctx, deadline.Add(-min(time.Until(deadline)/10, deadlineMargin)))
		defer cancel()
	}
	rec, claimed, err := s.Claim(claimCtx, key, fingerprint, token, s.txLease)
	if err != nil || !claimed {
		return ctx, rec, nil, err
	}
	if deadlinePassed(ctx) {
		// Later still: the key is given back here and answered as Claim
		// answers a key it could not decide in time.
		undo, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
		defer cancel()
		_ = s.Release(undo, key, rec.Owner) // failing, the key is free when the lease lapses
		return ctx, store.Record{State: store.StateInFlight, Fingerprint: fingerprint}, nil, nil
	}
	c := newClaimTx(s, key, rec.Owner)
	return context.WithValue(ctx, txKey{}, c), rec, c, nil
}

// deadlineMargin bounds the time BeginClaim leaves between its claim's end
// and its caller's deadline: a tenth of the time left, at most this.
const deadlineMargin = 10 * time.Millisecond

type txKey struct{}

// Querier runs a handler's statements in its request's transaction: the
// methods of *sql.Tx that sqlc's DBTX names, and no way to end it.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// ErrNoTx is returned by Tx for a context of no request a TxStore claimed.
var ErrNoTx = errors.New("sqlitestore: the request holds no claim of a TxStore")

// Tx returns the transaction of the protected request whose context is
// ctx, beginning it (BEGIN IMMEDIATE) on the first call; the middleware
// ends it. Until then the request holds the file's write lock, which every
// other write waits for: call Tx when about to write. It fails with
// ErrNoTx, ErrBusy past the busy timeout, or ctx's error (answer 503).
// Use it from one goroutine, and not after the handler returns.
func Tx(ctx context.Context) (Querier, error) {
	c, ok := ctx.Value(txKey{}).(*claimTx)
	if !ok {
		return nil, ErrNoTx
	}
	conn, err := c.begin(ctx)
	if err != nil {
		return nil, err
	}
	return handlerTx{conn: conn}, nil
}

// handlerTx is the claim's transaction without its ending.
type handlerTx struct {
	conn *sql.Conn
}

func (h handlerTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return h.conn.ExecContext(ctx, query, args...)
}

func (h handlerTx) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	return h.conn.PrepareContext(ctx, query)
}

func (h handlerTx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return h.conn.QueryContext(ctx, query, args...)
}

func (h handlerTx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return h.conn.QueryRowContext(ctx, query, args...)
}
