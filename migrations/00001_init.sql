-- 00001_init: graft's ledger — the control plane's memory of operations.
--
-- Object storage stays the authority for what exists; these tables record what graft
-- intended, what is in doubt, and what an in-flight operation or a cleanup run needs.
-- Every table is created unqualified, in the schema named by the connection's search_path.
-- Key columns compared by prefix use COLLATE "C" so that byte order makes a '/'-terminated
-- prefix an index range scan.
--
-- Ownership. A request owns an operation row only once its inputs matched the row's (same
-- kind, graph and inputs: the fingerprint) and its run claimed it (owner_run). Every
-- finish, release or settle write of the kernel lands only while the row is still
-- unfinished and still that run's, so a second, different request with the same op id, or
-- a late activity of a run that was terminated and reconciled, never touches it. pending is
-- the write the operation issued (or is about to issue) whose outcome the ledger does not
-- record yet: the reconciler settles it when the operation's workflow closed without
-- recording its end. phase and waiting say where a running operation stands.
--
-- Late puts. A commit put that answered ambiguously and was then settled — a re-issue
-- stored the same bytes — may still be delivered later. Were the commit's key reclaimed in
-- between, that late put would put the commit back on its branch's chain pinning table
-- versions already gone. Such a pin is marked late_put: the operation's finish releases its
-- other pins but keeps this one, so cleanup keeps the commit and what it pins, until an
-- operator releases it (graft op release-late-puts; docs/operations.md) — no clock decides
-- that the late put is dead.

-- +goose Up

-- Orders pin releases against cleanup-run starts. Values are drawn while the per-graph
-- advisory lock is held, so within a graph they follow the order in which the lock was taken.
CREATE SEQUENCE ledger_epoch;

-- graphs: the graphs graft has been told about. Not a foreign-key parent of the other tables:
-- an operation can be recorded before (or without) its graph's registration.
CREATE TABLE graphs (
    name       text PRIMARY KEY CHECK (name <> ''),         -- the graph's name, unique in this ledger
    locator    text NOT NULL CHECK (locator <> ''),         -- where the graph lives: store URL or key prefix
    created_at timestamptz NOT NULL DEFAULT now()           -- when the graph was registered
);
COMMENT ON TABLE graphs IS 'Graphs graft knows about: name and where their objects live.';

-- operations: the audit log, one row per branch operation (create_branch, cleanup, ...).
CREATE TABLE operations (
    id          text PRIMARY KEY CHECK (id <> ''),          -- ULID or workflow-derived id; the idempotency key
    kind        text NOT NULL CHECK (kind IN (              -- which operation
                    'create_branch', 'init_graph', 'write_table', 'cleanup',
                    'merge', 'restore', 'delete_branch', 'tag')),
    graph       text NOT NULL CHECK (graph <> ''),          -- the graph operated on
    inputs      jsonb NOT NULL DEFAULT '{}'::jsonb,         -- the operation's input, as the caller gave it
    state       text NOT NULL DEFAULT 'running' CHECK (     -- running -> in_doubt -> done; done is final
                    state IN ('running', 'in_doubt', 'done')),
    outcome     text NULL CHECK (outcome IN (               -- the definitive outcome; set exactly when done
                    'created', 'unpublished', 'in_doubt', 'conflict', 'not_found',
                    'not_retained', 'invalid', 'refused', 'done', 'merged', 'adopted',
                    'already_up_to_date', 'deleted', 'failed')),
    error       text NULL,                                  -- human-readable detail of a failed outcome
    workflow_id text NULL,                                  -- Temporal workflow id running the operation
    run_id      text NULL,                                  -- Temporal run id of that workflow
    created_at  timestamptz NOT NULL DEFAULT now(),         -- when the operation was recorded
    updated_at  timestamptz NOT NULL DEFAULT now(),         -- last state change
    finished_at timestamptz NULL,                           -- when it became done; NULL until then
    fingerprint     text NULL,                              -- sha256 (hex) of kind, graph and inputs: which request the row is
    owner_run       text NULL,                              -- the run that owns the row: a workflow run id, or reconcile/{run id}
    phase           text NULL,                              -- the phase a running operation is in (prepare, commit, settle, fence, parked, ...)
    waiting         text NULL,                              -- what a running operation waits for, for people
    pending         jsonb NULL,                             -- the write issued whose outcome is not recorded yet (the kernel's write spec)
    settle_attempts integer NOT NULL DEFAULT 0 CHECK (settle_attempts >= 0), -- re-issues of an in-doubt write
    CONSTRAINT operations_done_iff_outcome CHECK (
        (state = 'done') = (outcome IS NOT NULL) AND (state = 'done') = (finished_at IS NOT NULL))
);
COMMENT ON TABLE operations IS 'Audit log of branch operations; state done is final and carries the outcome.';
COMMENT ON COLUMN operations.owner_run IS 'The run that owns the row; finish, release and settle writes land only while it is this run''s and unfinished.';
COMMENT ON COLUMN operations.pending IS 'The write an unfinished operation issued whose outcome is not recorded; the reconciler settles it.';
CREATE INDEX operations_by_graph ON operations (graph, created_at DESC, id DESC);
CREATE INDEX operations_unfinished ON operations (created_at) WHERE state <> 'done';
CREATE INDEX operations_by_workflow ON operations (workflow_id) WHERE workflow_id IS NOT NULL;

-- incarnations: the witness. One row per incarnation, written before each storage effect.
CREATE TABLE incarnations (
    graph      text NOT NULL CHECK (graph <> ''),           -- the graph the branch lives in
    logical    text NOT NULL CHECK (logical <> ''),         -- logical branch name, e.g. feature/x
    native     text NOT NULL CHECK (native <> ''),          -- native name {logical}.{ULID}, fresh per attempt
    tree       text NOT NULL CHECK (tree <> ''),            -- the incarnation's tree (commit log) name
    state      text NOT NULL DEFAULT 'intent' CHECK (       -- intent -> cloned -> in_doubt -> live | unpublished; live -> retired
                   state IN ('intent', 'cloned', 'in_doubt', 'live', 'unpublished', 'retired')),
    op_id      text NOT NULL REFERENCES operations (id),    -- the operation that created this incarnation
    created_at timestamptz NOT NULL DEFAULT now(),          -- when the intent was witnessed
    updated_at timestamptz NOT NULL DEFAULT now(),          -- last state change
    settled_at timestamptz NULL,                            -- when a definitive state (live, unpublished, retired) was first reached
    PRIMARY KEY (graph, native),
    CONSTRAINT incarnations_settled_iff_definitive CHECK (
        (state IN ('live', 'unpublished', 'retired')) = (settled_at IS NOT NULL))
);
COMMENT ON TABLE incarnations IS 'The witness: each incarnation''s state recorded before each storage effect.';
-- At most one unsettled-or-live incarnation per logical branch: a database fact.
CREATE UNIQUE INDEX incarnations_one_open_per_logical ON incarnations (graph, logical)
    WHERE state IN ('intent', 'cloned', 'in_doubt', 'live');
CREATE INDEX incarnations_by_logical ON incarnations (graph, logical, created_at);
CREATE INDEX incarnations_by_state ON incarnations (graph, state);
CREATE INDEX incarnations_by_op ON incarnations (op_id);

-- op_pins: what an in-flight operation needs retained. A released pin is kept (released_*
-- set) while a cleanup run that started before the release is active, so the run still
-- treats the key as pinned; PinsRelease and CleanupRunFinish prune the rest.
CREATE TABLE op_pins (
    op_id        text NOT NULL REFERENCES operations (id),  -- the operation holding the pin
    graph        text NOT NULL CHECK (graph <> ''),         -- the graph the key belongs to (the operation's graph)
    kind         text NOT NULL CHECK (                      -- what the key names
                     kind IN ('commit', 'table_version', 'tree', 'object')),
    key          text COLLATE "C" NOT NULL CHECK (key <> ''), -- storage key; ending in '/' pins every key under it
    created_at   timestamptz NOT NULL DEFAULT now(),        -- when the pin was registered
    released_at  timestamptz NULL,                          -- when the operation let go; NULL while held
    released_seq bigint NULL,                               -- ledger_epoch value at release; orders it against run starts
    late_put     boolean NOT NULL DEFAULT false,            -- a put of the key may still land: kept after the operation ends
    PRIMARY KEY (op_id, kind, key),
    CONSTRAINT op_pins_released_together CHECK ((released_at IS NULL) = (released_seq IS NULL))
);
COMMENT ON TABLE op_pins IS 'Keys in-flight operations need retained; checked against the condemned set under a per-graph lock.';
COMMENT ON COLUMN op_pins.late_put IS 'A put of this key answered ambiguously and may still land; the pin outlives its operation until an operator releases it.';
CREATE INDEX op_pins_by_graph_key ON op_pins (graph, key);

-- cleanup_runs: one row per cleanup run of one graph.
CREATE TABLE cleanup_runs (
    id          text PRIMARY KEY CHECK (id <> ''),          -- run id (ULID or the cleanup operation's id)
    graph       text NOT NULL CHECK (graph <> ''),          -- the graph being cleaned
    mode        text NOT NULL CHECK (                       -- dry_run plans only; mark condemns; sweep condemns and deletes
                    mode IN ('dry_run', 'mark', 'sweep')),
    policy      jsonb NOT NULL DEFAULT '{}'::jsonb,         -- the retention policy the run applies
    state       text NOT NULL DEFAULT 'running' CHECK (     -- running is active; the others are final
                    state IN ('running', 'done', 'failed', 'aborted')),
    start_seq   bigint NOT NULL,                            -- ledger_epoch value at start; pins released after it still count
    started_at  timestamptz NOT NULL DEFAULT now(),         -- when the run started
    finished_at timestamptz NULL,                           -- when it reached a final state; NULL while running
    report      jsonb NULL,                                 -- the run's summary (counts, bytes, skipped keys)
    CONSTRAINT cleanup_runs_finished_iff_final CHECK ((state = 'running') = (finished_at IS NULL))
);
COMMENT ON TABLE cleanup_runs IS 'Cleanup runs; a running mark or sweep run''s condemned set refuses new pins.';
-- One condemning run per graph at a time (dry runs condemn nothing that blocks pins).
CREATE UNIQUE INDEX cleanup_runs_one_active_per_graph ON cleanup_runs (graph)
    WHERE state = 'running' AND mode <> 'dry_run';
CREATE INDEX cleanup_runs_by_graph ON cleanup_runs (graph, started_at DESC);

-- cleanup_condemned: the keys a run has decided to reclaim.
CREATE TABLE cleanup_condemned (
    run_id       text NOT NULL REFERENCES cleanup_runs (id) ON DELETE CASCADE, -- the run that condemned the key
    graph        text NOT NULL CHECK (graph <> ''),         -- the run's graph, copied for the pin check
    key          text COLLATE "C" NOT NULL CHECK (key <> ''), -- storage key; ending in '/' condemns every key under it
    kind         text NOT NULL CHECK (                      -- what the key names
                     kind IN ('commit', 'table_version', 'tree', 'object')),
    size         bigint NOT NULL DEFAULT 0 CHECK (size >= 0), -- bytes reclaimed by deleting it, when known
    state        text NOT NULL DEFAULT 'condemned' CHECK (  -- condemned, then deleted once the sweep removed it
                     state IN ('condemned', 'deleted')),
    condemned_at timestamptz NOT NULL DEFAULT now(),        -- when it was condemned
    deleted_at   timestamptz NULL,                          -- when the sweep deleted it; NULL until then
    PRIMARY KEY (run_id, key),
    CONSTRAINT cleanup_condemned_deleted_iff_time CHECK ((state = 'deleted') = (deleted_at IS NOT NULL))
);
COMMENT ON TABLE cleanup_condemned IS 'Keys condemned by a cleanup run; no pin may be registered on them while the run is active.';
CREATE INDEX cleanup_condemned_by_graph_key ON cleanup_condemned (graph, key);

-- +goose Down
DROP TABLE cleanup_condemned;
DROP TABLE cleanup_runs;
DROP TABLE op_pins;
DROP TABLE incarnations;
DROP TABLE operations;
DROP TABLE graphs;
DROP SEQUENCE ledger_epoch;
