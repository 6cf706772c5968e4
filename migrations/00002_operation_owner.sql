-- 00002_operation_owner: ledger rows are owned, and an operation's pending write is recorded.
--
-- A request owns an operation row only once its inputs matched the row's (same kind, graph
-- and inputs: the fingerprint) and its run claimed it (owner_run). Every finish, release or
-- settle write of the kernel lands only while the row is still unfinished and still that
-- run's, so a second, different request with the same op id, or a late activity of a run
-- that was terminated and reconciled, never touches it.
--
-- pending is the write the operation issued (or is about to issue) whose outcome the ledger
-- does not record yet: the reconciler settles it when the operation's workflow closed
-- without recording its end. phase and waiting say where a running operation stands.

-- +goose Up
ALTER TABLE operations
    ADD COLUMN fingerprint     text NULL,                 -- sha256 (hex) of kind, graph and inputs: which request the row is
    ADD COLUMN owner_run       text NULL,                 -- the run that owns the row: a workflow run id, or reconcile/{run id}
    ADD COLUMN phase           text NULL,                 -- the phase a running operation is in (prepare, commit, settle, fence, parked, ...)
    ADD COLUMN waiting         text NULL,                 -- what a running operation waits for, for people
    ADD COLUMN pending         jsonb NULL,                -- the write issued whose outcome is not recorded yet (the kernel's write spec)
    ADD COLUMN settle_attempts integer NOT NULL DEFAULT 0 CHECK (settle_attempts >= 0); -- re-issues of an in-doubt write
UPDATE operations
    SET fingerprint = encode(sha256(convert_to(kind || E'\n' || graph || E'\n' || inputs::text, 'UTF8')), 'hex');
COMMENT ON COLUMN operations.owner_run IS 'The run that owns the row; finish, release and settle writes land only while it is this run''s and unfinished.';
COMMENT ON COLUMN operations.pending IS 'The write an unfinished operation issued whose outcome is not recorded; the reconciler settles it.';

-- +goose Down
ALTER TABLE operations
    DROP COLUMN settle_attempts,
    DROP COLUMN pending,
    DROP COLUMN waiting,
    DROP COLUMN phase,
    DROP COLUMN owner_run,
    DROP COLUMN fingerprint;
