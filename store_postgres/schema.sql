-- Idempotency records of the pgstore package: one row per key.
-- Written for the default table name; pgstore.Migrate applies it with the
-- table name set by WithTable and WithSchema.
--
-- No index but the primary key: completing, renewing and releasing a row
-- change no indexed column, so PostgreSQL updates it in place on its page
-- (a HOT update) without touching the index, and the sweeper finds expired
-- rows by reading the table in ranges of pages. No CHECK constraint: see
-- migration2.sql.
CREATE TABLE IF NOT EXISTS idempotency_keys (
    -- SHA-256 of the record's key (store.HashKey, undone from hex)
    key         bytea       PRIMARY KEY,
    fingerprint bytea       NOT NULL,
    -- 1 in flight, 2 completed, 3 done but not replayable
    state       smallint    NOT NULL,
    -- random token of the request holding or last holding the key
    token       bytea       NOT NULL,
    -- fencing number, raised on every takeover of an expired lease
    fence       bigint      NOT NULL,
    status      integer,
    -- response header as name, value, name, value, ...
    header      bytea[],
    body        bytea,
    -- end of the lease while in flight, of the retention once done
    expires_at  timestamptz NOT NULL
);

-- The table's schema version, which Migrate reads and each migration sets.
COMMENT ON TABLE idempotency_keys IS 'pgstore schema version 1';
