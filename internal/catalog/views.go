package catalog

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Read-only views an operator (and a metrics scrape) asks of the ledger.
// They read every column an operation row has — including columns later
// migrations add — without depending on them: what a view does not know it
// returns as Extra.

// knownOperationColumns are the operations columns Operation holds; anything
// else a row carries (a column a later migration adds) is returned in Extra.
var knownOperationColumns = []string{
	"id", "kind", "graph", "inputs", "state", "outcome", "error", "workflow_id", "run_id",
	"created_at", "updated_at", "finished_at",
	"fingerprint", "owner_run", "phase", "waiting", "pending", "settle_attempts",
}

// extraRow scans the view's own columns after an operation's.
type extraRow struct {
	pgx.Row
	extra []any
}

func (r extraRow) Scan(dest ...any) error { return r.Row.Scan(append(dest, r.extra...)...) }

// OperationView is an operation with what the ledger knows about what it is
// doing: its newest witness, and any column the view does not know.
type OperationView struct {
	Operation
	// Native and WitnessState are the operation's newest incarnation, when
	// it has one (a branch create).
	Native       string
	WitnessState IncarnationState
	// Extra holds the row's columns beyond the first migration's, by name,
	// as JSON values.
	Extra map[string]json.RawMessage
}

// operationViewQuery selects operationColumns, then extra, native and
// witness state, from operations filtered by where.
func operationViewQuery(where string) string {
	return `
		SELECT ` + operationColumns + `, extra, native, witness_state FROM (
			SELECT o.*, to_jsonb(o) - $1::text[] AS extra,
			       coalesce(w.native, '') AS native, coalesce(w.state, '') AS witness_state
			FROM operations o
			LEFT JOIN LATERAL (
				SELECT native, state FROM incarnations WHERE op_id = o.id ORDER BY created_at DESC LIMIT 1
			) w ON true
		) AS operations
		WHERE ` + where
}

func scanOperationView(row pgx.Row) (OperationView, error) {
	var (
		v     OperationView
		extra []byte
	)
	op, err := scanOperation(extraRow{Row: row, extra: []any{&extra, &v.Native, &v.WitnessState}})
	if err != nil {
		return OperationView{}, err
	}
	v.Operation = op
	if len(extra) > 0 {
		if err := json.Unmarshal(extra, &v.Extra); err != nil {
			return OperationView{}, fmt.Errorf("decode extra columns: %w", err)
		}
		if len(v.Extra) == 0 {
			v.Extra = nil
		}
	}
	return v, nil
}

// OperationViewGet returns one operation with its witness and extra columns,
// or ErrNotFound.
func (c *Catalog) OperationViewGet(ctx context.Context, id string) (OperationView, error) {
	return queryOne(ctx, c, c.pool, fmt.Sprintf("get operation %q", id), scanOperationView, operationViewQuery("id = $2"), knownOperationColumns, id)
}

// OperationStuckParams selects the operations that are not moving on by
// themselves, or not quickly.
type OperationStuckParams struct {
	// Graph keeps one graph's operations. Defaults to "": every graph.
	Graph string
	// RunningFor is how long a running operation may run before it counts.
	// Defaults to 10 minutes.
	RunningFor time.Duration
	// Limit caps the rows returned, oldest first. Defaults to 100; at most 1000.
	Limit int
}

// DefaultStuckAfter is OperationStuckParams.RunningFor's default.
const DefaultStuckAfter = 10 * time.Minute

// OperationStuckList returns, oldest first, every unfinished operation that
// is in doubt, in any state other than running and done (a state a later
// migration adds, such as a parked settle), or running for longer than
// p.RunningFor.
func (c *Catalog) OperationStuckList(ctx context.Context, p OperationStuckParams) ([]OperationView, error) {
	what := "list stuck operations"
	limit, err := listLimit(p.Limit, defaultListLimit, maxListLimit)
	if err != nil {
		return nil, c.wrap(what, err)
	}
	after := p.RunningFor
	if after <= 0 {
		after = DefaultStuckAfter
	}
	return queryAll(ctx, c, c.pool, what, scanned(scanOperationView), operationViewQuery(`
			state <> 'done' AND ($2 = '' OR graph = $2)
			AND (state <> 'running' OR created_at < now() - make_interval(secs => $3))
		ORDER BY created_at, id LIMIT $4`), knownOperationColumns, p.Graph, after.Seconds(), limit)
}

// UnfinishedTally counts a kind's unfinished operations in one state.
type UnfinishedTally struct {
	Kind  OperationKind
	State OperationState
	Count int64
	// OldestUpdate is the oldest last state change among them: for in_doubt,
	// when the longest doubt began.
	OldestUpdate time.Time
}

// OperationUnfinishedTally counts the unfinished operations by kind and
// state, in one indexed scan: what a metrics scrape reports, the same from
// every worker and right after a restart.
func (c *Catalog) OperationUnfinishedTally(ctx context.Context) ([]UnfinishedTally, error) {
	what := "count unfinished operations"
	return queryAll(ctx, c, c.pool, what, func(row pgx.CollectableRow) (UnfinishedTally, error) {
		var t UnfinishedTally
		err := row.Scan(&t.Kind, &t.State, &t.Count, &t.OldestUpdate)
		return t, err
	}, `
		SELECT kind, state, count(*), min(updated_at) FROM operations
		WHERE state <> 'done' GROUP BY kind, state ORDER BY kind, state`)
}

// WitnessTally counts the incarnations in one unsettled state.
type WitnessTally struct {
	State IncarnationState
	Count int64
}

// IncarnationUnsettledTally counts the incarnations in intent, cloned and
// in_doubt.
func (c *Catalog) IncarnationUnsettledTally(ctx context.Context) ([]WitnessTally, error) {
	what := "count unsettled incarnations"
	return queryAll(ctx, c, c.pool, what, func(row pgx.CollectableRow) (WitnessTally, error) {
		var t WitnessTally
		err := row.Scan(&t.State, &t.Count)
		return t, err
	}, `
		SELECT state, count(*) FROM incarnations
		WHERE state IN ('intent', 'cloned', 'in_doubt') GROUP BY state ORDER BY state`)
}

// DeletedTally counts the keys cleanup runs deleted, of one kind.
type DeletedTally struct {
	Kind  ObjectKind
	Count int64
	Bytes int64
}

// CondemnedDeletedTally counts the keys every cleanup run recorded deleted,
// by kind.
func (c *Catalog) CondemnedDeletedTally(ctx context.Context) ([]DeletedTally, error) {
	what := "count deleted keys"
	return queryAll(ctx, c, c.pool, what, func(row pgx.CollectableRow) (DeletedTally, error) {
		var t DeletedTally
		err := row.Scan(&t.Kind, &t.Count, &t.Bytes)
		return t, err
	}, `
		SELECT kind, count(*), coalesce(sum(size), 0)::bigint FROM cleanup_condemned
		WHERE state = 'deleted' GROUP BY kind ORDER BY kind`)
}
