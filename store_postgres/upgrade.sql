-- Upgrades a table made by schema.sql before key_is_sha256 to today's
-- schema, in place and in one transaction (Migrate's): the key column,
-- which held store.HashKey in hex, holds its 32 bytes, and the index on
-- expires_at, which kept every completion from being a HOT update, is
-- dropped. The ALTER TABLE locks the table and rewrites every row; a key
-- that is not 64 hex digits fails it, and nothing changes.
-- The locks it takes wait at most 5 s for the transactions open on the
-- table (an earlier version's requests): claims queue behind a waiting
-- ALTER, so it gives up instead, and Migrate can be run again.
SET LOCAL lock_timeout = '5s';
DROP INDEX IF EXISTS idempotency_keys_expires_idx;
ALTER TABLE idempotency_keys
    ALTER COLUMN key TYPE bytea USING decode(convert_from(key, 'UTF8'), 'hex'),
    ADD CONSTRAINT key_is_sha256 CHECK (octet_length(key) = 32);
