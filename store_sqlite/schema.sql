-- Idempotency records of the sqlitestore package: one row per key.
-- sqlitestore.Migrate applies it; times are milliseconds since the Unix
-- epoch on SQLite's clock (unixepoch('subsec')), which every process of
-- the host shares.
CREATE TABLE IF NOT EXISTS idempotency_keys (
    -- store.HashKey of the record's key
    key         TEXT    PRIMARY KEY,
    fingerprint BLOB    NOT NULL,
    -- 1 in flight, 2 completed, 3 done but not replayable
    state       INTEGER NOT NULL CHECK (state IN (1, 2, 3)),
    -- random token of the request holding or last holding the key
    token       BLOB    NOT NULL,
    -- fencing number, raised on every takeover of an expired lease
    fence       INTEGER NOT NULL,
    status      INTEGER,
    -- response header, as store/headercodec encodes it
    header      BLOB,
    body        BLOB,
    -- end of the lease while in flight, of the retention once done
    expires_at  INTEGER NOT NULL,
    -- expires_at as it was last set by an insert, renew, complete or
    -- release, for the sweeper's index; a takeover leaves it behind
    sweep_at    INTEGER NOT NULL
);

CREATE INDEX IF NOT EXISTS idempotency_keys_sweep_idx ON idempotency_keys (sweep_at);
