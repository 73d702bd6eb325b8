-- The claim of mysqlstore, one CALL and one round trip: claim_key for
-- claim_fingerprint under claim_token, for lease_us microseconds, or held
-- by the caller's session while in_tx (a transactional claim); a done row
-- is kept as its tombstone for tomb_us after its retention (0: none). It
-- returns one row: claimed, state (4 for a tombstone), fingerprint, fence,
-- status, header, body, ttl_us, live, lock_name, locked_out, steps,
-- completed_us (since the Unix epoch, UTC); state 0 when no row was read.
--
-- A free key is inserted; a duplicate (error 1062) is taken over when its
-- lease ended or its retention did, raising an in-flight row's fence. A
-- transactional claim first takes the key's named lock without waiting:
-- without it the claim writes nothing and only reads. A row a transaction
-- holds (held = 1) is live while anyone holds that lock, which the server
-- frees when the holder's connection ends. Every write is one committed
-- statement outside any transaction, so no claim waits on another's row
-- for longer than a statement.
CREATE PROCEDURE `idempotency_keys_claim`(
    IN claim_key BINARY(32), IN claim_fingerprint BLOB, IN claim_token VARBINARY(255),
    IN lease_us BIGINT, IN in_tx BOOLEAN, IN tomb_us BIGINT)
    MODIFIES SQL DATA
    SQL SECURITY INVOKER
BEGIN
    DECLARE lock_name VARCHAR(64) DEFAULT CONCAT('idempotency:',
        LEFT(SHA2(CONCAT(DATABASE(), '.idempotency_keys.', HEX(claim_key)), 256), 52));
    DECLARE duplicate BOOLEAN DEFAULT FALSE;
    DECLARE locked_out BOOLEAN DEFAULT FALSE;
    DECLARE won BOOLEAN DEFAULT FALSE;
    DECLARE CONTINUE HANDLER FOR 1062 SET duplicate = TRUE;
    IF in_tx THEN
        SET locked_out = COALESCE(GET_LOCK(lock_name, 0), 0) = 0;
    END IF;
    IF NOT locked_out THEN
        INSERT INTO `idempotency_keys` (`key`, fingerprint, state, token, fence, held, expires_at)
        VALUES (claim_key, claim_fingerprint, 1, claim_token, 1, in_tx,
                UTC_TIMESTAMP(6) + INTERVAL lease_us MICROSECOND);
        SET won = NOT duplicate;
    END IF;
    IF duplicate THEN
        -- Assignments run left to right, each seeing the ones before it.
        -- A takeover of the same request keeps its steps; these come first,
        -- before state and fingerprint change.
        UPDATE `idempotency_keys`
        SET steps = IF(state = 1 AND fingerprint = claim_fingerprint, steps, NULL),
            step_names = IF(state = 1 AND fingerprint = claim_fingerprint, step_names, NULL),
            step_count = IF(state = 1 AND fingerprint = claim_fingerprint, step_count, 0),
            fence = IF(state = 1, fence + 1, 1), fingerprint = claim_fingerprint, state = 1,
            token = claim_token, held = in_tx, status = NULL, header = NULL, body = NULL,
            completed_at = NULL, expires_at = UTC_TIMESTAMP(6) + INTERVAL lease_us MICROSECOND
        WHERE `key` = claim_key
          AND IF(held = 1, COALESCE(IS_USED_LOCK(lock_name), CONNECTION_ID()) = CONNECTION_ID(),
                 expires_at + INTERVAL IF(state = 1, 0, tomb_us) MICROSECOND <= UTC_TIMESTAMP(6));
        SET won = ROW_COUNT() > 0;
    END IF;
    IF in_tx AND NOT locked_out AND NOT won THEN
        DO RELEASE_LOCK(lock_name);
    END IF;
    SELECT won OR COALESCE(NOT in_tx AND state = 1 AND held = 0 AND token = claim_token
                           AND expires_at > UTC_TIMESTAMP(6), FALSE) AS claimed,
           -- a done row past its retention is its tombstone
           COALESCE(IF(state <> 1 AND held = 0 AND expires_at <= UTC_TIMESTAMP(6), 4, state), 0) AS state,
           fingerprint, COALESCE(fence, 0) AS fence, status, header, body,
           -- a won claim's time left is its lease, from its write
           -- a done row's, to the end of its tombstone
           COALESCE(IF(won, lease_us, IF(held = 1, 0, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6),
               expires_at + INTERVAL IF(state = 1, 0, tomb_us) MICROSECOND))), 0) AS ttl_us,
           COALESCE(IF(held = 1, IS_USED_LOCK(lock_name) IS NOT NULL,
                       expires_at + INTERVAL IF(state = 1, 0, tomb_us) MICROSECOND > UTC_TIMESTAMP(6)), FALSE) AS live,
           lock_name, locked_out, steps,
           TIMESTAMPDIFF(MICROSECOND, '1970-01-01', completed_at) AS completed_us
    FROM (SELECT 1) AS one LEFT JOIN `idempotency_keys` ON `key` = claim_key;
END
