-- Idempotency records of the mysqlstore package: one row per key.
-- Written for the default table name; mysqlstore.Migrate applies it with the
-- table name set by WithTable, then creates the claim procedure (claim.sql)
-- and records the schema version in the table's comment: 0 until then.
CREATE TABLE IF NOT EXISTS `idempotency_keys` (
    -- SHA-256 of the record's key (store.HashKey, undone from hex)
    `key`       BINARY(32)       NOT NULL PRIMARY KEY,
    fingerprint BLOB             NOT NULL,
    -- 1 in flight, 2 completed, 3 done but not replayable
    state       TINYINT          NOT NULL,
    -- random token of the request holding or last holding the key
    token       VARBINARY(255)   NOT NULL,
    -- fencing number, raised on every takeover of an expired lease
    fence       BIGINT           NOT NULL,
    -- 1 while a transactional claim holds the key: its lease is the key's
    -- named lock (GET_LOCK), not expires_at
    held        TINYINT          NOT NULL DEFAULT 0,
    status      SMALLINT,
    -- response header, store/headercodec's bytes
    header      MEDIUMBLOB,
    body        LONGBLOB,
    -- steps of the request in flight (store/stepcodec), the hex of their
    -- names each followed by a comma, and how many there are
    steps       LONGBLOB,
    step_names  BLOB,
    step_count  SMALLINT         NOT NULL DEFAULT 0,
    -- UTC time the key completed, for its tombstone (WithTombstones)
    completed_at DATETIME(6),
    -- UTC end of the lease while in flight, of the retention once done
    expires_at  DATETIME(6)      NOT NULL,
    KEY `idempotency_keys_expires_at` (expires_at)
) ENGINE = InnoDB COMMENT = 'mysqlstore schema version 0'
