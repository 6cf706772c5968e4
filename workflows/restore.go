package workflows

import (
	"fmt"

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
	To RestoreTarget `json:"to"`
	// ExpectedHead, when set, makes the restore a conflict unless the
	// branch's head is this commit. Defaults to "" (restore on top of
	// whatever the head is, re-planning up to MaxHeadRetries times).
	ExpectedHead string `json:"expected_head,omitempty"`
	// NoBackup skips the backup tag of the pre-restore head. Defaults to
	// false: a backup tag is taken.
	NoBackup bool `json:"no_backup,omitempty"`
	// BackupTag names the backup tag. Defaults to
	// "backup/{branch}/{head commit id}" (activities.BackupTagName).
	BackupTag string `json:"backup_tag,omitempty"`
	// OpID identifies the operation in the ledger. Defaults to the workflow id.
	OpID    string `json:"op_id,omitempty"`
	Author  string `json:"author,omitempty"`
	Message string `json:"message,omitempty"`
}

// RestoreResult is the result of graft.Restore. Outcome done means Commit
// is the branch's head, pins what RestoredFrom pins, and BackupTag (unless
// turned off) names PreviousHead.
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
	// HeadRetries counts re-plans after the branch's head moved; each
	// re-plan backs up the head it then replaces under that head's name.
	HeadRetries    int `json:"head_retries,omitempty"`
	SettleAttempts int `json:"settle_attempts,omitempty"`
}

// Restore gives a branch back the table versions of an earlier commit:
// prepare (resolve the commit by id or tag, pin it and every version it
// pins, probe that they all still exist — else not_retained with nothing
// written), then per head: a backup tag of the head (immutable, settled
// before anything else), then a commit on top of the head with the
// commit's pins and restored_from, with expected-head semantics.
func Restore(ctx workflow.Context, in RestoreInput) (RestoreResult, error) {
	var a *activities.Activities
	info := workflow.GetInfo(ctx)
	r, err := newOpRun(ctx, in.OpID, catalog.OpRestore, in.Graph, in.Branch, in.Branch)
	if err != nil {
		return RestoreResult{}, err
	}
	res := RestoreResult{OpID: r.opID, Graph: in.Graph, Branch: in.Branch}

	r.setPhase(ctx, "prepare", "resolving, pinning and probing the commit to restore")
	var prep activities.PrepareRestoreResult
	if err := workflow.ExecuteLocalActivity(localStep(ctx, opPrepareOptions, "prepare: resolve, pin and probe the commit to restore"),
		a.PrepareRestore, activities.PrepareRestoreInput{
			OpID: r.opID, Graph: in.Graph, Branch: in.Branch, ToCommit: in.To.Commit, ToTag: in.To.Tag,
			ExpectedHead: in.ExpectedHead, NoBackup: in.NoBackup, BackupTag: in.BackupTag, Author: in.Author, Message: in.Message,
			WorkflowID: info.WorkflowExecution.ID, RunID: info.WorkflowExecution.RunID,
		}).Get(ctx, &prep); err != nil {
		return r.failRestore(ctx, &res, fmt.Errorf("prepare: %w", err), true)
	}
	res.RestoredFrom = prep.Target
	if prep.Outcome != "" {
		return r.endRestore(ctx, &res, prep.Outcome, prep.Message, prep.Recorded)
	}

	for attempt := 0; ; attempt++ {
		r.setPhase(ctx, "plan", "reading the head of "+in.Branch)
		var plan activities.PlanRestoreResult
		if err := workflow.ExecuteLocalActivity(localStep(ctx, opEffectOptions, "plan: read the head, compute backup tag and commit"),
			a.PlanRestore, activities.PlanRestoreInput{
				OpID: r.opID, Graph: in.Graph, Branch: in.Branch, Target: prep.Target, ExpectedHead: in.ExpectedHead,
				NoBackup: in.NoBackup, BackupTag: in.BackupTag, Author: in.Author, Message: in.Message, Time: prep.Time,
			}).Get(ctx, &plan); err != nil {
			return r.failRestore(ctx, &res, fmt.Errorf("plan: %w", err), true)
		}
		if plan.Outcome != "" {
			return r.endRestore(ctx, &res, plan.Outcome, plan.Message, true)
		}
		res.PreviousHead = plan.Head
		if plan.Committed {
			res.Commit = plan.Commit
			return r.endRestore(ctx, &res, outcome.Done, "", true)
		}

		if plan.BackupTag != "" {
			tag, err := r.putTag(ctx, in.Graph, plan.BackupTag, plan.TagBody)
			res.SettleAttempts = r.status.SettleAttempts
			if err != nil {
				return r.failRestore(ctx, &res, err, true)
			}
			switch tag.State {
			case activities.TagOther:
				return r.endRestore(ctx, &res, outcome.Conflict, "backup tag: "+tag.Message, true)
			case activities.TagRefused:
				return r.endRestore(ctx, &res, outcome.Refused, "backup tag: "+tag.Message, true)
			case activities.TagInvalid:
				return r.endRestore(ctx, &res, outcome.Invalid, "backup tag: "+tag.Message, true)
			}
			res.BackupTag = plan.BackupTag
		}

		r.status.Commit = plan.Commit
		put, err := r.putCommit(ctx, in.Graph, catalog.OpRestore, plan.Commit, plan.Body)
		res.SettleAttempts = r.status.SettleAttempts
		if err != nil {
			return r.failRestore(ctx, &res, err, true)
		}
		switch put.State {
		case activities.CommitStored:
			res.Commit = plan.Commit
			return r.endRestore(ctx, &res, outcome.Done, "", true)
		case activities.CommitRefused:
			return r.endRestore(ctx, &res, outcome.Refused, put.Message, true)
		case activities.CommitInvalid:
			return r.endRestore(ctx, &res, outcome.Invalid, put.Message, true)
		}
		if in.ExpectedHead != "" {
			return r.endRestore(ctx, &res, outcome.Conflict, fmt.Sprintf("the head of %q is no longer %s: %s", in.Branch, in.ExpectedHead, put.Message), true)
		}
		if attempt >= MaxHeadRetries {
			return r.endRestore(ctx, &res, outcome.Conflict, fmt.Sprintf("the head of %q moved %d times while restoring; retry the restore", in.Branch, attempt+1), true)
		}
		res.HeadRetries = attempt + 1
	}
}

func (r *opRun) endRestore(ctx workflow.Context, res *RestoreResult, out outcome.Outcome, message string, recorded bool) (RestoreResult, error) {
	res.Outcome, res.Message = out, message
	if out != outcome.Done {
		res.Commit = ""
	}
	r.finish(ctx, out, message, recorded)
	return *res, nil
}

func (r *opRun) failRestore(ctx workflow.Context, res *RestoreResult, err error, recorded bool) (RestoreResult, error) {
	res.Message, res.Commit = err.Error(), ""
	r.finish(ctx, "", res.Message, recorded)
	return *res, err
}
