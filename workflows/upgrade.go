package workflows

import (
	"fmt"

	"go.temporal.io/sdk/workflow"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
)

// UpgradeGraphName is the registered name of UpgradeGraph. Stable.
const UpgradeGraphName = "graft.UpgradeGraph"

// UpgradeGraphInput is the input of graft.UpgradeGraph.
type UpgradeGraphInput struct {
	Graph string `json:"graph"`
	// OpID identifies the operation in the ledger. Defaults to the workflow id
	// (graft/upgrade/{graph} when started by the client).
	OpID string `json:"op_id,omitempty"`
}

// UpgradeGraphResult is the result of graft.UpgradeGraph. Outcome done means the
// graph record and every live ref are format 2; GraphRecord says whether this
// operation upgraded the record (false: the graph was format 2 already).
type UpgradeGraphResult struct {
	Outcome outcome.Outcome `json:"outcome"`
	OpID    string          `json:"op_id"`
	Graph   string          `json:"graph"`
	// GraphRecord: this operation wrote the format-2 graph record.
	GraphRecord bool `json:"graph_record"`
	// Refs are the natives of the live refs this operation made format 2, sorted.
	Refs []string `json:"refs,omitempty"`
	// CaughtUp counts refs moved on to a format-1 commit that landed during the upgrade.
	CaughtUp int    `json:"caught_up,omitempty"`
	Message  string `json:"message,omitempty"`
}

func (r *UpgradeGraphResult) setEnd(out outcome.Outcome, msg string) { r.Outcome, r.Message = out, msg }

// UpgradeGraph rewrites a format-1 graph's control objects as format 2 without touching
// data (docs/format.md, *Upgrading a format-1 graph*). Its one step is idempotent —
// every byte it writes is a function of what it reads and the operation id — so the
// kernel runs it until the store and the ledger answer, a worker that dies mid-way is
// replaced by one that finishes it, a cancellation runs it to its end rather than leave
// a half-upgraded graph, and running the operation again gives the same result.
func UpgradeGraph(ctx workflow.Context, in UpgradeGraphInput) (UpgradeGraphResult, error) {
	var a *activities.Activities
	info := workflow.GetInfo(ctx)
	r := newOpRun(ctx, runSpec{opID: in.OpID, kind: catalog.OpUpgradeGraph, graph: in.Graph, subject: "upgrade " + in.Graph})
	if err := workflow.SetQueryHandler(ctx, StatusQueryName, func() (OperationStatus, error) { return r.operationStatus(), nil }); err != nil {
		return UpgradeGraphResult{}, err
	}
	res := UpgradeGraphResult{OpID: r.owner.OpID, Graph: in.Graph}
	once := func(ctx workflow.Context) (ending, error) {
		r.setPhase(ctx, "upgrade", "rewriting the graph record and every live ref as format 2")
		var up activities.UpgradeGraphResult
		if err := r.step(ctx, "upgrade: graph record, then every live ref", a.UpgradeGraph, activities.UpgradeGraphInput{
			OpID: r.owner.OpID, Graph: in.Graph,
			WorkflowID: info.WorkflowExecution.ID, RunID: info.WorkflowExecution.RunID,
		}, &up); err != nil {
			return ending{}, fmt.Errorf("upgrade graph: %w", err)
		}
		r.foreign = !up.Owned
		res.GraphRecord, res.Refs, res.CaughtUp = up.GraphRecord, up.Refs, up.CaughtUp
		return end(up.Outcome, up.Message)
	}
	err := r.run(ctx, &res, func(ctx workflow.Context) (ending, error) {
		r.drive = once
		e, err := once(ctx)
		if err == nil {
			r.drive = nil
		}
		return e, err
	})
	return res, err
}
