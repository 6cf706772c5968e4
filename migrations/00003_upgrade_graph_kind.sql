-- 00003_upgrade_graph_kind: the ledger records graph upgrades (graft.UpgradeGraph, which
-- rewrites a format-1 graph's control objects as format 2; docs/format.md, *Upgrading a
-- format-1 graph*) as operations of kind upgrade_graph.

-- +goose Up
ALTER TABLE operations DROP CONSTRAINT operations_kind_check;
ALTER TABLE operations ADD CONSTRAINT operations_kind_check CHECK (kind IN (
    'create_branch', 'init_graph', 'write_table', 'cleanup',
    'merge', 'restore', 'delete_branch', 'tag', 'upgrade_graph'));

-- +goose Down
ALTER TABLE operations DROP CONSTRAINT operations_kind_check;
ALTER TABLE operations ADD CONSTRAINT operations_kind_check CHECK (kind IN (
    'create_branch', 'init_graph', 'write_table', 'cleanup',
    'merge', 'restore', 'delete_branch', 'tag'));
