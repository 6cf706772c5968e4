-- +goose Up
-- Merges into a protected branch wait for checks and approvals (docs/merge-restore-tags.md,
-- "Protected branches"); a failed check, a rejection or a passed deadline ends them rejected.
ALTER TABLE operations DROP CONSTRAINT operations_outcome_check;
ALTER TABLE operations ADD CONSTRAINT operations_outcome_check CHECK (outcome IN (
    'created', 'unpublished', 'in_doubt', 'conflict', 'not_found',
    'not_retained', 'invalid', 'refused', 'done', 'merged', 'adopted',
    'already_up_to_date', 'deleted', 'abandoned', 'rejected', 'failed'));

-- branch_rules: what a merge into a branch must wait for.
CREATE TABLE branch_rules (
    graph      text NOT NULL CHECK (graph <> ''),           -- the graph the branch lives in
    branch     text NOT NULL CHECK (branch <> ''),          -- the protected branch (logical name)
    checks     jsonb NOT NULL DEFAULT '[]'::jsonb,          -- [{name, task_queue}]: check workflows every merge into it runs
    approvals  integer NOT NULL DEFAULT 0 CHECK (approvals >= 0), -- approvals a merge into it needs
    set_by     text NOT NULL DEFAULT '',                    -- who set the rule, as they named themselves
    updated_at timestamptz NOT NULL DEFAULT now(),          -- when the rule was last set
    PRIMARY KEY (graph, branch)
);
COMMENT ON TABLE branch_rules IS 'Protected branches: the checks and approvals a merge into the branch waits for.';

-- merge_reviews: every approval and rejection of a waiting merge, with who and when.
CREATE TABLE merge_reviews (
    op_id       text NOT NULL REFERENCES operations (id),   -- the merge reviewed
    seq         bigserial,                                  -- order of the reviews
    reviewer    text NOT NULL CHECK (reviewer <> ''),       -- who, as they named themselves
    verdict     text NOT NULL CHECK (verdict IN ('approve', 'reject')),
    comment     text NOT NULL DEFAULT '',                   -- the comment or the reason
    source_head text NOT NULL CHECK (source_head <> ''),    -- the source head reviewed: an approval counts only while it is the source's head
    created_at  timestamptz NOT NULL DEFAULT now(),         -- when the review was recorded
    PRIMARY KEY (op_id, seq)
);
COMMENT ON TABLE merge_reviews IS 'Approvals and rejections of merges waiting on a protected branch.';

-- +goose Down
DROP TABLE merge_reviews;
DROP TABLE branch_rules;
ALTER TABLE operations DROP CONSTRAINT operations_outcome_check;
ALTER TABLE operations ADD CONSTRAINT operations_outcome_check CHECK (outcome IN (
    'created', 'unpublished', 'in_doubt', 'conflict', 'not_found',
    'not_retained', 'invalid', 'refused', 'done', 'merged', 'adopted',
    'already_up_to_date', 'deleted', 'abandoned', 'failed'));
