package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/seed43327c4c/idempotency"
	"github.com/seed43327c4c/idempotency/store"
)

// command is a parsed command line.
type command struct {
	name  string // inspect or delete
	store storeConfig
	// One way to name the record: a request's fields, a job's key, or a
	// prefix of its hash.
	scope, method, route, key string
	job                       string
	hash                      string
	force                     bool
	sealKeys                  string // inspect: a ring's file; "" reads IDEMPOTENCY_SEAL_KEYS
	timeout                   time.Duration
}

// storeConfig is what opens a store: its kind and where it is.
type storeConfig struct {
	kind   string
	url    string
	prefix string // Redis
	table  string // Postgres, MySQL
	schema string // Postgres
}

// sqlName is what pgstore and mysqlstore take as a table or schema name
// (the longest they take aside), so a bad one is a usage error, not
// their panic.
var sqlName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,49}$`)

// errUsage marks an error in the command line: exit status 2.
var errUsage = errors.New("usage")

// parseCommand reads args: the subcommand, then its flags.
func parseCommand(args []string, stderr io.Writer) (command, error) {
	if len(args) == 0 || !slices.Contains([]string{"inspect", "delete"}, args[0]) {
		fmt.Fprintf(stderr, "usage: idempotency inspect|delete -store %s -url URL (-route R -key K [-scope S] [-method M] | -job KEY [-scope S] | -hash PREFIX) [-seal-keys FILE] [-force]\n",
			strings.Join(storeKinds(), "|"))
		return command{}, errUsage
	}
	c := command{name: args[0]}
	fs := flag.NewFlagSet("idempotency "+c.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.store.kind, "store", "", "where the records are: "+strings.Join(storeKinds(), ", "))
	fs.StringVar(&c.store.url, "url", "", "the store: a Redis URL (a Cluster's with addr= parameters naming more nodes), a PostgreSQL URL, a MySQL DSN, or an SQLite file")
	fs.StringVar(&c.store.prefix, "prefix", "idempotency:", "Redis: the store's key prefix (redisstore.WithPrefix)")
	fs.StringVar(&c.store.table, "table", "idempotency_keys", "PostgreSQL and MySQL: the store's table (pgstore.WithTable, mysqlstore.WithTable)")
	fs.StringVar(&c.store.schema, "schema", "", "PostgreSQL: the table's schema (pgstore.WithSchema); default: the search path")
	fs.StringVar(&c.scope, "scope", "", "a request's scope, as the application's WithScope names it (often the account), or a job's (DoScope)")
	fs.StringVar(&c.method, "method", "POST", "a request's method")
	fs.StringVar(&c.route, "route", "", "a request's route: its path as sent, decoded, unless the application sets WithRoute")
	fs.StringVar(&c.key, "key", "", "a request's Idempotency-Key, unquoted")
	fs.StringVar(&c.job, "job", "", "the key a job was given to idempotency.Do")
	fs.StringVar(&c.hash, "hash", "", "a prefix of the record's hash, such as the key_hash of a log line")
	if c.name == "inspect" {
		fs.StringVar(&c.sealKeys, "seal-keys", "", "the key ring file the service seals records with (WithSealer), to open a sealed record; default: the file $"+envSealKeys+" names")
	}
	if c.name == "delete" {
		fs.BoolVar(&c.force, "force", false, "delete a record in flight under a live lease: a duplicate may then run while the first still runs")
	}
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "how long the command may take")
	if err := fs.Parse(args[1:]); err != nil {
		return command{}, errUsage
	}
	if err := c.check(fs.Args()); err != nil {
		fmt.Fprintf(stderr, "idempotency %s: %v\n", c.name, err)
		return command{}, errUsage
	}
	return c, nil
}

// check refuses a command line that names no store or not one record.
func (c *command) check(rest []string) error {
	named := 0
	for _, set := range []bool{c.key != "" || c.route != "", c.job != "", c.hash != "", c.scope != "" && c.job == "" && c.key == "" && c.route == ""} {
		if set {
			named++
		}
	}
	switch {
	case len(rest) > 0:
		return fmt.Errorf("unexpected argument %q", rest[0])
	case !slices.Contains(storeKinds(), c.store.kind):
		return fmt.Errorf("-store %q: want one of %s", c.store.kind, strings.Join(storeKinds(), ", "))
	case c.store.url == "":
		return errors.New("-url is required")
	case named != 1:
		return errors.New("name one record: -route and -key (with -scope and -method), or -job (with -scope), or -hash")
	case c.job == "" && c.hash == "" && (c.key == "" || c.route == ""):
		return errors.New("-route and -key are both required")
	case c.hash != "" && store.CheckHash(c.hash, true) != nil:
		return fmt.Errorf("-hash %q: want 1 to 64 lower-case hex digits", c.hash)
	case c.timeout <= 0:
		return errors.New("-timeout must be above 0")
	case !sqlName.MatchString(c.store.table) || c.store.schema != "" && !sqlName.MatchString(c.store.schema):
		return fmt.Errorf("-table %q, -schema %q: want lower-case letters, digits and _, not first a digit", c.store.table, c.store.schema)
	}
	return nil
}

// storageKey returns the storage key the command line names, or "" for
// -hash.
func (c *command) storageKey() string {
	switch {
	case c.job != "":
		return idempotency.DoStorageKey(c.scope, c.job)
	case c.hash != "":
		return ""
	}
	return idempotency.StorageKey(c.scope, c.method, c.route, c.key)
}
