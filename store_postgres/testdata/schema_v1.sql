-- schema.sql as it was before key_is_sha256: the key in hex, an index on
-- expires_at. TestMigrateUpgrades upgrades a table made by it.
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
