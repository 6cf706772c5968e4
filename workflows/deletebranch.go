package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
)

// DeleteBranchName is the registered name of DeleteBranch. Stable.
const DeleteBranchName = "graft.DeleteBranch"

// DeleteBranchInput is the input of graft.DeleteBranch.
type DeleteBranchInput struct {
	Graph  string `json:"graph"`
	Branch string `json:"branch"`
	// Force deletes a branch although live tags name commits of it; the
	// tags keep those commits. main is never deleted. Defaults to false.
	Force bool `json:"force,omitempty"`
	// OpID identifies the operation in the ledger. Defaults to the workflow id.
	OpID string `json:"op_id,omitempty"`
}

// DeleteBranchResult is the result of graft.DeleteBranch. Outcome deleted
// means Native's ref is retired: a fence no late put can pass, and the
// name free for a new create. Its commits stay until cleanup reclaims
// them (those a tag names stay for good).
type DeleteBranchResult struct {
	Outcome outcome.Outcome `json:"outcome"`
	OpID    string          `json:"op_id"`
	Graph   string          `json:"graph"`
	Branch  string          `json:"branch"`
	Native  string          `json:"native,omitempty"`
	// Head is the branch's head when it was deleted.
	Head string `json:"head,omitempty"`
	// Tags are the live tags naming commits of the branch (a forced delete).
	Tags           []string `json:"tags,omitempty"`
	Message        string   `json:"message,omitempty"`
	SettleAttempts int      `json:"settle_attempts,omitempty"`
}

// DeleteBranch deletes a branch: prepare (refuse main, a tag-pinned branch
// without Force, a create still settling), then retire the live ref by
// compare-and-swap into a retired ref that stays at the key as a fence,
// settling an in-doubt swap by reading back and re-issuing it, and record
// the incarnation retired. Physical reclaim is cleanup's.
func DeleteBranch(ctx workflow.Context, in DeleteBranchInput) (DeleteBranchResult, error) {
	var a *activities.Activities
	info := workflow.GetInfo(ctx)
	r, err := newOpRun(ctx, in.OpID, catalog.OpDeleteBranch, in.Graph, in.Branch, in.Branch)
	if err != nil {
		return DeleteBranchResult{}, err
	}
	res := DeleteBranchResult{OpID: r.opID, Graph: in.Graph, Branch: in.Branch}
	end := func(out outcome.Outcome, message string, recorded bool) (DeleteBranchResult, error) {
		res.Outcome, res.Message = out, message
		r.finish(ctx, out, message, recorded)
		return res, nil
	}
	fail := func(err error) (DeleteBranchResult, error) {
		res.Message = err.Error()
		r.finish(ctx, "", res.Message, true)
		return res, err
	}

	r.setPhase(ctx, "prepare", "reading the refs and tags of "+in.Branch)
	var prep activities.PrepareDeleteBranchResult
	if err := workflow.ExecuteLocalActivity(localStep(ctx, opPrepareOptions, "prepare: read the refs, head and tags"),
		a.PrepareDeleteBranch, activities.PrepareDeleteBranchInput{
			OpID: r.opID, Graph: in.Graph, Branch: in.Branch, Force: in.Force,
			WorkflowID: info.WorkflowExecution.ID, RunID: info.WorkflowExecution.RunID,
		}).Get(ctx, &prep); err != nil {
		return fail(fmt.Errorf("prepare: %w", err))
	}
	res.Native, res.Head, res.Tags = prep.Native, prep.Head, prep.Tags
	switch {
	case prep.Outcome != "":
		return end(prep.Outcome, prep.Message, prep.Recorded)
	case prep.Retired:
		return end(OutcomeDeleted, "", true)
	}

	var ret activities.RetireIncarnationResult
	do := func(since time.Time) (bool, string, error) {
		r.setPhase(ctx, "retire", "compare-and-swap of "+prep.Native+" into a retired ref")
		err := workflow.ExecuteLocalActivity(localStep(ctx, opEffectOptions, "retire: compare-and-swap "+prep.Native),
			a.RetireBranch, activities.RetireBranchInput{OpID: r.opID, Graph: in.Graph, Native: prep.Native, ETag: prep.ETag, InDoubtSince: since}).Get(ctx, &ret)
		if err != nil {
			return false, "", fmt.Errorf("retire %s: %w", prep.Native, err)
		}
		return ret.State == activities.RetireInDoubt, ret.Message, nil
	}
	err = r.write(ctx, "retire of "+prep.Native, do)
	res.SettleAttempts = r.status.SettleAttempts
	if err != nil {
		return fail(err)
	}
	switch ret.State {
	case activities.RetireDone:
		return end(OutcomeDeleted, "", true)
	case activities.RetireRefused:
		return end(outcome.Refused, ret.Message, true)
	}
	return end(outcome.Conflict, "the branch's ref changed while deleting it; look at it again and retry: "+ret.Message, true)
}
