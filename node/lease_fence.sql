-- lease fencing for PostgreSQL: one row per resource, checked and recorded inside the caller's
-- own transaction (docs/postgres.md).
--
-- Install (idempotent; run it again after an upgrade of the library):
--     psql -X -1 -v ON_ERROR_STOP=1 -f lease_fence.sql "$DATABASE_URL"
-- or let a helper do it: Rust lease_postgres::migrate, Python lease.pg.migrate, Node
-- require('bucket-lease/pg').migrate, Go pgfence.Migrate. It creates the table and the
-- function in the first schema of the search_path (usually public); the function keeps that
-- search_path, so callers need not have the schema on theirs.
--
-- Use, inside the transaction whose writes must not land once a newer holder took over:
--     BEGIN;
--     SELECT lease_fence('jobs', 's3://bucket/locks/jobs#1767225600001@3f2a9c');
--     ... the transaction's reads and writes ...
--     COMMIT;
--
-- lease_fence(resource, token) admits the token (`URL#EPOCH@HOLDER`, what Lease.token and
-- `lease run`'s $LEASE_TOKEN are) when its epoch is above the one recorded for the resource, or
-- equal to it and of the same holder, and records it; it raises SQLSTATE LF001 for a lower
-- epoch, an equal epoch of another holder, or a token of another lease (the library's `Fenced`
-- in every language), and LF002 for a malformed token or an empty resource (`Invalid`), and
-- for a queued lock's shared or scoped grant's token (`;shared`, `;path=P`, `;range=A..B`):
-- one row per resource cannot apply the per-scope rule, so such a token is refused rather than
-- taken for a whole-lock one.
--
-- Why it is safe: the upsert below locks the resource's row until the caller's transaction
-- ends, whether it admits the token or not. A later holder's lease_fence on that resource waits
-- for that lock; once the earlier transaction commits it re-checks the committed row (READ
-- COMMITTED) or fails with 40001 serialization_failure (REPEATABLE READ, SERIALIZABLE: roll back
-- and retry). So the earlier transaction commits before the later holder is admitted, or not at
-- all: never after it. Once a transaction admitted at epoch E committed, no transaction with a
-- lower epoch can be admitted for that resource again. Every transaction fenced on a resource
-- runs after the previous one on it has ended, so a read after lease_fence sees every earlier
-- fenced write to it, and a read-modify-write loses no update.
--
-- Optional arguments:
--   lock_wait    how long to wait for an earlier transaction's lock on the row (default: the
--                session's lock_timeout, usually forever); then SQLSTATE 55P03
--                lock_not_available (`Timeout`). '0' tries once.
--   idle_timeout idle_in_transaction_session_timeout for the rest of this transaction: a holder
--                paused that long with the transaction open is disconnected by the server, its
--                transaction rolled back, and the row lock released for the next holder.
--
-- Never delete a row of lease_fence: a deleted row admits any epoch again.

SET LOCAL client_min_messages = warning;
-- Concurrent installs take turns (in one transaction: psql -1, or the helpers' migrate).
DO $$ BEGIN PERFORM pg_advisory_xact_lock(7226005412993520481); END $$;

CREATE TABLE IF NOT EXISTS lease_fence (
    resource text PRIMARY KEY CHECK (resource <> ''),
    lease    text NOT NULL,
    epoch    numeric(20, 0) NOT NULL,
    holder   text
);

COMMENT ON TABLE lease_fence IS
    'lease fencing: the highest token admitted per resource (docs/postgres.md); never delete a row';

CREATE OR REPLACE FUNCTION lease_fence(
    resource text,
    token text,
    lock_wait interval DEFAULT NULL,
    idle_timeout interval DEFAULT NULL
) RETURNS void
LANGUAGE plpgsql
VOLATILE
SET search_path FROM CURRENT
AS $fn$
DECLARE
    -- URL#EPOCH@HOLDER, parsed from the right as the library does: the URL may hold a '#'.
    -- (String functions and capture-free patterns: a regexp_match with captures cost ~50 µs.)
    hash int := strpos(reverse(token), '#');
    whole_tail text := right(token, hash - 1);
    -- A queued lock's grant may follow: ;shared, ;path=P, ;range=A..B (a path escapes '#' and
    -- ';'). Only ;exclusive alone names the whole lock, as no suffix does.
    semi int := strpos(whole_tail, ';');
    grant_text text := CASE WHEN semi = 0 THEN '' ELSE substr(whole_tail, semi) END;
    tail text := CASE WHEN semi = 0 THEN whole_tail ELSE left(whole_tail, semi - 1) END;
    at int := strpos(tail, '@');
    t_lease text := left(token, length(token) - hash);
    t_epoch_text text := CASE WHEN at = 0 THEN tail ELSE left(tail, at - 1) END;
    t_holder text := CASE WHEN at = 0 THEN NULL ELSE substr(tail, at + 1) END;
    t_epoch numeric(20, 0);
    saved_lock_timeout text;
    row_lease text;
    row_epoch numeric(20, 0);
    row_holder text;
BEGIN
    IF resource IS NULL OR resource = '' THEN
        RAISE EXCEPTION 'lease_fence: the resource must be a non-empty name'
            USING ERRCODE = 'LF002';
    END IF;
    IF token IS NULL OR hash = 0 OR t_lease = '' OR t_holder !~ '^[0-9A-Za-z]+$'
       OR (CASE WHEN t_epoch_text ~ '^[0-9]{1,20}$'
                THEN t_epoch_text::numeric > 18446744073709551615 ELSE true END) THEN
        RAISE EXCEPTION 'lease_fence: invalid fencing token %: expected LEASE_URL#EPOCH or LEASE_URL#EPOCH@HOLDER',
            coalesce(quote_literal(token), 'NULL')
            USING ERRCODE = 'LF002';
    END IF;
    -- One row per resource keeps one token, compared by epoch alone: right for a token of the
    -- whole lock held exclusively, wrong for the others (a later reader's or a disjoint scope's
    -- token would refuse a live holder; a reader's would fence writers). Refused, never
    -- misread as a whole-lock token (docs/postgres.md).
    IF grant_text <> '' AND grant_text <> ';exclusive' THEN
        RAISE EXCEPTION 'lease_fence: token % is a queued lock''s shared or scoped grant (%): lease_fence admits only a token of the whole lock held exclusively',
            quote_literal(token), substr(grant_text, 2)
            USING ERRCODE = 'LF002',
                  HINT = 'fence database writes with a plain lease''s token or an exclusive grant of the whole lock (acquired without shared, path or range); per-scope and reader fencing is for objects in the store (docs/postgres.md)';
    END IF;
    t_epoch := t_epoch_text::numeric;

    IF idle_timeout IS NOT NULL THEN
        PERFORM set_config('idle_in_transaction_session_timeout',
            greatest(1, ceil(extract(epoch FROM idle_timeout) * 1000))::bigint::text, true);
    END IF;
    IF lock_wait IS NOT NULL THEN
        saved_lock_timeout := current_setting('lock_timeout');
        -- lock_timeout = 0 would mean "forever": a wait of 0 tries (almost) once.
        PERFORM set_config('lock_timeout',
            greatest(1, ceil(extract(epoch FROM lock_wait) * 1000))::bigint::text, true);
    END IF;

    -- Admit and record, or only lock: ON CONFLICT DO UPDATE locks the existing row even where
    -- its WHERE is false, until this transaction ends.
    INSERT INTO lease_fence AS f (resource, lease, epoch, holder)
    VALUES (lease_fence.resource, t_lease, t_epoch, t_holder)
    ON CONFLICT ON CONSTRAINT lease_fence_pkey DO UPDATE
        SET epoch = excluded.epoch,
            -- A token without a holder cannot be told apart by holder; it does not erase the
            -- holder recorded at the same epoch, so that holder alone stays admitted.
            holder = CASE WHEN f.epoch = excluded.epoch
                          THEN coalesce(excluded.holder, f.holder)
                          ELSE excluded.holder END
        WHERE f.lease = excluded.lease
          AND (f.epoch < excluded.epoch
               OR (f.epoch = excluded.epoch
                   AND (f.holder IS NULL OR excluded.holder IS NULL
                        OR f.holder = excluded.holder)));
    IF FOUND THEN
        IF lock_wait IS NOT NULL THEN
            PERFORM set_config('lock_timeout', saved_lock_timeout, true);
        END IF;
        RETURN;
    END IF;

    -- Refused. The row is locked by this transaction: this reads what refused the token.
    SELECT f.lease, f.epoch, f.holder INTO row_lease, row_epoch, row_holder
    FROM lease_fence f WHERE f.resource = lease_fence.resource;
    IF row_lease <> t_lease THEN
        RAISE EXCEPTION 'lease_fence: resource % is fenced by the lease %; a token of % cannot write it',
            quote_literal(resource), row_lease, t_lease
            USING ERRCODE = 'LF001',
                  DETAIL = 'admitted: ' || row_lease || '#' || row_epoch || coalesce('@' || row_holder, ''),
                  HINT = 'roll back; use one resource name per lease';
    ELSIF row_epoch > t_epoch THEN
        RAISE EXCEPTION 'lease_fence: resource % was admitted at epoch %, newer than this holder''s epoch %: refused',
            quote_literal(resource), row_epoch, t_epoch
            USING ERRCODE = 'LF001',
                  DETAIL = 'admitted: ' || row_lease || '#' || row_epoch || coalesce('@' || row_holder, ''),
                  HINT = 'roll back and stop acting as the holder: a newer holder exists';
    ELSE
        RAISE EXCEPTION 'lease_fence: resource % was admitted at epoch % by another holder than this one: two holders with one epoch are never both admitted',
            quote_literal(resource), row_epoch
            USING ERRCODE = 'LF001',
                  DETAIL = 'admitted: ' || row_lease || '#' || row_epoch || coalesce('@' || row_holder, ''),
                  HINT = 'roll back and stop acting as the holder';
    END IF;
END
$fn$;

COMMENT ON FUNCTION lease_fence(text, text, interval, interval) IS
    'lease fencing v1: admit a fencing token for a resource inside this transaction, or raise LF001 (docs/postgres.md)';
