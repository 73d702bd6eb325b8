package main

import (
	"context"
	"fmt"

	"github.com/seed43327c4c/idempotency/store"
)

// checkMigrateFrom refuses a -migrate-from that cannot be a store to move
// from: an unknown one, the -store itself (both would be opened from the
// same flags, so the same database), or memory, whose records died with
// the process that held them.
func checkMigrateFrom(c config) error {
	switch _, known := openers[c.migrateFrom]; {
	case c.migrateFrom == "":
		return nil
	case !known:
		return fmt.Errorf("-migrate-from %q: want sqlite, redis, postgres or mysql", c.migrateFrom)
	case c.migrateFrom == c.store:
		return fmt.Errorf("-migrate-from %s is the -store itself: both are opened from the same flags "+
			"(-redis-url, -database-url, -mysql-dsn, -sqlite-path), so this would move the records onto "+
			"themselves; give the store you are moving from", c.migrateFrom)
	case c.migrateFrom == "memory":
		return fmt.Errorf("-migrate-from memory: the memory store's records lived in the process that " +
			"held them and are gone; there is nothing to move")
	}
	return nil
}

// openMigrating opens cfg's -store, the store being moved to, and its
// -migrate-from, the store being moved from, each as its own opener does
// and from the same flags, and serves with store.Migrate over the two. The
// ledger is the new store's: payments made before the cut stay in the old
// backend's ledger, which this service no longer lists.
func openMigrating(ctx context.Context, cfg config) (store.Store, ledger, func(), error) {
	to, led, closeTo, err := openers[cfg.store](ctx, cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	from, _, closeFrom, err := openers[cfg.migrateFrom](ctx, cfg)
	if err != nil {
		closeTo()
		return nil, nil, nil, fmt.Errorf("-migrate-from %s: %w", cfg.migrateFrom, err)
	}
	closeBoth := func() {
		closeFrom()
		closeTo()
	}
	fromAdmin, okFrom := from.(store.Admin)
	toAdmin, okTo := to.(store.Admin)
	if !okFrom || !okTo {
		closeBoth()
		return nil, nil, nil, fmt.Errorf("-migrate-from %s to -store %s: both stores must be store.Admins", cfg.migrateFrom, cfg.store)
	}
	return store.Migrate(fromAdmin, toAdmin), led, closeBoth, nil
}
