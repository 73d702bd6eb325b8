package mysqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/seed43327c4c/idempotency/store"
)

// TxStore is the transactional mode of the store: a store.TxStore whose
// claim is held by a database transaction the handler's writes join (see
// Tx). Each request holds one pool connection from BeginClaim to Commit or
// Rollback, and keeps no lease. The embedded Store serves every plain
// method on the same table, and both modes may share it.
type TxStore struct {
	*Store
}

var _ store.TxStore = (*TxStore)(nil)

// NewTx returns a store in transactional mode on the table New would use
// with the same options.
func NewTx(db *sql.DB, opts ...Option) *TxStore {
	return &TxStore{Store: New(db, opts...)}
}

// BeginClaim implements store.TxStore; the returned context carries the
// transaction for Tx. The claim is written, and the key's named lock
// taken, on a connection the request keeps; the transaction, begun there
// with the pool's default isolation level, then holds the key until
// Commit or Rollback, and a crash or a lost connection frees it at once.
func (s *TxStore) BeginClaim(ctx context.Context, key, fingerprint, token string) (context.Context, store.Record, store.Tx, error) {
	rec, tx, err := s.beginClaim(ctx, key, fingerprint, token)
	if err != nil {
		return ctx, store.Record{}, nil, fmt.Errorf("mysqlstore: begin claim: %w", explain(err))
	}
	if tx == nil {
		return ctx, rec, nil, nil
	}
	return context.WithValue(ctx, txKey{}, tx.tx), rec, tx, nil
}

func (s *TxStore) beginClaim(ctx context.Context, key, fingerprint, token string) (store.Record, *claimTx, error) {
	if err := checkToken(token); err != nil {
		return store.Record{}, nil, err
	}
	if err := s.requireCurrent(ctx); err != nil {
		return store.Record{}, nil, err
	}
	if err := s.claims.take(ctx); err != nil {
		return store.Record{}, nil, err
	}
	for range staleAttempts {
		rec, tx, err := s.claimOn(ctx, key, fingerprint, token)
		if errors.Is(err, errStale) {
			continue
		}
		if tx == nil {
			s.claims.give()
		}
		return rec, tx, err
	}
	s.claims.give()
	return store.Record{}, nil, fmt.Errorf("%w %d times in a row", errStale, staleAttempts)
}

// claimOn runs the claim procedure on a connection of its own and, if it
// won, begins the transaction there. A key whose lock another session
// holds, with no live row to show, is in flight with the caller's
// fingerprint. On an error the connection is discarded, never pooled: the
// procedure may have failed while holding the key's lock.
func (s *TxStore) claimOn(ctx context.Context, key, fingerprint, token string) (store.Record, *claimTx, error) {
	// Commit runs the pool's prepared complete statement on the claim's
	// connection: it is prepared now, before this request holds one.
	complete, err := s.sql.complete.get(ctx)
	if err != nil {
		return store.Record{}, nil, err
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return store.Record{}, nil, err
	}
	r, err := scanClaim(conn.QueryRowContext(ctx, s.sql.txClaim(rowKey(key), []byte(fingerprint), []byte(token), s.tombstones)))
	switch {
	case errors.Is(err, errStale) && (r.state == 0 || r.lockedOut):
		_ = conn.Close()
		return store.Record{State: store.StateInFlight, Fingerprint: fingerprint}, nil, nil
	case err != nil:
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		_ = conn.Close()
		return store.Record{}, nil, err
	case !r.claimed:
		_ = conn.Close() // the procedure released the lock it took
		rec, err := r.record(token)
		return rec, nil, err
	}
	// The transaction outlives ctx, the claim's deadline: database/sql
	// would roll it back when ctx ended.
	tx, err := conn.BeginTx(context.WithoutCancel(ctx), nil)
	if err != nil {
		releaseLock(conn, r.lockName)
		_ = conn.Close()
		return store.Record{}, nil, err
	}
	rec, _ := r.record(token)
	return rec, &claimTx{s: s.Store, conn: conn, tx: tx, complete: complete, key: key, owner: rec.Owner, lockName: r.lockName}, nil
}

type claimTx struct {
	s        *Store
	conn     *sql.Conn
	tx       *sql.Tx
	complete *sql.Stmt
	key      string
	owner    store.Lease
	lockName string
	ended    bool // by Commit or Rollback, which run in one goroutine
}

// Commit implements store.Tx: it stores the response in the transaction,
// commits, and then frees the key's named lock. If storing fails (a
// handler's statement may have ended the transaction), it rolls back and
// returns the error. It returns when ctx ends, leaving a COMMIT that the
// server does not answer to end with its connection.
func (c *claimTx) Commit(ctx context.Context, resp *store.Response, retention time.Duration) error {
	return c.finish(ctx, "commit", func() error {
		args := append(completion(resp, retention), rowKey(c.key), []byte(c.owner.Token), c.owner.Fence)
		res, err := c.tx.StmtContext(ctx, c.complete).ExecContext(ctx, args...)
		var n int64
		if err == nil {
			n, err = res.RowsAffected()
		}
		if err == nil && n == 0 {
			// The handler, through the transaction, or a forced
			// Delete changed the claimed row.
			err = store.ErrNotOwner
		}
		if err != nil {
			_ = c.tx.Rollback()
			return err
		}
		return c.tx.Commit()
	})
}

// Rollback implements store.Tx. The claim's row stays in flight under a
// lock nobody holds, which the next claim takes over with a higher fence.
func (c *claimTx) Rollback(ctx context.Context) error {
	return c.finish(ctx, "rollback", func() error {
		if err := c.tx.Rollback(); !errors.Is(err, sql.ErrTxDone) {
			return err
		}
		return nil
	})
}

// finish ends the transaction with end, once: then it frees the key's
// named lock and the connection. It waits for that until ctx ends.
func (c *claimTx) finish(ctx context.Context, op string, end func() error) error {
	if c.ended {
		return nil
	}
	c.ended = true
	done := make(chan error, 1)
	go func() {
		err := end()
		releaseLock(c.conn, c.lockName)
		_ = c.conn.Close()
		c.s.claims.give()
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("mysqlstore: %s: %w", op, explain(err))
	}
	return nil
}

type txKey struct{}

// Tx returns the transaction of the protected request whose context is
// ctx, for the handler's writes; ok is false when the request holds none.
// The middleware ends it: the handler must not call its Commit or
// Rollback. To undo its writes the handler answers with a status that is
// not recorded, or undoes part of them to a savepoint. It must not be used
// after the handler returns.
func Tx(ctx context.Context) (*sql.Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(*sql.Tx)
	return tx, ok
}
