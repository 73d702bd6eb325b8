package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/seed43327c4c/idempotency/store"
)

// exitRemaining is migrate's exit status while the old store still holds a
// record that the new one lacks.
const exitRemaining = 3

// runMigrate runs migrate (args without the subcommand): it surveys the
// old store's live records against the new store and prints the survey as
// one JSON object. It exits 0 when the old store holds nothing the new one
// lacks, so that it can be dropped, and exitRemaining while it does.
func runMigrate(args []string, stdout, stderr io.Writer) int {
	c, err := parseMigrate(args, stderr)
	if err != nil {
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	fail := func(err error) int {
		fmt.Fprintf(stderr, "idempotency migrate: %v\n", err)
		return exitError
	}
	from, closeFrom, err := openers[c.from.kind](ctx, c.from)
	if err != nil {
		return fail(fmt.Errorf("-store %s: %w", c.from.kind, err))
	}
	defer closeFrom()
	to, closeTo, err := openers[c.to.kind](ctx, c.to)
	if err != nil {
		return fail(fmt.Errorf("-to-store %s: %w", c.to.kind, err))
	}
	defer closeTo()
	s, err := surveyMigration(ctx, from, to)
	if err != nil {
		return fail(err)
	}
	if err := json.NewEncoder(stdout).Encode(s); err != nil {
		return fail(err)
	}
	if s.Remaining > 0 {
		return exitRemaining
	}
	return exitFound
}

// survey is what migrate reports: the old store's live records by state,
// and those of them the new store does not hold done (Remaining), the
// longest of whose time left is RemainingTTLms.
type survey struct {
	Records        int            `json:"records"`
	States         map[string]int `json:"states"`
	Remaining      int            `json:"remaining"`
	RemainingTTLms int64          `json:"remaining_ttl_ms"`
}

// findBatch is how many hashes one Find returns at most.
const findBatch = 1000

// surveyMigration reads every live record of from and looks each up in
// to. A record in flight in from counts as remaining whatever to holds:
// its request may still be running on a worker of the old store.
func surveyMigration(ctx context.Context, from, to store.Admin) (survey, error) {
	s := survey{States: map[string]int{}}
	err := eachHash(ctx, from, "", func(hash string) error {
		rec, found, err := from.Inspect(ctx, hash)
		if err != nil || !found { // expired since Find
			return err
		}
		s.Records++
		s.States[rec.State.String()]++
		moved := false
		if rec.State != store.StateInFlight {
			copied, found, err := to.Inspect(ctx, hash)
			if err != nil {
				return err
			}
			moved = found && copied.State != store.StateInFlight
		}
		if !moved {
			s.Remaining++
			s.RemainingTTLms = max(s.RemainingTTLms, rec.TTL.Milliseconds())
		}
		return nil
	})
	return s, err
}

// eachHash calls f with every live hash of s that begins with prefix,
// splitting a prefix whose Find fills a batch into its sixteen longer ones.
func eachHash(ctx context.Context, s store.Admin, prefix string, f func(hash string) error) error {
	hashes, err := s.Find(ctx, prefix, findBatch)
	if err != nil {
		return fmt.Errorf("find %q: %w", prefix, err)
	}
	if len(hashes) == findBatch && len(prefix) < 64 {
		for _, digit := range "0123456789abcdef" {
			if err := eachHash(ctx, s, prefix+string(digit), f); err != nil {
				return err
			}
		}
		return nil
	}
	for _, hash := range hashes {
		if err := f(hash); err != nil {
			return err
		}
	}
	return nil
}
