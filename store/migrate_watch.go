package store

import (
	"context"
	"errors"
	"fmt"
)

// errCannotWatch is Watch's error when the store holding the key is no
// Watcher: the caller polls.
var errCannotWatch = errors.New("store: migrate: the store holding the key cannot watch it")

// Watch implements Watcher: it watches the old store while the key is in
// flight there, else the new store, each only if it is a Watcher.
func (m *Migration) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	rec, found, err := m.from.Inspect(ctx, HashKey(key))
	if err != nil {
		return nil, nil, fmt.Errorf("store: migrate: look in the old store: %w", err)
	}
	var holder Store = m.to
	if found && rec.State == StateInFlight {
		holder = m.from
	}
	w, ok := holder.(Watcher)
	if !ok {
		return nil, nil, errCannotWatch
	}
	return w.Watch(ctx, key)
}
