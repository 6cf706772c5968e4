package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

const cleanupRunColumns = `id, graph, mode, policy, state, started_at, finished_at, report`

// cleanupRunsOneActive is the unique partial index allowing one condemning run per graph.
const cleanupRunsOneActive = "cleanup_runs_one_active_per_graph"

func scanCleanupRun(row pgx.Row) (CleanupRun, error) {
	var run CleanupRun
	var finished *time.Time
	err := row.Scan(&run.ID, &run.Graph, &run.Mode, &run.Policy, &run.State, &run.StartedAt, &finished, &run.Report)
	run.FinishedAt = timeOrZero(finished)
	return run, err
}

func getCleanupRun(ctx context.Context, q Querier, id string) (CleanupRun, error) {
	return scanCleanupRun(q.QueryRow(ctx, `SELECT `+cleanupRunColumns+` FROM cleanup_runs WHERE id = $1`, id))
}

// CleanupRunInsertParams starts a cleanup run.
type CleanupRunInsertParams struct {
	ID     string // NewID, or the cleanup operation's id
	Graph  string
	Mode   CleanupMode
	Policy json.RawMessage // the retention policy applied; defaults to {}
}

// CleanupRunInsert records a running cleanup run, before it reads the graph's roots. A
// second running mark or sweep run of a graph is ErrDuplicate naming the first. Repeating
// the insert with the same id, graph and mode returns the existing run.
func (c *Catalog) CleanupRunInsert(ctx context.Context, p CleanupRunInsertParams) (CleanupRun, error) {
	what := fmt.Sprintf("insert cleanup run %q", p.ID)
	if p.ID == "" || p.Graph == "" {
		return CleanupRun{}, c.wrap(what, invalid("cleanup run id and graph are required"))
	}
	if !slices.Contains([]CleanupMode{CleanupDryRun, CleanupMark, CleanupSweep}, p.Mode) {
		return CleanupRun{}, c.wrap(what, invalid("unknown cleanup mode %q", p.Mode))
	}
	policy, err := jsonArg(p.Policy, `{}`, "policy is")
	if err != nil {
		return CleanupRun{}, c.wrap(what, err)
	}
	return wrapped[CleanupRun](c, what)(inTx(ctx, c, func(tx pgx.Tx) (CleanupRun, error) {
		// The operation row first (OperationFinish's lock order): a run is never inserted
		// under an operation that ended (CleanupOperationAbandon).
		var state OperationState
		err := tx.QueryRow(ctx, `SELECT state FROM operations WHERE id = $1 FOR UPDATE`, p.ID).Scan(&state)
		switch {
		case err == nil && state == OperationDone:
			return CleanupRun{}, &StateConflictError{Entity: "operation", ID: p.ID, Expected: "running", Current: string(state)}
		case err != nil && !errors.Is(err, pgx.ErrNoRows):
			return CleanupRun{}, err
		}
		if err := lockGraph(ctx, tx, p.Graph, exclusive); err != nil {
			return CleanupRun{}, err
		}
		run, err := savepoint(ctx, tx, func(sp pgx.Tx) (CleanupRun, error) {
			return scanCleanupRun(sp.QueryRow(ctx, `
				INSERT INTO cleanup_runs (id, graph, mode, policy, start_seq)
				VALUES ($1, $2, $3, $4::jsonb, nextval('ledger_epoch'))
				ON CONFLICT (id) DO NOTHING
				RETURNING `+cleanupRunColumns, p.ID, p.Graph, p.Mode, policy))
		})
		switch {
		case constraintOf(err, codeUniqueViolation) == cleanupRunsOneActive:
			var active string
			if err = tx.QueryRow(ctx, `SELECT id FROM cleanup_runs WHERE graph = $1 AND state = 'running' AND mode <> 'dry_run'`,
				p.Graph).Scan(&active); err == nil {
				err = fmt.Errorf("%w: cleanup run %s is already running on graph %q", ErrDuplicate, active, p.Graph)
			}
		case errors.Is(err, pgx.ErrNoRows):
			run, err = getCleanupRun(ctx, tx, p.ID)
			if err == nil && (run.Graph != p.Graph || run.Mode != p.Mode) {
				err = fmt.Errorf("%w: cleanup run %s exists as a %s run on graph %q", ErrDuplicate, p.ID, run.Mode, run.Graph)
			}
		}
		return run, err
	}))
}

// CleanupRunGetParams names a cleanup run.
type CleanupRunGetParams struct {
	ID string
}

// CleanupRunGet returns a cleanup run, or ErrNotFound.
func (c *Catalog) CleanupRunGet(ctx context.Context, p CleanupRunGetParams) (CleanupRun, error) {
	return wrapped[CleanupRun](c, fmt.Sprintf("get cleanup run %q", p.ID))(getCleanupRun(ctx, c.pool, p.ID))
}

// CleanupRunListParams selects a graph's cleanup runs; Limit caps them, newest first
// (default 100, at most 1000).
type CleanupRunListParams struct {
	Graph string
	Limit int
}

// CleanupRunList returns a graph's cleanup runs, newest first.
func (c *Catalog) CleanupRunList(ctx context.Context, p CleanupRunListParams) ([]CleanupRun, error) {
	what := fmt.Sprintf("list cleanup runs of graph %q", p.Graph)
	return queryPage(ctx, c, what, p.Limit, listPage, scanned(scanCleanupRun), `
		SELECT `+cleanupRunColumns+` FROM cleanup_runs WHERE graph = $1
		ORDER BY started_at DESC, id DESC LIMIT $2`, p.Graph)
}

// CleanupRunFinishParams ends a cleanup run.
type CleanupRunFinishParams struct {
	ID     string
	State  CleanupRunState // done, failed or aborted
	Report json.RawMessage // a JSON summary; defaults to none
}

// CleanupRunFinish moves a running run, after its last deletion, to its final state, from
// which its condemned set refuses no pin. A run already in State is returned unchanged; in
// another final state it is a *StateConflictError.
func (c *Catalog) CleanupRunFinish(ctx context.Context, p CleanupRunFinishParams) (CleanupRun, error) {
	what := fmt.Sprintf("finish cleanup run %q", p.ID)
	if !slices.Contains([]CleanupRunState{CleanupDone, CleanupFailed, CleanupAborted}, p.State) {
		return CleanupRun{}, c.wrap(what, invalid("a run finishes done, failed or aborted, not %q", p.State))
	}
	report, err := jsonArg(p.Report, "", "report is")
	if err != nil {
		return CleanupRun{}, c.wrap(what, err)
	}
	return wrapped[CleanupRun](c, what)(inTx(ctx, c, func(tx pgx.Tx) (CleanupRun, error) {
		graph, err := lockGraphOf(ctx, tx, "cleanup run", p.ID, exclusive)
		if err != nil {
			return CleanupRun{}, err
		}
		run, err := scanCleanupRun(tx.QueryRow(ctx, `
			UPDATE cleanup_runs SET state = $2, report = coalesce($3::jsonb, report), finished_at = now()
			WHERE id = $1 AND state = 'running'
			RETURNING `+cleanupRunColumns, p.ID, p.State, report))
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			run, err = getCleanupRun(ctx, tx, p.ID)
			if err == nil && run.State != p.State {
				err = &StateConflictError{Entity: "cleanup run", ID: p.ID, Expected: string(CleanupRunning), Current: string(run.State)}
			}
		case err == nil:
			err = prunePins(ctx, tx, graph)
		}
		return run, err
	}))
}

// CondemnedAddParams condemns keys in a running cleanup run.
type CondemnedAddParams struct {
	RunID   string
	Entries []Condemned
}

// CondemnedAddResult says what CondemnedAdd did.
type CondemnedAddResult struct {
	// Condemned counts the entries given now in the condemned set, condemned before or not.
	Condemned int
	// SkippedPinned lists, in the order given, the keys left alone because an operation
	// pins them or released them after the run started.
	SkippedPinned []string
}

// CondemnedAdd condemns keys for a running run under the graph lock, skipping every key
// that conflicts with a pin held now or released after the run started; the sweep deletes
// only condemned keys. A run not running is a *StateConflictError.
func (c *Catalog) CondemnedAdd(ctx context.Context, p CondemnedAddParams) (CondemnedAddResult, error) {
	what := fmt.Sprintf("condemn keys in cleanup run %q", p.RunID)
	entries := make([]Condemned, 0, len(p.Entries))
	seen := make(map[string]bool, len(p.Entries))
	for _, e := range p.Entries {
		if e.Key == "" || !slices.Contains(objectKinds, e.Kind) || e.Size < 0 {
			return CondemnedAddResult{}, c.wrap(what, invalid("entry %q of kind %q, size %d: need a key, a known kind and a size of at least 0",
				e.Key, e.Kind, e.Size))
		}
		if !seen[e.Key] {
			seen[e.Key] = true
			entries = append(entries, e)
		}
	}
	return wrapped[CondemnedAddResult](c, what)(inTx(ctx, c, func(tx pgx.Tx) (CondemnedAddResult, error) {
		graph, err := lockGraphOf(ctx, tx, "cleanup run", p.RunID, exclusive)
		if err != nil {
			return CondemnedAddResult{}, err
		}
		var state CleanupRunState
		var startSeq int64
		if err := tx.QueryRow(ctx, `SELECT state, start_seq FROM cleanup_runs WHERE id = $1`, p.RunID).Scan(&state, &startSeq); err != nil {
			return CondemnedAddResult{}, err
		}
		if state != CleanupRunning {
			return CondemnedAddResult{}, &StateConflictError{Entity: "cleanup run", ID: p.RunID, Expected: string(CleanupRunning), Current: string(state)}
		}
		pinned, err := pinnedAmong(ctx, tx, graph, startSeq, slices.Collect(maps.Keys(seen)))
		if err != nil {
			return CondemnedAddResult{}, err
		}
		var res CondemnedAddResult
		keys, kinds, sizes := make([]string, 0, len(entries)), make([]string, 0, len(entries)), make([]int64, 0, len(entries))
		for _, e := range entries {
			if slices.ContainsFunc(pinned, func(pk string) bool { return keysConflict(e.Key, pk) }) {
				res.SkippedPinned = append(res.SkippedPinned, e.Key)
				continue
			}
			keys, kinds, sizes = append(keys, e.Key), append(kinds, string(e.Kind)), append(sizes, e.Size)
		}
		if len(keys) > 0 {
			if _, err := tx.Exec(ctx, `
				INSERT INTO cleanup_condemned (run_id, graph, key, kind, size)
				SELECT $1, $2, t.key, t.kind, t.size FROM unnest($3::text[], $4::text[], $5::bigint[]) AS t(key, kind, size)
				ON CONFLICT (run_id, key) DO NOTHING`, p.RunID, graph, keys, kinds, sizes); err != nil {
				return CondemnedAddResult{}, err
			}
		}
		res.Condemned = len(keys)
		return res, nil
	}))
}

// pinnedAmong returns the pin keys of graph, held or released after startSeq, that
// conflict with keys.
func pinnedAmong(ctx context.Context, tx pgx.Tx, graph string, startSeq int64, keys []string) ([]string, error) {
	exact, prefixes := conflictProbes(keys)
	if len(exact) == 0 {
		return nil, nil
	}
	rows, _ := tx.Query(ctx, `
		SELECT key FROM op_pins
		WHERE graph = $1 AND (released_seq IS NULL OR released_seq > $2) AND key = ANY($3::text[])
		UNION
		SELECT o.key FROM unnest($4::text[]) AS p(prefix)
		JOIN op_pins o ON o.graph = $1 AND o.key >= p.prefix AND o.key < left(p.prefix, -1) || '0'
		WHERE o.released_seq IS NULL OR o.released_seq > $2`,
		graph, startSeq, exact, prefixes)
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// CondemnedListParams pages through a run's condemned set: entries in State ("": every
// state) whose keys sort bytewise After the previous page's last, at most Limit (default
// 1000, at most 10000).
type CondemnedListParams struct {
	RunID string
	State CondemnedState
	After string
	Limit int
}

// CondemnedList returns a run's condemned entries in bytewise key order.
func (c *Catalog) CondemnedList(ctx context.Context, p CondemnedListParams) ([]CondemnedEntry, error) {
	what := fmt.Sprintf("list condemned keys of cleanup run %q", p.RunID)
	return queryPage(ctx, c, what, p.Limit, condemnedPage, func(row pgx.CollectableRow) (CondemnedEntry, error) {
		var e CondemnedEntry
		var deleted *time.Time
		err := row.Scan(&e.RunID, &e.Graph, &e.Key, &e.Kind, &e.Size, &e.State, &e.CondemnedAt, &deleted)
		e.DeletedAt = timeOrZero(deleted)
		return e, err
	}, `
		SELECT run_id, graph, key, kind, size, state, condemned_at, deleted_at FROM cleanup_condemned
		WHERE run_id = $1 AND ($2 = '' OR state = $2) AND key > $3
		ORDER BY key LIMIT $4`, p.RunID, p.State, p.After)
}

// CondemnedMarkDeletedParams records keys the sweep has deleted.
type CondemnedMarkDeletedParams struct {
	RunID string
	Keys  []string
}

// CondemnedMarkDeleted marks keys of a run's condemned set deleted and returns how many
// changed; keys not condemned in the run, or already marked, are left alone.
func (c *Catalog) CondemnedMarkDeleted(ctx context.Context, p CondemnedMarkDeletedParams) (int64, error) {
	tag, err := c.pool.Exec(ctx, `
		UPDATE cleanup_condemned SET state = 'deleted', deleted_at = now()
		WHERE run_id = $1 AND key = ANY($2::text[]) AND state = 'condemned'`, p.RunID, p.Keys)
	if err != nil {
		return 0, c.wrap(fmt.Sprintf("mark keys deleted in cleanup run %q", p.RunID), err)
	}
	return tag.RowsAffected(), nil
}

// CleanupOperationAbandonParams names a cleanup operation whose workflow closed; Message
// says why, for the error column.
type CleanupOperationAbandonParams struct {
	OpID    string
	Message string
}

// CleanupOperationAbandon finishes as failed a cleanup operation, whose workflow the caller
// found closed, if its run was never inserted (so nothing was read or deleted), and
// reports whether it did; one done, or whose run exists, is left alone. The run insert
// takes the same row lock first and refuses an ended operation.
func (c *Catalog) CleanupOperationAbandon(ctx context.Context, p CleanupOperationAbandonParams) (bool, error) {
	what := fmt.Sprintf("abandon cleanup operation %q", p.OpID)
	return inTx(ctx, c, func(tx pgx.Tx) (bool, error) {
		op, err := lockOperation(ctx, tx, p.OpID)
		if err != nil {
			return false, c.wrap(what, err)
		}
		if op.Kind != OpCleanup {
			return false, c.wrap(what, invalid("operation %q is a %s, not a cleanup", p.OpID, op.Kind))
		}
		if op.State == OperationDone {
			return false, nil
		}
		var began bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM cleanup_runs WHERE id = $1)`, p.OpID).Scan(&began); err != nil {
			return false, c.wrap(what, err)
		}
		if began {
			return false, nil
		}
		if _, err := c.OperationFinishTx(ctx, tx, OperationFinishParams{ID: p.OpID, Outcome: OutcomeFailed, Error: p.Message}); err != nil {
			return false, err
		}
		return true, nil
	})
}
