package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/workflows/contract"
)

// Registered name of the reconciler, and the id of the schedule that runs it. Stable.
const (
	ReconcileName = "graft.Reconcile"
	// ReconcileScheduleID is the schedule the worker's set-up creates by default
	// (worker.EnsureSchedules).
	ReconcileScheduleID = "graft-reconcile"
	// ReconcileWorkflowID is the workflow id of an on-demand pass (`graft op
	// reconcile`); scheduled passes get the schedule's ids.
	ReconcileWorkflowID = "graft/reconcile"
)

// DefaultReconcileInterval is how often the scheduled reconciler runs.
const DefaultReconcileInterval = 5 * time.Minute

// ReconcileInput is the input of graft.Reconcile. Every field is optional.
type ReconcileInput struct {
	// Graph restricts the pass to one graph. Defaults to "" (every graph).
	Graph string `json:"graph,omitempty"`
	// OpID restricts the pass to one operation. Defaults to "" (every one).
	OpID string `json:"op_id,omitempty"`
	// Limit bounds the unfinished operations examined. Defaults to 100.
	Limit int `json:"limit,omitempty"`
}

// ReconciledOp and ReconcileResult are declared in package contract (the pass fills them).
type (
	ReconciledOp    = contract.ReconciledOp
	ReconcileResult = contract.ReconcileResult
)

// Reconcile settles operations whose workflow closed without recording their end —
// terminated, timed out, reset away or lost — as their own workflow would have
// (activities.Reconcile): fence then reclaim for a create, read back (by fencing) and
// finish for a commit, tag or retire; pins released only once the end is definitive. An
// operation whose fence the store refuses stays parked, in doubt, for the next pass.
func Reconcile(ctx workflow.Context, in ReconcileInput) (ReconcileResult, error) {
	info := workflow.GetInfo(ctx)
	setDetails(ctx, "reconcile", in.Graph, "looking for operations whose workflow closed")
	// The pass is an ordinary activity with no total deadline (it may fence writes, which
	// follows storage effects), retried until it answers. Its worker heartbeats it: a
	// worker that dies mid-pass is noticed after StepHeartbeatTimeout, not the pass's.
	o := workflow.ActivityOptions{Summary: "reconcile: settle operations whose workflow closed",
		StartToCloseTimeout: 10 * time.Minute, HeartbeatTimeout: StepHeartbeatTimeout, RetryPolicy: untilAnswered}
	var res ReconcileResult
	err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, o), acts.Reconcile, activities.ReconcileInput{
		Run: info.WorkflowExecution.RunID, Graph: in.Graph, OpID: in.OpID, Limit: in.Limit}).Get(ctx, &res)
	if res.Settled == nil {
		res.Settled = []ReconciledOp{}
	}
	if err != nil {
		return res, err
	}
	setDetails(ctx, "done", in.Graph, fmt.Sprintf("%d examined, %d settled or parked, %d still running", res.Examined, len(res.Settled), res.Open))
	return res, nil
}
