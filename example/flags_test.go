package main

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store/seal"
)

func env(vars map[string]string) func(string) string {
	return func(name string) string { return vars[name] }
}

func TestFlagsDefaults(t *testing.T) {
	cfg, err := parseFlags(nil, env(map[string]string{
		"REDIS_URL":    "redis://127.0.0.1:6379/0",
		"DATABASE_URL": "postgres://postgres@127.0.0.1:5432/test",
	}))
	require.NoError(t, err)
	assert.Equal(t, config{
		addr:        ":8080",
		replicaAcks: detectReplicas,
		store:       "memory",
		redisURL:    "redis://127.0.0.1:6379/0",
		databaseURL: "postgres://postgres@127.0.0.1:5432/test",
		sqlitePath:  "idempotency.db",
		workers:     1,
		lease:       30 * time.Second,
		postgresTx:  true,
		mysqlDSN:    defaultMySQLDSN,
		mysqlTx:     true,
		sqliteTx:    true,
		retention:   24 * time.Hour,
	}, cfg)
}

func TestFlagsSet(t *testing.T) {
	cfg, err := parseFlags([]string{"-addr", "127.0.0.1:9000", "-store", "redis", "-redis-url", "redis://r",
		"-delay", "300ms", "-workers", "4", "-lease", "2s", "-postgres-tx=false", "-sqlite-tx=false", "-sqlite-path", "/var/lib/x.db",
		"-webhook-secret", "whsec_1", "-mysql-dsn", "app@tcp(db:3306)/pay", "-mysql-tx=false",
		"-crash-after-step", "charge:30", "-retention", "2s"},
		env(map[string]string{"MYSQL_DSN": "root@tcp(m)/x"}))
	require.NoError(t, err)
	assert.Equal(t, config{addr: "127.0.0.1:9000", store: "redis", redisURL: "redis://r", replicaAcks: detectReplicas, sqlitePath: "/var/lib/x.db",
		delay: 300 * time.Millisecond, workers: 4, lease: 2 * time.Second, postgresTx: false,
		webhookSecret: []byte("whsec_1"), mysqlDSN: "app@tcp(db:3306)/pay", mysqlTx: false,
		crash: crashPoint{step: "charge", percent: 30}, retention: 2 * time.Second}, cfg)
	cfg, err = parseFlags([]string{"-retention", "2s", "-tombstones", "1h"}, env(nil))
	require.NoError(t, err)
	assert.Equal(t, time.Hour, cfg.tombstones)
	_, err = parseFlags([]string{"-webhook-secret", ""}, env(nil))
	require.ErrorContains(t, err, "want a non-empty secret")
}

// TestFlagsRedisSentinel: -redis-sentinel gives the master's name and
// every Sentinel's address; -redis-replica-acks the replicas to wait for.
func TestFlagsRedisSentinel(t *testing.T) {
	for _, c := range []struct {
		sentinel string
		master   string
		addrs    []string
	}{
		{"idempotency@127.0.0.1:26379", "idempotency", []string{"127.0.0.1:26379"}},
		{"pay@a:26379,b:26380,[::1]:26381", "pay", []string{"a:26379", "b:26380", "[::1]:26381"}},
	} {
		cfg, err := parseFlags([]string{"-store", "redis", "-redis-sentinel", c.sentinel, "-redis-replica-acks", "2"}, env(nil))
		require.NoError(t, err, c.sentinel)
		assert.Equal(t, c.master, cfg.sentinelMaster, c.sentinel)
		assert.Equal(t, c.addrs, cfg.sentinelAddrs, c.sentinel)
		assert.Equal(t, 2, cfg.replicaAcks, c.sentinel)
	}
}

func TestFlagsMemoryStoreRefusesWorkers(t *testing.T) {
	_, err := parseFlags([]string{"-store", "memory", "-workers", "2"}, env(nil))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "keeps its records inside one process")
	assert.Contains(t, err.Error(), "use -store sqlite to share keys between the workers of this host")
	assert.Contains(t, err.Error(), "use -store redis, -store postgres or -store mysql")
}

// TestFlagsStoreDefault: without -store, one worker keeps its records in
// memory and several share an SQLite file.
func TestFlagsStoreDefault(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "memory"},
		{[]string{"-workers", "1"}, "memory"},
		{[]string{"-workers", "4"}, "sqlite"},
		{[]string{"-workers", "4", "-store", "redis"}, "redis"},
	} {
		if c.want != "memory" && !sharedPorts {
			continue // several workers need SO_REUSEPORT
		}
		cfg, err := parseFlags(append([]string{"-addr", "127.0.0.1:9000"}, c.args...), env(nil))
		require.NoError(t, err, "%q", c.args)
		assert.Equal(t, c.want, cfg.store, "%q", c.args)
	}
}

func TestFlagsRefused(t *testing.T) {
	for name, args := range map[string][]string{
		"unknown store":           {"-store", "mongodb"},
		"no workers":              {"-workers", "0"},
		"negative delay":          {"-delay", "-1s"},
		"zero lease":              {"-lease", "0s"},
		"unknown flag":            {"-port", "80"},
		"random port for workers": {"-store", "redis", "-workers", "2", "-addr", "127.0.0.1:0"},
		"no port for workers":     {"-store", "redis", "-workers", "2", "-addr", "127.0.0.1"},
		"extra argument":          {"serve"},
		"sentinel without master": {"-redis-sentinel", "127.0.0.1:26379"},
		"sentinel empty master":   {"-redis-sentinel", "@127.0.0.1:26379"},
		"sentinel without port":   {"-redis-sentinel", "idempotency@127.0.0.1"},
		"sentinel empty address":  {"-redis-sentinel", "idempotency@127.0.0.1:26379,"},
		"negative replica acks":   {"-redis-replica-acks", "-2"},
		"lease within acks wait":  {"-redis-replica-acks", "1", "-lease", "5s"},
		"zero retention":          {"-retention", "0s"},
		"negative tombstones":     {"-tombstones", "-1s"},
		"crash without percent":   {"-crash-after-step", "charge"},
		"crash over 100 percent":  {"-crash-after-step", "charge:101"},
		"crash after no step":     {"-crash-after-step", "email:50"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := parseFlags(args, env(nil))
			assert.Error(t, err)
		})
	}
}

// TestFlagsMySQLDSN: -mysql-dsn defaults to $MYSQL_DSN, else to the local
// server's database test.
func TestFlagsMySQLDSN(t *testing.T) {
	for environment, want := range map[string]string{
		"":                     defaultMySQLDSN,
		"app@tcp(db:3306)/pay": "app@tcp(db:3306)/pay",
	} {
		cfg, err := parseFlags([]string{"-store", "mysql"}, env(map[string]string{"MYSQL_DSN": environment}))
		require.NoError(t, err)
		assert.Equal(t, want, cfg.mysqlDSN, "MYSQL_DSN=%q", environment)
		assert.True(t, cfg.mysqlTx, "transactional by default")
	}
}

// TestFlagsSealKeys: -seal-keys reads a ring; a file that is missing or
// not a ring is refused at start-up, saying why.
func TestFlagsSealKeys(t *testing.T) {
	dir := t.TempDir()
	c, err := parseFlags([]string{"-seal-keys", writeRing(t, dir, "k2", "k1")}, env(nil))
	require.NoError(t, err)
	require.Equal(t, "k2", c.sealRing.Current())
	require.True(t, c.sealRing.Has("k1"))

	c, err = parseFlags(nil, env(nil))
	require.NoError(t, err)
	require.Nil(t, c.sealRing)

	for name, tc := range map[string]struct{ src, want string }{
		"no current key": {"# no keys yet\n", "a ring needs a current key"},
		"wrong length":   {"k1 c2hvcnQ=\n", `key "k1" is 5 bytes, want 32`},
		"malformed line": {"k1\n", "line 1"},
		"duplicate id":   {readFile(t, writeRing(t, dir, "k1")) + readFile(t, writeRing(t, dir, "k1")), `"k1" is in the ring twice`},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ring")
			require.NoError(t, os.WriteFile(path, []byte(tc.src), 0o600))
			_, err := parseFlags([]string{"-seal-keys", path}, env(nil))
			require.ErrorContains(t, err, tc.want)
		})
	}
	_, err = parseFlags([]string{"-seal-keys", filepath.Join(dir, "none")}, env(nil))
	require.ErrorContains(t, err, "no such file")
}

// writeRing writes a ring of the keys named, the first current, into a new
// file in dir and returns its path; a key's secret is its id repeated.
func writeRing(t *testing.T, dir string, ids ...string) string {
	t.Helper()
	var src strings.Builder
	for _, id := range ids {
		fmt.Fprintf(&src, "%s %s\n", id, base64.StdEncoding.EncodeToString(bytes.Repeat([]byte(id), seal.KeySize)[:seal.KeySize]))
	}
	f, err := os.CreateTemp(dir, "ring")
	require.NoError(t, err)
	_, err = f.WriteString(src.String())
	require.NoError(t, err)
	require.NoError(t, f.Close())
	return f.Name()
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}
