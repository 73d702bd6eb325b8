package store

import "context"

// TxMigration is the Migration that Migrate returns when the new store is
// a TxStore: BeginClaim claims in the new store's transaction, after the
// same look into the old store as Claim.
type TxMigration struct {
	*Migration
	tx TxStore
}

var _ TxStore = (*TxMigration)(nil)

// BeginClaim implements TxStore. A key live in the old store opens no
// transaction and returns its record there, as Claim does; otherwise the
// key is claimed in the new store's transaction, which is rolled back if
// the old store holds the key by then.
func (m *TxMigration) BeginClaim(ctx context.Context, key, fingerprint, token string) (context.Context, Record, Tx, error) {
	if token == "" {
		return ctx, Record{}, nil, ErrEmptyToken
	}
	if rec, found, err := m.oldRecord(ctx, key, fingerprint); err != nil || found {
		return ctx, rec, nil, err
	}
	txCtx, rec, tx, err := m.tx.BeginClaim(ctx, key, fingerprint, token)
	if err != nil || tx == nil {
		return txCtx, rec, tx, err
	}
	rec, claimed, err := m.recheck(ctx, key, fingerprint, rec, tx.Rollback)
	if !claimed {
		return ctx, rec, nil, err
	}
	return txCtx, rec, tx, nil
}
