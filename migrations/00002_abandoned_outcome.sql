-- +goose Up
-- A table write whose upload never finished ends abandoned (docs/outcomes.md).
ALTER TABLE operations DROP CONSTRAINT operations_outcome_check;
ALTER TABLE operations ADD CONSTRAINT operations_outcome_check CHECK (outcome IN (
    'created', 'unpublished', 'in_doubt', 'conflict', 'not_found',
    'not_retained', 'invalid', 'refused', 'done', 'merged', 'adopted',
    'already_up_to_date', 'deleted', 'abandoned', 'failed'));

-- +goose Down
ALTER TABLE operations DROP CONSTRAINT operations_outcome_check;
ALTER TABLE operations ADD CONSTRAINT operations_outcome_check CHECK (outcome IN (
    'created', 'unpublished', 'in_doubt', 'conflict', 'not_found',
    'not_retained', 'invalid', 'refused', 'done', 'merged', 'adopted',
    'already_up_to_date', 'deleted', 'failed'));
