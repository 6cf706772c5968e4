package workflows

import (
	"fmt"
	"strings"

	"go.temporal.io/sdk/workflow"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/searchattr"
)

// RepairBranchName is the registered name of RepairBranch. Stable.
const RepairBranchName = "graft.RepairBranch"

// RepairBranch's step options.
var (
	// Reading the refs and recording the repair: nothing is written yet.
	repairPrepareOptions = beforeEffect
	// Retiring one ref: a compare-and-swap whose unknown outcome is settled
	// by reading back on each retry, so it retries until the store answers.
	retireOptions = afterEffect
)

// RepairBranchInput is the input of graft.RepairBranch.
type RepairBranchInput struct {
	Graph  string `json:"graph"`
	Branch string `json:"branch"`
	// Keep is the native name ({branch}.{ULID}) of the live incarnation to keep.
	Keep string `json:"keep"`
	// OpID identifies the operation in the ledger. Defaults to the workflow id.
	OpID string `json:"op_id,omitempty"`
}

// RepairBranchResult is the result of graft.RepairBranch. Outcome done means
// Keep is the branch's only live incarnation.
type RepairBranchResult struct {
	Outcome outcome.Outcome `json:"outcome"`
	OpID    string          `json:"op_id"`
	Graph   string          `json:"graph"`
	Branch  string          `json:"branch"`
	Kept    string          `json:"kept,omitempty"`
	// Retired lists the natives whose refs this operation retired.
	Retired []string `json:"retired"`
	Message string   `json:"message,omitempty"`
}

// RepairBranch makes a logical branch that has several live incarnations
// (written by an older tool, say) live through exactly one again: it reads
// that name's refs directly, then retires every live ref but Keep's by
// compare-and-swap, one step per ref. A retired ref stays at its key as a
// fence, so a late put of it can never land.
func RepairBranch(ctx workflow.Context, in RepairBranchInput) (RepairBranchResult, error) {
	var a *activities.Activities
	info := workflow.GetInfo(ctx)
	opID := in.OpID
	if opID == "" {
		opID = info.WorkflowExecution.ID
	}
	_ = workflow.UpsertTypedSearchAttributes(ctx,
		searchattr.Graph.ValueSet(in.Graph), searchattr.Branch.ValueSet(in.Branch), searchattr.Operation.ValueSet("repair_branch"))
	res := RepairBranchResult{OpID: opID, Graph: in.Graph, Branch: in.Branch, Retired: []string{}}

	setDetails(ctx, "prepare", in.Branch, "reading the refs of "+in.Branch)
	var prep activities.PrepareRepairResult
	err := workflow.ExecuteLocalActivity(localStep(ctx, repairPrepareOptions, "prepare: read the refs of "+in.Branch),
		a.PrepareRepair, activities.PrepareRepairInput{
			OpID: opID, Graph: in.Graph, Branch: in.Branch, Keep: in.Keep,
			WorkflowID: info.WorkflowExecution.ID, RunID: info.WorkflowExecution.RunID,
		}).Get(ctx, &prep)
	if err != nil {
		return finishRepair(ctx, in, &res, "", fmt.Errorf("prepare: %w", err).Error(), true), fmt.Errorf("prepare: %w", err)
	}
	if prep.Outcome != "" {
		return finishRepair(ctx, in, &res, prep.Outcome, prep.Message, prep.Recorded), nil
	}
	res.Kept = in.Keep
	res.Retired = append(res.Retired, prep.AlreadyRetired...)

	var changed []string
	for i, t := range prep.Retire {
		setDetails(ctx, "retire", in.Branch, fmt.Sprintf("retiring %s (%d of %d), keeping %s", t.Native, i+1, len(prep.Retire), in.Keep))
		var r activities.RetireIncarnationResult
		if err := workflow.ExecuteLocalActivity(localStep(ctx, retireOptions, "retire: compare-and-swap "+t.Native),
			a.RetireIncarnation, activities.RetireIncarnationInput{OpID: opID, Graph: in.Graph, Native: t.Native, ETag: t.ETag}).Get(ctx, &r); err != nil {
			msg := fmt.Sprintf("retire %s: %v", t.Native, err)
			return finishRepair(ctx, in, &res, "", msg, true), fmt.Errorf("retire %s: %w", t.Native, err)
		}
		switch r.State {
		case activities.RetireDone:
			res.Retired = append(res.Retired, t.Native)
		case activities.RetireChanged:
			changed = append(changed, t.Native+" ("+r.Message+")")
		}
	}
	if len(changed) > 0 {
		return finishRepair(ctx, in, &res, outcome.Conflict,
			"refs changed while repairing, run the repair again: "+strings.Join(changed, "; "), true), nil
	}
	return finishRepair(ctx, in, &res, outcome.Done, "", true), nil
}

// finishRepair records the repair's outcome: the kept incarnation's witness
// and the operation in the ledger, the outcome in visibility.
func finishRepair(ctx workflow.Context, in RepairBranchInput, res *RepairBranchResult, out outcome.Outcome, message string, recorded bool) RepairBranchResult {
	var a *activities.Activities
	res.Outcome, res.Message = out, message
	setDetails(ctx, "done", string(out), message)
	if recorded {
		var fin activities.FinishRepairResult
		_ = workflow.ExecuteLocalActivity(localStep(ctx, finishStepOptions, "finish: record outcome "+string(out)),
			a.FinishRepair, activities.FinishRepairInput{
				OpID: res.OpID, Graph: in.Graph, Branch: in.Branch, Keep: in.Keep, Outcome: out, Message: message,
			}).Get(ctx, &fin)
		if fin.Note != "" && res.Message == "" {
			res.Message = fin.Note
		}
	}
	if out != "" {
		_ = workflow.UpsertTypedSearchAttributes(ctx, searchattr.Outcome.ValueSet(string(out)))
	}
	return *res
}
