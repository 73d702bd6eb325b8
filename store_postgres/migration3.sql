-- Schema version 3: adds the steps of a request in flight, one element a
-- step (see pgstore's encodeStep), NULL once it completes. A column
-- without a default is added without rewriting the table, and a row
-- without steps stores nothing for it.
ALTER TABLE idempotency_keys ADD COLUMN IF NOT EXISTS steps bytea[];

COMMENT ON TABLE idempotency_keys IS 'pgstore schema version 3';
