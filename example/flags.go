package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/seed43327c4c/idempotency/store/seal"
)

// config is the command line, parsed and checked.
type config struct {
	addr     string
	store    string
	redisURL string
	// sentinelMaster and sentinelAddrs are -redis-sentinel's master name
	// and Sentinel addresses; empty without it.
	sentinelMaster string
	sentinelAddrs  []string
	replicaAcks    int
	databaseURL    string
	sqlitePath     string
	delay          time.Duration
	workers        int
	lease          time.Duration
	postgresTx     bool
	mysqlDSN       string
	mysqlTx        bool
	webhookSecret  []byte // nil: no -webhook-secret
	sqliteTx       bool
	migrateFrom    string     // the store being moved from; "" for none
	sealRing       *seal.Ring // -seal-keys' ring; nil: records are not sealed
	crash          crashPoint
	retention      time.Duration
	tombstones     time.Duration // 0: none
}

// parseFlags reads the command line. getenv supplies the defaults of
// -redis-url and -database-url. Without -store, records and payments stay
// in memory with one worker and go to the SQLite file -sqlite-path with
// several, which share it. It refuses combinations that cannot work, such
// as the memory store shared by several worker processes.
func parseFlags(args []string, getenv func(string) string) (config, error) {
	var c config
	fs := flag.NewFlagSet("example", flag.ContinueOnError)
	fs.StringVar(&c.addr, "addr", ":8080", "address to listen on")
	fs.StringVar(&c.store, "store", "", "where idempotency records and payments are kept: memory, sqlite, redis, postgres or mysql (default memory, or sqlite with -workers above 1)")
	fs.StringVar(&c.redisURL, "redis-url", getenv("REDIS_URL"), "Redis URL for -store redis (default $REDIS_URL)")
	fs.Func("redis-sentinel", "MASTER@HOST:PORT[,HOST:PORT...]: for -store redis, the Redis that these Sentinels name MASTER, instead of -redis-url", func(v string) (err error) {
		c.sentinelMaster, c.sentinelAddrs, err = parseSentinel(v)
		return err
	})
	fs.IntVar(&c.replicaAcks, "redis-replica-acks", detectReplicas, "with -store redis, how many replicas every write waits for, up to 5s, failing if fewer acknowledge it; 0: none; -1: ask Redis at start-up and wait for one, up to four fifths of the client's ReadTimeout, where it has replicas")
	fs.StringVar(&c.databaseURL, "database-url", getenv("DATABASE_URL"), "PostgreSQL URL for -store postgres (default $DATABASE_URL)")
	fs.StringVar(&c.sqlitePath, "sqlite-path", "idempotency.db", "SQLite database file for -store sqlite, created if missing; on a local disk of this host")
	fs.DurationVar(&c.delay, "delay", 0, "extra time each payment and webhook event takes after it is recorded, such as a slow receipt call")
	fs.IntVar(&c.workers, "workers", 1, "number of worker processes sharing the port through SO_REUSEPORT (Linux only above 1)")
	fs.DurationVar(&c.lease, "lease", 30*time.Second, "how long a claim holds a key before another worker may take it over if its owner died")
	fs.BoolVar(&c.postgresTx, "postgres-tx", true, "with -store postgres, run each payment in the transaction of its idempotency record (false: the plain Postgres store, with leases)")
	fs.StringVar(&c.mysqlDSN, "mysql-dsn", mysqlDSNDefault(getenv), "MySQL or MariaDB DSN for -store mysql (default $MYSQL_DSN, else "+defaultMySQLDSN+")")
	fs.BoolVar(&c.mysqlTx, "mysql-tx", true, "with -store mysql, run each payment in the transaction of its idempotency record (false: the plain MySQL store, with leases)")
	fs.Func("webhook-secret", "check the Stripe-Signature of every POST /webhooks with this secret (whsec_...), refusing unsigned events with 400 (default: not checked)", func(v string) error {
		if v == "" {
			return errors.New("want a non-empty secret")
		}
		c.webhookSecret = []byte(v)
		return nil
	})
	fs.BoolVar(&c.sqliteTx, "sqlite-tx", true, "with -store sqlite, write each payment in the transaction of its idempotency record, in the same file (false: the plain SQLite store)")
	fs.StringVar(&c.migrateFrom, "migrate-from", "", "while moving to -store from this store (sqlite, redis, postgres or mysql, opened from the same flags): look every key up there first, replaying and copying what it holds (docs/migrating.md)")
	fs.Func("crash-after-step", "NAME:PERCENT: exit at once, with status 3, right after a payment's step NAME (charge or ledger) is stored, in PERCENT of first runs (fence 1); the supervisor restarts the worker (default: never)", func(v string) (err error) {
		c.crash, err = parseCrashPoint(v)
		return err
	})
	fs.DurationVar(&c.retention, "retention", 24*time.Hour, "how long a payment's or an email's response is kept for replay")
	fs.DurationVar(&c.tombstones, "tombstones", 0, "after -retention, keep a tombstone of each key this long, so that a later retry gets 422 key-expired instead of running again (default 0: none)")
	fs.Func("seal-keys", "seal every stored response and receipt with the key ring in this file: one key a line, ID and 32 bytes in base64, the first line the key that seals (docs/sealing.md)", func(path string) (err error) {
		c.sealRing, err = readRing(path)
		return err
	})
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if c.store == "" {
		c.store = "memory"
		if c.workers > 1 {
			c.store = "sqlite"
		}
	}
	if _, ok := openers[c.store]; !ok {
		return config{}, fmt.Errorf("-store %q: want memory, sqlite, redis, postgres or mysql", c.store)
	}
	if err := checkMigrateFrom(c); err != nil {
		return config{}, err
	}
	if c.delay < 0 || c.lease <= 0 || c.retention <= 0 || c.tombstones < 0 {
		return config{}, fmt.Errorf("-delay and -tombstones must be 0 or more, -lease and -retention above 0")
	}
	if c.replicaAcks < detectReplicas {
		return config{}, fmt.Errorf("-redis-replica-acks %d: want -1 (ask Redis), 0 (wait for none) or a number of replicas", c.replicaAcks)
	}
	if c.replicaAcks > 0 && c.lease <= replicaAckTimeout {
		return config{}, fmt.Errorf("-lease %v with -redis-replica-acks: want a lease above the %v a write may wait for its replicas", c.lease, replicaAckTimeout)
	}
	if c.workers < 1 {
		return config{}, fmt.Errorf("-workers %d: want 1 or more", c.workers)
	}
	if c.workers > 1 && c.store == "memory" {
		return config{}, fmt.Errorf("-store memory cannot be used with -workers %d: the memory store "+
			"keeps its records inside one process, so a duplicate that reaches another worker would "+
			"run again; use -store sqlite to share keys between the workers of this host (the default "+
			"with -workers above 1), use -store redis, -store postgres or -store mysql to share them between hosts, "+
			"or run one worker", c.workers)
	}
	if _, port, err := net.SplitHostPort(c.addr); c.workers > 1 && (err != nil || port == "" || port == "0") {
		return config{}, fmt.Errorf("-addr %q with -workers %d: give a fixed port; with port 0 each worker "+
			"would listen on a random port of its own, and no duplicate would ever meet another worker", c.addr, c.workers)
	}
	if c.workers > 1 && !sharedPorts {
		return config{}, fmt.Errorf("-workers %d needs SO_REUSEPORT, which this example supports on "+
			"Linux only (and not on MIPS or SPARC); run one worker", c.workers)
	}
	return c, nil
}

// parseSentinel parses -redis-sentinel's MASTER@HOST:PORT[,HOST:PORT...].
func parseSentinel(v string) (master string, addrs []string, err error) {
	master, list, ok := strings.Cut(v, "@")
	if !ok || master == "" {
		return "", nil, errors.New("want MASTER@HOST:PORT[,HOST:PORT...]")
	}
	for _, addr := range strings.Split(list, ",") {
		if host, port, err := net.SplitHostPort(addr); err != nil || host == "" || port == "" {
			return "", nil, fmt.Errorf("%q: want HOST:PORT", addr)
		}
		addrs = append(addrs, addr)
	}
	return master, addrs, nil
}

// defaultMySQLDSN is -mysql-dsn's default without $MYSQL_DSN: the local
// server's root and its database test.
const defaultMySQLDSN = "root@tcp(127.0.0.1:3306)/test?parseTime=true"

func mysqlDSNDefault(getenv func(string) string) string {
	if dsn := getenv("MYSQL_DSN"); dsn != "" {
		return dsn
	}
	return defaultMySQLDSN
}

// readRing reads -seal-keys' ring from the file at path.
func readRing(path string) (*seal.Ring, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return seal.ParseRing(f)
}
