package workflows

import (
	"fmt"
	"strings"

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
	// Force deletes a branch although live tags name commits of it; the tags keep those
	// commits. main is never deleted.
	Force bool   `json:"force,omitempty"`
	OpID  string `json:"op_id,omitempty"`
}

// DeleteBranchResult is the result of graft.DeleteBranch. Outcome deleted means Native's
// ref is retired: a fence no late put can pass, and the name free for a new create. Its
// commits stay until cleanup reclaims them (those a tag names stay for good).
type DeleteBranchResult struct {
	Outcome outcome.Outcome `json:"outcome"`
	OpID    string          `json:"op_id"`
	Graph   string          `json:"graph"`
	Branch  string          `json:"branch"`
	Native  string          `json:"native,omitempty"`
	// Head is the branch's head when it was deleted; Tags the live tags naming commits of
	// it (a forced delete).
	Head           string   `json:"head,omitempty"`
	Tags           []string `json:"tags,omitempty"`
	Message        string   `json:"message,omitempty"`
	SettleAttempts int      `json:"settle_attempts,omitempty"`
}

func (r *DeleteBranchResult) setEnd(out outcome.Outcome, msg string) { r.Outcome, r.Message = out, msg }
func (r *DeleteBranchResult) setSettleAttempts(n int)                { r.SettleAttempts = n }

// DeleteBranch deletes a branch: prepare (refuse main, a tag-pinned branch without Force,
// a create still settling; claim the operation), then retire the live ref by
// compare-and-swap into a retired ref that stays at the key as a fence, through the
// kernel, and record the incarnation retired. Physical reclaim is cleanup's.
func DeleteBranch(ctx workflow.Context, in DeleteBranchInput) (DeleteBranchResult, error) {
	r := startOp(ctx, runSpec{opID: in.OpID, kind: catalog.OpDeleteBranch, graph: in.Graph, branch: in.Branch, subject: in.Branch})
	res := DeleteBranchResult{OpID: r.owner.OpID, Graph: in.Graph, Branch: in.Branch}
	err := r.run(ctx, &res, func(ctx workflow.Context) (ending, error) {
		var prep activities.PrepareDeleteBranchResult
		if err := r.prepare(ctx, "reading the refs and tags of "+in.Branch, "read the refs, head and tags", acts.PrepareDeleteBranch,
			activities.PrepareDeleteBranchInput{OpID: r.owner.OpID, Graph: in.Graph, Branch: in.Branch, Force: in.Force,
				WorkflowID: r.wfID, RunID: r.owner.Run}, &prep); err != nil {
			return ending{}, err
		}
		r.claimed(prep.Owned, prep.Recorded)
		res.Native, res.Head, res.Tags = prep.Native, prep.Head, prep.Tags
		switch {
		case prep.Outcome != "":
			return end(prep.Outcome, prep.Message)
		case prep.Retired:
			return end(OutcomeDeleted, "")
		}
		r.pendingRecorded = prep.PendingRecorded
		v, err := r.writeIn(ctx, "retire", "compare-and-swap of "+prep.Native+" into a retired ref", prep.Spec,
			landedAs(r, &res, OutcomeDeleted), &res.SettleAttempts)
		if err != nil {
			return ending{}, err
		}
		return retired(v, "the branch's ref changed while deleting it; look at it again and retry: ")
	})
	return res, err
}

// retired ends a retire (a compare-and-swap into a retired ref or tag): deleted once it
// landed, recorded already when the retire recorded its end (writeLanding); otherwise
// refused, or a conflict whose message starts with changed.
func retired(v activities.Verdict, changed string) (ending, error) {
	switch v.State {
	case activities.Landed:
		return ending{out: OutcomeDeleted, recorded: v.Recorded}, nil
	case activities.Refused:
		return end(outcome.Refused, v.Message)
	}
	return end(outcome.Conflict, changed+v.Message)
}

// RepairBranchName is the registered name of RepairBranch. Stable.
const RepairBranchName = "graft.RepairBranch"

// RepairBranchInput is the input of graft.RepairBranch.
type RepairBranchInput struct {
	Graph  string `json:"graph"`
	Branch string `json:"branch"`
	// Keep is the native name ({branch}.{ULID}) of the live incarnation to keep.
	Keep string `json:"keep"`
	OpID string `json:"op_id,omitempty"`
}

// RepairBranchResult is the result of graft.RepairBranch. Outcome done means Keep is the
// branch's only live incarnation.
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

func (r *RepairBranchResult) setEnd(out outcome.Outcome, msg string) {
	r.Outcome = out
	if msg != "" || out != outcome.Done {
		r.Message = msg
	}
}

// RepairBranch makes a logical branch that has several live incarnations (written by an
// older tool, say) live through exactly one again: it reads that name's refs directly,
// then retires every live ref but Keep's by compare-and-swap, one kernel write per ref. A
// retired ref stays at its key as a fence, so a late put of it can never land.
func RepairBranch(ctx workflow.Context, in RepairBranchInput) (RepairBranchResult, error) {
	r := startOp(ctx, runSpec{opID: in.OpID, kind: catalog.OpDeleteBranch, operationAttr: "repair_branch",
		graph: in.Graph, branch: in.Branch, subject: in.Branch})
	res := RepairBranchResult{OpID: r.owner.OpID, Graph: in.Graph, Branch: in.Branch, Retired: []string{}}
	err := r.run(ctx, &res, func(ctx workflow.Context) (ending, error) {
		var prep activities.PrepareRepairResult
		if err := r.prepare(ctx, "reading the refs of "+in.Branch, "read the refs of "+in.Branch, acts.PrepareRepair, activities.PrepareRepairInput{
			OpID: r.owner.OpID, Graph: in.Graph, Branch: in.Branch, Keep: in.Keep, WorkflowID: r.wfID, RunID: r.owner.Run,
		}, &prep); err != nil {
			return ending{}, err
		}
		r.claimed(prep.Owned, prep.Recorded)
		if prep.Outcome != "" {
			return end(prep.Outcome, prep.Message)
		}
		res.Kept = in.Keep
		res.Retired = append(res.Retired, prep.AlreadyRetired...)
		var changed []string
		for i, t := range prep.Retire {
			r.setPhase(ctx, "retire", fmt.Sprintf("retiring %s (%d of %d), keeping %s", t.Native, i+1, len(prep.Retire), in.Keep))
			v, err := r.write(ctx, t.Spec)
			if err != nil {
				return ending{}, err
			}
			switch v.State {
			case activities.Landed:
				res.Retired = append(res.Retired, t.Native)
			case activities.Refused:
				return end(outcome.Refused, fmt.Sprintf("retire %s refused: %s", t.Native, v.Message))
			case activities.Fenced:
				// Retired by another operation meanwhile: not live, not this repair's.
			default:
				changed = append(changed, t.Native+" ("+v.Message+")")
			}
		}
		if len(changed) > 0 {
			return end(outcome.Conflict, "refs changed while repairing, run the repair again: "+strings.Join(changed, "; "))
		}
		var kept activities.AdoptKeptResult
		if err := r.step(ctx, "adopt the kept incarnation in the ledger", acts.AdoptKept, activities.AdoptKeptInput{
			Owner: r.owner, Graph: in.Graph, Branch: in.Branch, Keep: in.Keep}, &kept); err != nil {
			return ending{}, fmt.Errorf("adopt %s: %w", in.Keep, err)
		}
		return end(outcome.Done, kept.Note)
	})
	return res, err
}
