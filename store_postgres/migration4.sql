-- Schema version 4: adds when a key completed, which a tombstone (see
-- pgstore's WithTombstones) reports once the response is gone. A column
-- without a default is added without rewriting the table; rows completed
-- before it have none.
ALTER TABLE idempotency_keys ADD COLUMN IF NOT EXISTS completed_at timestamptz;

COMMENT ON TABLE idempotency_keys IS 'pgstore schema version 4';
