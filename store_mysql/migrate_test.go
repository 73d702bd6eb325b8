package mysqlstore

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/seed43327c4c/idempotency/store"
)

// TestMigrateConcurrently: workers migrating one new table at once all
// succeed, and leave it current.
func TestMigrateConcurrently(t *testing.T) {
	db := testDB(t)
	s := New(db, WithTable(testTable(t)))
	dropTable(t, s)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() { errs <- New(db, WithTable(s.table)).Migrate(context.Background()) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	version, err := s.version(context.Background(), db)
	require.NoError(t, err)
	require.Equal(t, schemaVersion, version)
	require.NoError(t, s.Migrate(context.Background()), "a current table is left as it is")
	mustClaim(t, s, "k", "fp", longLease)
}

// TestClaimRefusesATableNotCurrent: before Migrate, a claim says what to
// do; a table of a later version, or of another kind, is refused by
// Migrate.
func TestClaimRefusesATableNotCurrent(t *testing.T) {
	db := testDB(t)
	s := New(db, WithTable(testTable(t)))
	dropTable(t, s)
	_, _, err := s.Claim(context.Background(), "k", "fp", newToken(), longLease)
	require.ErrorContains(t, err, "run Migrate")

	for comment, want := range map[string]string{
		"mysqlstore schema version 3": "schema version 3 is later than this package's 2",
		"the payments":                `the table's comment "the payments" records no schema version`,
		"":                            `the table's comment "" records no schema version`,
	} {
		_, err := db.Exec(s.sql.rewrite.Replace("CREATE TABLE IF NOT EXISTS `idempotency_keys` (id INT)"))
		require.NoError(t, err)
		_, err = db.Exec(s.sql.rewrite.Replace("ALTER TABLE `idempotency_keys` COMMENT = '" + comment + "'"))
		require.NoError(t, err)
		require.ErrorContains(t, s.Migrate(context.Background()), want)
	}
}

// TestMigrateFromVersion1: a table of schema version 1, made before steps,
// keeps its rows and gets the steps columns and completed_at; a key claimed before keeps
// its fence and records steps after.
func TestMigrateFromVersion1(t *testing.T) {
	s := newTestStore(t)
	before := mustClaim(t, s, "old", "fp", longLease)
	for _, stmt := range []string{
		"ALTER TABLE `idempotency_keys` DROP COLUMN steps, DROP COLUMN step_names, DROP COLUMN step_count, DROP COLUMN completed_at",
		"ALTER TABLE `idempotency_keys` COMMENT = 'mysqlstore schema version 1'",
	} {
		_, err := s.db.Exec(s.sql.rewrite.Replace(stmt))
		require.NoError(t, err)
	}
	s = New(s.db, WithTable(s.table)) // a process started on the old table
	_, _, err := s.Claim(context.Background(), "new", "fp", newToken(), longLease)
	require.ErrorContains(t, err, "run Migrate", "version 1 is not current")

	require.NoError(t, s.Migrate(context.Background()))
	step := store.Step{Name: "charge", Result: []byte(`"ch_1"`)}
	require.NoError(t, s.SaveStep(context.Background(), "old", before.Owner, step))
	rec, found, err := s.Inspect(context.Background(), store.HashKey("old"))
	require.NoError(t, err)
	require.True(t, found, "the row from before the migration")
	require.Equal(t, before.Owner.Fence, rec.Owner.Fence)
	require.Equal(t, []store.Step{step}, rec.Steps)
}

// TestDSNWithoutDatabase: a DSN that names no database fails Migrate, and
// the claim, saying so.
func TestDSNWithoutDatabase(t *testing.T) {
	cfg := testConfig(t)
	cfg.DBName = ""
	s := New(openDB(t, cfg, 2))
	require.ErrorContains(t, s.Migrate(context.Background()), "no database selected: name one in the DSN")
	_, _, err := s.Claim(context.Background(), "k", "fp", newToken(), longLease)
	require.ErrorContains(t, err, "no database selected: name one in the DSN")
}

// TestPrivileges: a user with SELECT, INSERT, UPDATE, DELETE on the table
// and EXECUTE on its procedure serves every call; a user without them (but
// with a privilege on another table, to connect to the database) gets a
// clear error from Migrate and from the first claim. It runs in a database
// of its own: servers may grant everyone the database test.
func TestPrivileges(t *testing.T) {
	cfg := testConfig(t)
	root := openDB(t, cfg, 2)
	user := testTable(t)
	database, other := user+"_db", user+"_other"
	for _, stmt := range []string{
		fmt.Sprintf("CREATE DATABASE `%s`", database),
		fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY 'secret'", user),
		fmt.Sprintf("CREATE TABLE `%s`.`%s` (id INT)", database, other),
		fmt.Sprintf("GRANT SELECT ON `%s`.`%s` TO '%s'@'%%'", database, other, user),
	} {
		_, err := root.Exec(stmt)
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		for _, stmt := range []string{fmt.Sprintf("DROP USER '%s'@'%%'", user), fmt.Sprintf("DROP DATABASE `%s`", database)} {
			_, err := root.Exec(stmt)
			require.NoError(t, err)
		}
	})
	cfg.DBName = database
	owner := New(openDB(t, cfg, 2), WithTable(user))
	require.NoError(t, owner.Migrate(context.Background()))
	cfg.User, cfg.Passwd = user, "secret"
	s := New(openDB(t, cfg, 4), WithTable(user))

	_, _, err := s.Claim(context.Background(), "k", "fp", newToken(), longLease)
	require.ErrorContains(t, err, "grant the user SELECT, INSERT, UPDATE, DELETE on it and EXECUTE on its procedure")
	require.ErrorContains(t, s.Migrate(context.Background()), "the user lacks a privilege the store needs")

	for _, grant := range []string{
		"GRANT SELECT, INSERT, UPDATE, DELETE ON `%s`.`%s` TO '%s'@'%%'",
		"GRANT EXECUTE ON PROCEDURE `%s`.`%s_claim` TO '%s'@'%%'",
	} {
		_, err := root.Exec(fmt.Sprintf(grant, database, user, user))
		require.NoError(t, err)
	}
	require.NoError(t, s.Migrate(context.Background()), "a current table needs no more")
	rec := mustClaim(t, s, "k", "fp", longLease)
	require.NoError(t, s.Renew(context.Background(), "k", rec.Owner, longLease))
	require.NoError(t, s.Complete(context.Background(), "k", rec.Owner, nil, time.Millisecond))
	time.Sleep(5 * time.Millisecond)
	n, err := s.DeleteExpired(context.Background(), 10)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	tx := &TxStore{Store: s}
	_, _, claim, err := tx.BeginClaim(context.Background(), "t", "fp", newToken())
	require.NoError(t, err)
	require.NoError(t, claim.Commit(context.Background(), nil, longLease))
}
