-- +goose Up
-- The result an operation's workflow reported when it finished: a run that runs its own
-- steps again after its end was recorded — its worker died before the workflow task
-- completed (docs/operations.md, "A lost worker, a restarted server, a closed workflow")
-- — reports that result, not "already finished".
ALTER TABLE operations ADD COLUMN result jsonb;
COMMENT ON COLUMN operations.result IS 'The result the operation''s workflow reported, recorded with its outcome; NULL until done.';

-- +goose Down
ALTER TABLE operations DROP COLUMN result;
