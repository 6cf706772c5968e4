package catalog

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Read-only views an operator (and a metrics scrape) asks of the ledger.

// knownOperationColumns are the operations columns Operation holds; any other a row
// carries (a later migration's) a view returns in Extra.
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

// OperationView is an operation with its newest incarnation, if any (Native,
// WitnessState), and its columns the view does not know, by name, as JSON (Extra).
type OperationView struct {
	Operation
	Native       string
	WitnessState IncarnationState
	Extra        map[string]json.RawMessage
}

// operationViewQuery selects operationColumns, extra, native and witness state, where where.
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
	var v OperationView
	var extra []byte
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

// OperationViewGet returns one operation's view, or ErrNotFound.
func (c *Catalog) OperationViewGet(ctx context.Context, id string) (OperationView, error) {
	return queryOne(ctx, c, c.pool, fmt.Sprintf("get operation %q", id), scanOperationView, operationViewQuery("id = $2"), knownOperationColumns, id)
}

// OperationStuckParams selects the operations of Graph ("": every one) not moving on by
// themselves, or not quickly: running for longer than RunningFor (default
// DefaultStuckAfter). Limit caps them, oldest first (default 100, at most 1000).
type OperationStuckParams struct {
	Graph      string
	RunningFor time.Duration
	Limit      int
}

// DefaultStuckAfter is OperationStuckParams.RunningFor's default.
const DefaultStuckAfter = 10 * time.Minute

// OperationStuckList returns, oldest first, every unfinished operation not running
// (in doubt, or a later migration's state) or running for longer than p.RunningFor.
func (c *Catalog) OperationStuckList(ctx context.Context, p OperationStuckParams) ([]OperationView, error) {
	after := cmp.Or(max(p.RunningFor, 0), DefaultStuckAfter)
	return queryPage(ctx, c, "list stuck operations", p.Limit, listPage, scanned(scanOperationView), operationViewQuery(`
			state <> 'done' AND ($2 = '' OR graph = $2)
			AND (state <> 'running' OR created_at < now() - make_interval(secs => $3))
		ORDER BY created_at, id LIMIT $4`), knownOperationColumns, p.Graph, after.Seconds())
}

// UnfinishedTally counts a kind's unfinished operations in one state, with the oldest
// last state change among them (for in_doubt, when the longest doubt began).
type UnfinishedTally struct {
	Kind         OperationKind
	State        OperationState
	Count        int64
	OldestUpdate time.Time
}

// OperationUnfinishedTally counts the unfinished operations by kind and state, in one
// indexed scan: a metrics scrape's figures, the same from every worker.
func (c *Catalog) OperationUnfinishedTally(ctx context.Context) ([]UnfinishedTally, error) {
	return queryAll(ctx, c, c.pool, "count unfinished operations", pgx.RowToStructByPos[UnfinishedTally], `
		SELECT kind, state, count(*), min(updated_at) FROM operations
		WHERE state <> 'done' GROUP BY kind, state ORDER BY kind, state`)
}

// WitnessTally counts the incarnations in one unsettled state.
type WitnessTally struct {
	State IncarnationState
	Count int64
}

// IncarnationUnsettledTally counts the incarnations in intent, cloned and in_doubt.
func (c *Catalog) IncarnationUnsettledTally(ctx context.Context) ([]WitnessTally, error) {
	return queryAll(ctx, c, c.pool, "count unsettled incarnations", pgx.RowToStructByPos[WitnessTally], `
		SELECT state, count(*) FROM incarnations
		WHERE state IN ('intent', 'cloned', 'in_doubt') GROUP BY state ORDER BY state`)
}

// DeletedTally counts the keys cleanup runs deleted, of one kind.
type DeletedTally struct {
	Kind  ObjectKind
	Count int64
	Bytes int64
}

// CondemnedDeletedTally counts the keys every cleanup run recorded deleted, by kind.
func (c *Catalog) CondemnedDeletedTally(ctx context.Context) ([]DeletedTally, error) {
	return queryAll(ctx, c, c.pool, "count deleted keys", pgx.RowToStructByPos[DeletedTally], `
		SELECT kind, count(*), coalesce(sum(size), 0)::bigint FROM cleanup_condemned
		WHERE state = 'deleted' GROUP BY kind ORDER BY kind`)
}
