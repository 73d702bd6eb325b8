package store

import (
	"context"
	"errors"
	"fmt"
)

// Inspect implements Admin: the new store's record, else the old one's.
func (m *Migration) Inspect(ctx context.Context, hash string) (Record, bool, error) {
	rec, found, err := m.to.Inspect(ctx, hash)
	if err != nil || found {
		return rec, found, err
	}
	return m.from.Inspect(ctx, hash)
}

// Delete implements Admin in both stores, the old one first: a record
// either holds under a live lease is refused with ErrLeaseLive unless
// force is set, and deleted reports whether either had one.
func (m *Migration) Delete(ctx context.Context, hash string, force bool) (bool, error) {
	inOld, err := m.from.Delete(ctx, hash, force)
	if err != nil {
		return false, err
	}
	inNew, err := m.to.Delete(ctx, hash, force)
	return inOld || inNew, err
}

// Find implements Admin: the new store's hashes, then the old one's that
// the new store lacks, at most limit in all.
func (m *Migration) Find(ctx context.Context, prefix string, limit int) ([]string, error) {
	found, err := m.to.Find(ctx, prefix, limit)
	if err != nil || len(found) >= limit {
		return found, err
	}
	seen := make(map[string]bool, len(found))
	for _, hash := range found {
		seen[hash] = true
	}
	old, err := m.from.Find(ctx, prefix, limit)
	for _, hash := range old {
		if len(found) < limit && !seen[hash] {
			found = append(found, hash)
		}
	}
	return found, err
}

// Ping implements Pinger: nil once every store of the two that is a Pinger
// has answered, for a claim needs both.
func (m *Migration) Ping(ctx context.Context) error {
	var errs []error
	for _, s := range []struct {
		name string
		s    Store
	}{{"old", m.from}, {"new", m.to}} {
		if p, ok := s.s.(Pinger); ok {
			if err := p.Ping(ctx); err != nil {
				errs = append(errs, fmt.Errorf("store: migrate: the %s store: %w", s.name, err))
			}
		}
	}
	return errors.Join(errs...)
}
