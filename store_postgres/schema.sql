-- Idempotency records of the pgstore package: one row per key.
-- Written for the default table name; pgstore.Migrate applies it with the
-- table name set by WithTable and WithSchema.
CREATE TABLE IF NOT EXISTS idempotency_keys (
    key         bytea       PRIMARY KEY,
    fingerprint bytea       NOT NULL,
    -- 1 in flight, 2 completed, 3 done but not replayable
    state       smallint    NOT NULL CHECK (state IN (1, 2, 3)),
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

CREATE INDEX IF NOT EXISTS idempotency_keys_expires_idx ON idempotency_keys (expires_at);
