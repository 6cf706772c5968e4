package catalog

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// CondemnedTally counts a run's condemned entries of one kind in one state, and their bytes.
type CondemnedTally struct {
	Kind         ObjectKind
	State        CondemnedState
	Count, Bytes int64
}

// CondemnedSummaryParams names the run to summarise.
type CondemnedSummaryParams struct {
	RunID string
}

// CondemnedSummary counts a run's condemned set by kind and state: exact whatever befell
// the sweep's workers, since a key counts as deleted once CondemnedMarkDeleted recorded it.
func (c *Catalog) CondemnedSummary(ctx context.Context, p CondemnedSummaryParams) ([]CondemnedTally, error) {
	what := fmt.Sprintf("summarise condemned keys of cleanup run %q", p.RunID)
	return queryAll(ctx, c, c.pool, what, pgx.RowToStructByPos[CondemnedTally], `
		SELECT kind, state, count(*), coalesce(sum(size), 0)::bigint FROM cleanup_condemned
		WHERE run_id = $1 GROUP BY kind, state ORDER BY kind, state`, p.RunID)
}

// CondemnedAmongParams asks which of at most 10000 keys, compared exactly, a run condemned.
type CondemnedAmongParams struct {
	RunID string
	Keys  []string
}

// CondemnedAmong returns, in bytewise order, the keys of p.Keys in the run's condemned set
// in any state: how a later run keeps to an earlier run's reviewed plan.
func (c *Catalog) CondemnedAmong(ctx context.Context, p CondemnedAmongParams) ([]string, error) {
	what := fmt.Sprintf("look up keys condemned by cleanup run %q", p.RunID)
	if len(p.Keys) > 10000 {
		return nil, c.wrap(what, invalid("at most 10000 keys per call, got %d", len(p.Keys)))
	}
	if len(p.Keys) == 0 {
		return nil, nil
	}
	return queryAll(ctx, c, c.pool, what, pgx.RowTo[string], `
		SELECT key FROM cleanup_condemned WHERE run_id = $1 AND key = ANY($2::text[]) ORDER BY key`,
		p.RunID, p.Keys)
}

// CleanupRunActiveParams names a graph.
type CleanupRunActiveParams struct {
	Graph string
}

// CleanupRunActive returns the graph's running mark or sweep run (at most one), or
// ErrNotFound.
func (c *Catalog) CleanupRunActive(ctx context.Context, p CleanupRunActiveParams) (CleanupRun, error) {
	run, err := scanCleanupRun(c.pool.QueryRow(ctx, `
		SELECT `+cleanupRunColumns+` FROM cleanup_runs
		WHERE graph = $1 AND state = 'running' AND mode <> 'dry_run'`, p.Graph))
	if errors.Is(err, pgx.ErrNoRows) {
		err = fmt.Errorf("%w: no cleanup run is running on graph %q", ErrNotFound, p.Graph)
	}
	return wrapped[CleanupRun](c, fmt.Sprintf("get active cleanup run of graph %q", p.Graph))(run, err)
}
