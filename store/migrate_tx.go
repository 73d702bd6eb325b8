package store

import "context"

// TxMigration is the Migration that Migrate returns when the new store is
// a TxStore: BeginClaim claims in the new store's transaction, after the
// same look into the old store as Claim, and marks the key in the old
// store until the transaction ends.
type TxMigration struct {
	*Migration
	tx TxStore
}

var _ TxStore = (*TxMigration)(nil)

// BeginClaim implements TxStore. A key live in the old store opens no
// transaction and returns its record there, as Claim does; otherwise the
// key is claimed in the new store's transaction and marked in the old
// store for txMarkerLease, and the returned Tx ends the marker with the
// transaction (rolled back at once if the old store holds the key by
// then).
func (m *TxMigration) BeginClaim(ctx context.Context, key, fingerprint, token string) (context.Context, Record, Tx, error) {
	if token == "" {
		return ctx, Record{}, nil, ErrEmptyToken
	}
	old, found, err := m.oldRecord(ctx, key, fingerprint)
	switch {
	case err != nil || found && old.State != StateInFlight:
		return ctx, old, nil, err
	case found:
		if rec, mine, err := m.inFlightInOld(ctx, key, fingerprint, token, txMarkerLease); err != nil || !mine {
			return ctx, rec, nil, err
		}
	}
	txCtx, rec, tx, err := m.tx.BeginClaim(ctx, key, fingerprint, token)
	if err != nil || tx == nil {
		return txCtx, rec, tx, err
	}
	rec, claimed, err := m.mark(ctx, key, fingerprint, txMarkerLease, rec, tx.Rollback)
	if !claimed {
		return ctx, rec, nil, err
	}
	marker, _ := m.marker(key, rec.Owner)
	m.markers.Delete(markerKey(key, rec.Owner)) // the Tx holds it
	return txCtx, rec, &markedTx{Tx: tx, m: m.Migration, key: key, marker: marker}, nil
}
