-- Adds the steps of a request in flight (sqlitestore's encodeStep), NULL
-- once it completes, and when a done row completed, which its tombstone
-- names (sqlitestore.WithTombstones). sqlitestore.Migrate applies it to a
-- table made before them, in the transaction that applies schema.sql; ADD
-- COLUMN rewrites no row, and a row without them stores nothing for them.
ALTER TABLE idempotency_keys ADD COLUMN steps BLOB;
ALTER TABLE idempotency_keys ADD COLUMN completed_at INTEGER;
