package main

import (
	"context"
	"maps"
	"slices"

	"github.com/seed43327c4c/idempotency/store"
)

// opener opens the store cfg describes, and returns what closes it.
type opener func(ctx context.Context, cfg storeConfig) (store.Admin, func(), error)

// openers are the stores the command reaches, by -store; each is in a
// file of its own.
var openers = map[string]opener{
	"redis":    openRedis,
	"postgres": openPostgres,
	"sqlite":   openSQLite,
	"mysql":    openMySQL,
}

func storeKinds() []string { return slices.Sorted(maps.Keys(openers)) }
