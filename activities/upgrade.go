package activities

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/storage"
)

// UpgradeGraphInput is the input of UpgradeGraph.
type UpgradeGraphInput struct {
	OpID, Graph string
	// WorkflowID and RunID are the workflow's; RunID claims the ledger row.
	WorkflowID, RunID string
}

// UpgradeGraphResult is what UpgradeGraph proved. Outcome is done (the graph record and
// every live ref are format 2), not_found (no such graph), conflict (a format-1
// operation is in flight on the graph, or the operation id is another request's),
// invalid or refused.
type UpgradeGraphResult struct {
	Outcome outcome.Outcome
	Message string
	// Owned reports that the ledger row is this run's: the kernel finishes it.
	Owned bool
	// GraphRecord is true when this operation wrote the format-2 graph record; false
	// when the graph was format 2 already (created so, or upgraded by another operation).
	GraphRecord bool
	// Refs are the natives of the live refs this operation made format 2 (in this run or
	// an earlier one), sorted; CaughtUp counts refs moved on to a format-1 commit that
	// landed while the upgrade ran.
	Refs     []string
	CaughtUp int
}

// UpgradeGraph rewrites a format-1 graph's control objects as format 2 (graph.Upgrade;
// docs/format.md, *Upgrading a format-1 graph*): the graph record, then every live ref.
// It records the operation first and checks the precondition in the ledger: no other
// operation but cleanup is unfinished on the graph while its record is still format 1.
// Every byte it writes is a function of what it reads and the operation id, so a re-run
// under the same id — a retried step, a new worker after one died, a second request —
// finishes the same upgrade and reports the same result.
func (a *Activities) UpgradeGraph(ctx context.Context, in UpgradeGraphInput) (UpgradeGraphResult, error) {
	end := func(o outcome.Outcome, f string, args ...any) (UpgradeGraphResult, error) {
		return UpgradeGraphResult{Outcome: o, Message: fmt.Sprintf(f, args...)}, nil
	}
	if err := format.ValidateGraphName(in.Graph); err != nil {
		return end(outcome.Invalid, "%v", err)
	}
	if err := format.ValidateOp(in.OpID); err != nil {
		return end(outcome.Invalid, "%v", err)
	}
	// Checked before the operation is recorded, so an upgrade that could not start
	// (no graph yet, an operation in flight) leaves no row: the same request, run
	// again later under the same id, upgrades.
	rec, version, err := graph.ReadGraphAny(ctx, a.Store, in.Graph)
	switch {
	case errors.Is(err, graph.ErrGraphNotFound):
		return end(outcome.NotFound, "graph %q does not exist", in.Graph)
	case isUnreadableObject(err):
		return end(outcome.Conflict, "graph %q: its graph record is unreadable: %v", in.Graph, err)
	case err != nil:
		return UpgradeGraphResult{}, fmt.Errorf("read graph: %w", err)
	}
	if version == format.Version {
		// Before the record changes: no format-1 operation may be in flight, or its put at
		// seq+1 could land in a gap cleanup left (the hole format 2 closes).
		busy, err := a.inFlightOn(ctx, in.Graph, in.OpID)
		if err != nil {
			return UpgradeGraphResult{}, err
		}
		if busy != "" {
			return end(outcome.Conflict, "%s", busy)
		}
	}
	c, err := a.claim(ctx, nil, catalog.OperationInsertParams{
		ID: in.OpID, Kind: catalog.OpUpgradeGraph, Graph: in.Graph,
		WorkflowID: in.WorkflowID, RunID: in.RunID, Owner: in.RunID,
	})
	if err != nil {
		return UpgradeGraphResult{}, err
	}
	if c.outcome != "" && c.op.ID == "" {
		return UpgradeGraphResult{Outcome: c.outcome, Message: c.message}, nil
	}
	res := UpgradeGraphResult{Owned: c.owned}
	up, err := graph.Upgrade(ctx, a.Store, graph.UpgradeParams{Graph: in.Graph, Op: in.OpID})
	switch {
	case errors.Is(err, graph.ErrInvalid):
		res.Outcome, res.Message = outcome.Invalid, err.Error()
		return res, nil
	case errors.Is(err, storage.ErrRefused):
		// A refused write may follow writes that landed; a re-run finishes them.
		res.Outcome, res.Message = outcome.Refused, err.Error()
		return res, nil
	case err != nil:
		return UpgradeGraphResult{}, fmt.Errorf("upgrade graph %q: %w", in.Graph, err)
	}
	res.GraphRecord = up.GraphRecord || (version == format.Version2 && rec.UpgradeOp == in.OpID)
	res.Refs = slices.Sorted(slices.Values(up.Refs))
	res.CaughtUp = up.CaughtUp
	res.Outcome = outcome.Done
	switch {
	case res.GraphRecord:
		res.Message = fmt.Sprintf("graph %q is format 2: graph record and %d live refs upgraded", in.Graph, len(res.Refs))
	default:
		res.Message = fmt.Sprintf("graph %q was format 2 already (record written by operation %s)", in.Graph, orDash(rec.UpgradeOp, rec.Op))
	}
	return res, nil
}

// inFlightOn names the unfinished operations on graph other than op and cleanups, or "".
func (a *Activities) inFlightOn(ctx context.Context, graphName, op string) (string, error) {
	ops, err := a.Catalog.OperationListUnfinished(ctx, catalog.OperationListUnfinishedParams{Graph: graphName, Limit: 1000})
	if err != nil {
		return "", fmt.Errorf("list unfinished operations: %w", err)
	}
	var busy []string
	for _, o := range ops {
		if o.ID == op || o.Kind == catalog.OpCleanup || o.Kind == catalog.OpUpgradeGraph {
			continue
		}
		busy = append(busy, fmt.Sprintf("%s (%s, %s)", o.ID, o.Kind, o.State))
	}
	if len(busy) == 0 {
		return "", nil
	}
	return fmt.Sprintf("graph %q has %d format-1 operations in flight: %s; wait for them (graft op wait ID) or settle them, then run the upgrade again",
		graphName, len(busy), strings.Join(busy, ", ")), nil
}

func orDash(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return "-"
}
