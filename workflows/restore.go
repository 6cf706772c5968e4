package workflows

import (
	"go.temporal.io/sdk/workflow"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
)

// RestoreName is the registered name of Restore. Stable.
const RestoreName = "graft.Restore"

// RestoreTarget names a commit: exactly one of a commit id or a tag.
type RestoreTarget struct {
	Commit string `json:"commit,omitempty"`
	Tag    string `json:"tag,omitempty"`
}

// RestoreInput is the input of graft.Restore.
type RestoreInput struct {
	Graph  string `json:"graph"`
	Branch string `json:"branch"`
	// To names the commit whose pins the branch gets back.
	To           RestoreTarget `json:"to"`
	ExpectedHead string        `json:"expected_head,omitempty"`
	// NoBackup skips the backup tag of the pre-restore head.
	NoBackup bool `json:"no_backup,omitempty"`
	// BackupTag names the backup tag. Defaults to "backup/{branch}/{head commit id}".
	BackupTag string `json:"backup_tag,omitempty"`
	OpID      string `json:"op_id,omitempty"`
	Author    string `json:"author,omitempty"`
	Message   string `json:"message,omitempty"`
}

// RestoreResult is the result of graft.Restore. Outcome done means Commit is the branch's
// head, pins what RestoredFrom pins, and BackupTag (unless turned off) names PreviousHead.
type RestoreResult struct {
	Outcome outcome.Outcome `json:"outcome"`
	OpID    string          `json:"op_id"`
	Graph   string          `json:"graph"`
	Branch  string          `json:"branch"`
	// RestoredFrom is the commit whose pins were restored.
	RestoredFrom string `json:"restored_from,omitempty"`
	Commit       string `json:"commit,omitempty"`
	PreviousHead string `json:"previous_head,omitempty"`
	BackupTag    string `json:"backup_tag,omitempty"`
	Message      string `json:"message,omitempty"`
	// Each re-plan (HeadRetries) backs up the head it then replaces under that head's name.
	HeadRetries    int `json:"head_retries,omitempty"`
	SettleAttempts int `json:"settle_attempts,omitempty"`
}

func (r *RestoreResult) setSettleAttempts(n int) { r.SettleAttempts = n }

func (r *RestoreResult) setEnd(out outcome.Outcome, msg string) {
	r.Outcome, r.Message = out, msg
	if out != outcome.Done {
		r.Commit = ""
	}
}

// Restore gives a branch back the table versions of an earlier commit: prepare (resolve
// the commit by id or tag, claim, pin it and every version it pins, probe that they all
// still exist — else not_retained with nothing written), then per head: a backup tag of
// the head (immutable, settled before anything else), then a commit on top of the head
// with the commit's pins and restored_from, with expected-head semantics.
func Restore(ctx workflow.Context, in RestoreInput) (RestoreResult, error) {
	r := startOp(ctx, runSpec{opID: in.OpID, kind: catalog.OpRestore, graph: in.Graph, branch: in.Branch, subject: in.Branch})
	res := RestoreResult{OpID: r.owner.OpID, Graph: in.Graph, Branch: in.Branch}
	err := r.run(ctx, &res, func(ctx workflow.Context) (ending, error) {
		var prep activities.PrepareRestoreResult
		if err := r.prepare(ctx, "resolving, pinning and probing the commit to restore", "resolve, claim, pin and probe the commit to restore",
			acts.PrepareRestore, activities.PrepareRestoreInput{OpID: r.owner.OpID, Graph: in.Graph, Branch: in.Branch,
				ToCommit: in.To.Commit, ToTag: in.To.Tag, ExpectedHead: in.ExpectedHead, NoBackup: in.NoBackup, BackupTag: in.BackupTag,
				Author: in.Author, Message: in.Message, WorkflowID: r.wfID, RunID: r.owner.Run}, &prep); err != nil {
			return ending{}, err
		}
		r.claimed(prep.Owned, prep.Recorded)
		res.RestoredFrom = prep.Target
		if prep.Outcome != "" {
			return end(prep.Outcome, prep.Message)
		}
		return appendCommit(ctx, r, &res, in.ExpectedHead, in.Branch, &res.HeadRetries, func(ctx workflow.Context) (plannedCommit, error) {
			r.setPhase(ctx, PhasePlan, "reading the head of "+in.Branch)
			var plan activities.PlanRestoreResult
			if err := r.step(ctx, "plan: read the head, compute backup tag and commit", acts.PlanRestore, activities.PlanRestoreInput{
				Owner: r.owner, Graph: in.Graph, Branch: in.Branch, Target: prep.Target, ExpectedHead: in.ExpectedHead,
				NoBackup: in.NoBackup, BackupTag: in.BackupTag, Author: in.Author, Message: in.Message, Time: prep.Time,
			}, &plan); err != nil {
				return plannedCommit{}, err
			}
			if plan.Recorded != nil {
				r.claimed(false, plan.Recorded)
			}
			res.PreviousHead, res.Commit, r.status.Commit = plan.Head, plan.Commit, plan.Commit
			p := plannedCommit{out: plan.Outcome, msg: plan.Message, committed: plan.Committed, moved: plan.Moved, spec: plan.Spec, success: outcome.Done}
			if p.out != "" || p.committed || p.moved || plan.BackupTag == "" {
				return p, nil
			}
			tag, err := r.write(ctx, plan.Tag)
			res.SettleAttempts = r.status.SettleAttempts
			if err != nil {
				return plannedCommit{}, err
			}
			switch tag.State {
			case activities.Landed:
				res.BackupTag = plan.BackupTag
				return p, nil
			case activities.Other:
				p.out, p.msg = outcome.Conflict, "backup tag: "+tag.Message
			case activities.Refused:
				p.out, p.msg = outcome.Refused, "backup tag: "+tag.Message
			case activities.Fenced:
				p.out, p.msg = outcome.Unpublished, "backup tag fenced: "+tag.Message
			default:
				p.out, p.msg = outcome.Invalid, "backup tag: "+tag.Message
			}
			return p, nil
		})
	})
	return res, err
}
