package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/seed43327c4c/idempotency/store"
)

// The command's exit statuses.
const (
	exitFound  = 0 // inspected or deleted
	exitError  = 1
	exitUsage  = 2
	exitAbsent = 3 // no live record
)

// run runs the command line args (without the program's name), writing
// its JSON to stdout and its errors to stderr, and returns the exit
// status.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "migrate" {
		return runMigrate(args[1:], stdout, stderr)
	}
	c, err := parseCommand(args, stderr)
	if err != nil {
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	fail := func(err error) int {
		fmt.Fprintf(stderr, "idempotency %s: %v\n", c.name, err)
		return exitError
	}
	s, closeStore, err := openers[c.store.kind](ctx, c.store)
	if err != nil {
		return fail(fmt.Errorf("-store %s: %w", c.store.kind, err))
	}
	defer closeStore()
	hash, found, err := c.resolve(ctx, s)
	if err != nil {
		return fail(err)
	}
	out := map[string]any{"hash": hash}
	if c.name == "inspect" {
		err = inspect(ctx, s, hash, found, cmp.Or(c.sealKeys, os.Getenv(envSealKeys)), out)
	} else {
		err = remove(ctx, s, hash, found, c.force, out)
	}
	if err != nil && !errors.Is(err, errUnopened) {
		return fail(err)
	}
	if err := json.NewEncoder(stdout).Encode(out); err != nil {
		return fail(err)
	}
	if err != nil {
		return fail(err) // the record, all but what could not be opened, is printed
	}
	if out["state"] == "absent" || out["deleted"] == false {
		return exitAbsent
	}
	return exitFound
}

// resolve returns the hash of the record c names; found is false when
// -hash matches no live record, the hash then being the prefix.
func (c *command) resolve(ctx context.Context, s store.Admin) (hash string, found bool, err error) {
	if key := c.storageKey(); key != "" {
		return store.HashKey(key), true, nil
	}
	hashes, err := s.Find(ctx, c.hash, 2)
	switch {
	case err != nil:
		return "", false, err
	case len(hashes) == 0:
		return c.hash, false, nil
	case len(hashes) > 1:
		return "", false, fmt.Errorf("-hash %s names more than one record (%s, ...): give more digits", c.hash, strings.Join(hashes, ", "))
	}
	return hashes[0], true, nil
}

// remove deletes the record filed under hash and reports "deleted".
func remove(ctx context.Context, s store.Admin, hash string, found, force bool, out map[string]any) error {
	deleted := false
	if found {
		var err error
		deleted, err = s.Delete(ctx, hash, force)
		if errors.Is(err, store.ErrLeaseLive) {
			return fmt.Errorf("%w: its request may still be running, and nothing was changed; -force deletes it, "+
				"and the next duplicate may then run while the first still runs", err)
		}
		if err != nil {
			return err
		}
	}
	out["deleted"] = deleted
	return nil
}
