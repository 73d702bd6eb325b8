-- Adds the steps of a request in flight (sqlitestore's encodeSteps), NULL
-- once it completes. sqlitestore.Migrate applies it to a table made
-- before steps, in the transaction that applies schema.sql; ADD COLUMN
-- rewrites no row, and a row without steps stores nothing for it.
ALTER TABLE idempotency_keys ADD COLUMN steps BLOB;
