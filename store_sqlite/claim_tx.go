package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/seed43327c4c/idempotency/store"
)

// undoTimeout bounds how long a failed Commit tries to free its key.
const undoTimeout = 5 * time.Second

// errTxEnded is returned by Tx after the middleware ended the transaction.
var errTxEnded = errors.New("sqlitestore: the request's transaction has ended")

// claimTx is a claim of a TxStore: a committed claim whose lease it renews
// until the request's write transaction begins (begin), and whose Commit
// stores the response in that transaction.
type claimTx struct {
	s            *TxStore
	key          string
	owner        store.Lease
	stopRenewing func() // ends the renewals and waits for them

	mu    sync.Mutex
	conn  *sql.Conn // in the write transaction, once begun
	ended bool
}

var _ store.Tx = (*claimTx)(nil)

func newClaimTx(s *TxStore, key string, owner store.Lease) *claimTx {
	ctx, cancel := context.WithCancel(context.Background())
	renewed := make(chan struct{})
	c := &claimTx{s: s, key: key, owner: owner}
	c.stopRenewing = sync.OnceFunc(func() {
		cancel()
		<-renewed
	})
	go c.renew(ctx, renewed)
	return c
}

// renew renews the lease every third of it until ctx ends or the lease is
// lost, and then closes done. A renewal that fails is tried at the next.
func (c *claimTx) renew(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	ticker := time.NewTicker(c.s.txLease / 3)
	defer ticker.Stop()
	for {
		select {
		case <-ticker.C:
		case <-ctx.Done():
			return
		}
		if errors.Is(c.s.Renew(ctx, c.key, c.owner, c.s.txLease), store.ErrNotOwner) {
			return
		}
	}
}

// begin returns the connection of the request's write transaction,
// beginning it the first time. Once it holds the write lock, the lease is
// no longer renewed: no other connection can take the key over.
func (c *claimTx) begin(ctx context.Context) (*sql.Conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.ended:
		return nil, errTxEnded
	case c.conn != nil:
		return c.conn, nil
	}
	// Waiting here, as for the file, is an owner's wait: claims of every
	// process stand back until this request holds the lock.
	c.s.gate.enter()
	defer c.s.gate.leave()
	if err := c.s.writing.take(ctx, false); err != nil {
		return nil, wrap("tx", err)
	}
	conn, err := c.s.db.Conn(ctx)
	if err != nil {
		c.s.writing.give()
		return nil, wrap("tx", err)
	}
	err = c.s.ownerWrite(ctx, "tx", conn, ending, func(conn *sql.Conn) error {
		_, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE")
		return err
	})
	if err != nil {
		c.done(conn)
		return nil, err
	}
	c.stopRenewing()
	c.conn = conn
	return conn, nil
}

// end marks the claim ended and returns its transaction's connection (nil
// if none began); ok is false if it had ended already.
func (c *claimTx) end() (conn *sql.Conn, ok bool) {
	c.stopRenewing()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return nil, false
	}
	c.ended = true
	return c.conn, true
}

// done hands conn back to the pool and the write lock to the next request.
func (c *claimTx) done(conn *sql.Conn) {
	_ = conn.Close()
	c.s.writing.give()
}

// Commit implements store.Tx: it stores the response in the request's
// transaction and commits, or completes the key as Complete does if the
// handler began none. If that fails, the key is released, unless it was
// lost (store.ErrNotOwner).
func (c *claimTx) Commit(ctx context.Context, resp *store.Response, retention time.Duration) error {
	conn, ok := c.end()
	if !ok {
		return errTxEnded
	}
	var err error
	if conn == nil {
		err = c.s.Complete(ctx, c.key, c.owner, resp, retention)
	} else {
		err = c.commitOn(ctx, conn, resp, retention)
	}
	if err != nil && !errors.Is(err, store.ErrNotOwner) {
		undo, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
		defer cancel()
		_ = c.s.Release(undo, c.key, c.owner) // failing, the key is free when the lease lapses
	}
	return err
}

// commitOn stores the response on conn, in the request's transaction, and
// commits, or rolls back if either fails. It wakes this store's watchers.
func (c *claimTx) commitOn(ctx context.Context, conn *sql.Conn, resp *store.Response, retention time.Duration) error {
	defer c.done(conn)
	row, kw := c.s.watches.watched(c.key)
	res, err := conn.ExecContext(ctx, completeSQL, ownerArgs(c.key, c.owner, completion(resp, retention))...)
	var n int64
	if err == nil {
		n, err = res.RowsAffected()
	}
	if err == nil && n == 0 {
		err = store.ErrNotOwner
	}
	if err == nil {
		_, err = conn.ExecContext(ctx, "COMMIT")
	}
	if err != nil {
		rollback(ctx, conn)
		if errors.Is(err, store.ErrNotOwner) {
			return fmt.Errorf("sqlitestore: commit: %w", err)
		}
		return wrap("commit", err)
	}
	if kw != nil {
		c.s.watches.wake(row, kw)
	}
	return nil
}

// Rollback implements store.Tx: it rolls back the request's transaction,
// if one began, and releases the key. After Commit it does nothing.
func (c *claimTx) Rollback(ctx context.Context) error {
	conn, ok := c.end()
	if !ok {
		return nil
	}
	if conn != nil {
		rollback(ctx, conn)
		c.done(conn)
	}
	err := c.s.Release(ctx, c.key, c.owner)
	if errors.Is(err, store.ErrNotOwner) { // taken over: nothing of this claim is left
		return nil
	}
	return err
}
