package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// migrateCommand is a parsed migrate command line: the store being moved
// from, the one being moved to.
type migrateCommand struct {
	from, to storeConfig
	timeout  time.Duration
}

// parseMigrate reads migrate's flags (args without the subcommand): the
// old store named as inspect names it (-store, -url, ...) and the new one
// by the same flags prefixed with to-.
func parseMigrate(args []string, stderr io.Writer) (migrateCommand, error) {
	var c migrateCommand
	fs := flag.NewFlagSet("idempotency migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: idempotency migrate -store %s -url URL -to-store %s -to-url URL\n",
			strings.Join(storeKinds(), "|"), strings.Join(storeKinds(), "|"))
		fs.PrintDefaults()
	}
	storeFlags(fs, &c.from, "", "the store being moved from")
	storeFlags(fs, &c.to, "to-", "the store being moved to")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Minute, "how long the command may take; it reads every live record of both stores")
	if err := fs.Parse(args); err != nil {
		return migrateCommand{}, errUsage
	}
	if err := c.check(fs.Args()); err != nil {
		fmt.Fprintf(stderr, "idempotency migrate: %v\n", err)
		return migrateCommand{}, errUsage
	}
	return c, nil
}

// storeFlags registers the flags that name a store, each prefixed with
// prefix, into cfg; what says which store they name.
func storeFlags(fs *flag.FlagSet, cfg *storeConfig, prefix, what string) {
	fs.StringVar(&cfg.kind, prefix+"store", "", what+": "+strings.Join(storeKinds(), ", "))
	fs.StringVar(&cfg.url, prefix+"url", "", what+": a Redis URL, a PostgreSQL URL, a MySQL DSN, or an SQLite file")
	fs.StringVar(&cfg.prefix, prefix+"prefix", "idempotency:", what+", Redis: its key prefix")
	fs.StringVar(&cfg.table, prefix+"table", "idempotency_keys", what+", PostgreSQL and MySQL: its table")
	fs.StringVar(&cfg.schema, prefix+"schema", "", what+", PostgreSQL: its table's schema; default: the search path")
}

// check refuses a command line without two stores, or with one store twice.
func (c *migrateCommand) check(rest []string) error {
	if len(rest) > 0 {
		return fmt.Errorf("unexpected argument %q", rest[0])
	}
	for _, s := range []struct {
		flag string
		cfg  storeConfig
	}{{"-", c.from}, {"-to-", c.to}} {
		switch {
		case !slices.Contains(storeKinds(), s.cfg.kind):
			return fmt.Errorf("%sstore %q: want one of %s", s.flag, s.cfg.kind, strings.Join(storeKinds(), ", "))
		case s.cfg.url == "":
			return fmt.Errorf("%surl is required", s.flag)
		case !sqlName.MatchString(s.cfg.table) || s.cfg.schema != "" && !sqlName.MatchString(s.cfg.schema):
			return fmt.Errorf("%stable %q, %sschema %q: want lower-case letters, digits and _, not first a digit",
				s.flag, s.cfg.table, s.flag, s.cfg.schema)
		}
	}
	switch {
	case c.from == c.to:
		return errors.New("-to-store and its flags name the -store itself: give the store being moved to")
	case c.timeout <= 0:
		return errors.New("-timeout must be above 0")
	}
	return nil
}
