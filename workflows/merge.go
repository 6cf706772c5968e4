package workflows

import (
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/workflows/contract"
)

// MergeName is the registered name of Merge. Stable.
const MergeName = "graft.Merge"

// The success outcomes of Merge, DeleteBranch and DeleteTag (the CLI exits 0 on each).
const (
	OutcomeMerged          = activities.OutcomeMerged
	OutcomeAdopted         = activities.OutcomeAdopted
	OutcomeAlreadyUpToDate = activities.OutcomeAlreadyUpToDate
	OutcomeDeleted         = activities.OutcomeDeleted
)

// MergeAction and MergeTable are declared in package contract (the plan step fills them).
type (
	MergeAction = contract.MergeAction
	MergeTable  = contract.MergeTable
)

// The merge actions (docs/merge-restore-tags.md).
const (
	MergeUnchanged = contract.MergeUnchanged
	MergeAdopt     = contract.MergeAdopt
	MergeKeep      = contract.MergeKeep
	MergeConflict  = contract.MergeConflict
	MergeMerged    = contract.MergeMerged
)

// MergeInput is the input of graft.Merge.
type MergeInput struct {
	Graph string `json:"graph"`
	// Source is the branch merged; Target the branch the merge commit is appended to.
	Source       string `json:"source"`
	Target       string `json:"target"`
	ExpectedHead string `json:"expected_head,omitempty"`
	// Preview returns the plan and writes nothing: no commit, no ledger row.
	Preview bool   `json:"preview,omitempty"`
	OpID    string `json:"op_id,omitempty"`
	Author  string `json:"author,omitempty"`
	Message string `json:"message,omitempty"`
	// WaitTimeout, when set, bounds how long a merge into a protected branch waits for
	// its checks and approvals; then it ends rejected. Default: no deadline.
	WaitTimeout time.Duration `json:"wait_timeout,omitempty"`
}

// MergeResult is the result of graft.Merge.
type MergeResult struct {
	// Outcome is merged, adopted or already_up_to_date on success; conflict (with Tables
	// listing every conflict, and nothing written), not_found, not_retained, invalid or
	// refused otherwise. A preview's outcome is the one the merge would have.
	Outcome outcome.Outcome `json:"outcome"`
	OpID    string          `json:"op_id,omitempty"`
	Graph   string          `json:"graph"`
	Source  string          `json:"source"`
	Target  string          `json:"target"`
	Preview bool            `json:"preview,omitempty"`
	// Commit is the merge commit, now the target's head.
	Commit     string `json:"commit,omitempty"`
	SourceHead string `json:"source_head,omitempty"`
	TargetHead string `json:"target_head,omitempty"`
	// Bases are the merge bases found from the heads' lineages.
	Bases []string `json:"bases,omitempty"`
	// Tables lists every table the merge does not leave unchanged.
	Tables         []MergeTable `json:"tables"`
	Unchanged      int          `json:"unchanged"`
	Conflicts      int          `json:"conflicts"`
	Message        string       `json:"message,omitempty"`
	HeadRetries    int          `json:"head_retries,omitempty"`
	SettleAttempts int          `json:"settle_attempts,omitempty"`
	// Rule is the protected target's rule (a preview's too); Wait what the merge last
	// waited for: its checks, reviews and approvals.
	Rule *contract.MergeRule `json:"rule,omitempty"`
	Wait *contract.MergeWait `json:"wait,omitempty"`
}

func (r *MergeResult) setSettleAttempts(n int) { r.SettleAttempts = n }

func (r *MergeResult) setEnd(out outcome.Outcome, msg string) {
	r.Outcome, r.Message = out, msg
	if out != OutcomeMerged && out != OutcomeAdopted {
		r.Commit = ""
	}
}

// Merge merges a source branch into a target branch by adoption: plan (read both heads,
// find the merge base from their lineages, classify every table), then — with no conflict
// and something to adopt — append one commit to the target with first parent the target
// head and merged parent the source head, through appendCommit. The inputs stay pinned
// until the outcome is definitive.
func Merge(ctx workflow.Context, in MergeInput) (MergeResult, error) {
	r := startOp(ctx, runSpec{opID: in.OpID, kind: catalog.OpMerge, graph: in.Graph, branch: in.Target, subject: in.Source + " → " + in.Target})
	if in.Preview {
		// A preview is not an operation of the ledger.
		r.owner.OpID, r.status.OpID, r.foreign = in.OpID, in.OpID, true
	}
	res := MergeResult{OpID: r.owner.OpID, Graph: in.Graph, Source: in.Source, Target: in.Target, Preview: in.Preview, Tables: []MergeTable{}}
	var g *gate // takes reviews from the start, and refuses them until the merge waits
	if !in.Preview {
		g = newGate(ctx, r, in)
	}
	var cleared *activities.ClearedHeads
	err := r.run(ctx, &res, func(ctx workflow.Context) (ending, error) {
		return appendCommit(ctx, r, &res, in.ExpectedHead, in.Target, &res.HeadRetries, func(ctx workflow.Context) (plannedCommit, error) {
			for {
				r.setPhase(ctx, PhasePlan, "reading the heads of "+in.Source+" and "+in.Target)
				var plan activities.PlanMergeResult
				pin := activities.PlanMergeInput{
					OpID: r.owner.OpID, Graph: in.Graph, Source: in.Source, Target: in.Target, ExpectedHead: in.ExpectedHead,
					Preview: in.Preview, Author: in.Author, Message: in.Message,
					WorkflowID: r.wfID, RunID: r.owner.Run, Cleared: cleared,
				}
				var err error
				if in.Preview || res.HeadRetries == 0 && r.status.SettleAttempts == 0 && r.pending == nil && !r.planned {
					err = beforeEffect(ctx, "plan: read heads, find the merge base, classify tables", acts.PlanMerge, pin, &plan)
				} else {
					err = r.step(ctx, "re-plan: read heads, find the merge base, classify tables", acts.PlanMerge, pin, &plan)
				}
				if err != nil {
					return plannedCommit{}, err
				}
				r.planned = true
				if !in.Preview {
					r.claimed(plan.Owned, plan.Recorded)
				}
				res.SourceHead, res.TargetHead, res.Bases = plan.SourceHead, plan.TargetHead, plan.Bases
				res.Unchanged, res.Conflicts = plan.Unchanged, plan.Conflicts
				res.Tables = plan.Tables // a re-plan replaces the whole plan
				if res.Tables == nil {
					res.Tables = []MergeTable{}
				}
				res.Commit, r.status.Commit, res.Rule = plan.Commit, plan.Commit, plan.Gate
				if plan.Gate == nil || in.Preview || plan.Outcome != "" || plan.PendingRecorded || plan.Committed {
					return plannedCommit{out: plan.Outcome, msg: plan.Message, committed: plan.Committed, spec: plan.Spec, recorded: plan.PendingRecorded, success: plan.Kind}, nil
				}
				ge, err := g.await(ctx, plan)
				res.Wait = &g.wait
				switch {
				case err != nil:
					return plannedCommit{}, err
				case ge.end != nil:
					return plannedCommit{out: ge.end.out, msg: ge.end.msg}, nil
				}
				cleared = ge.cleared // nil: a head moved, plan again
			}
		})
	})
	return res, err
}
