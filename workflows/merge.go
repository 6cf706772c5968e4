package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/searchattr"
)

// MergeName is the registered name of Merge. Stable.
const MergeName = "graft.Merge"

// The success outcomes of Merge, DeleteBranch and DeleteTag (the ledger's
// vocabulary; the CLI exits 0 on each).
const (
	OutcomeMerged          = activities.OutcomeMerged
	OutcomeAdopted         = activities.OutcomeAdopted
	OutcomeAlreadyUpToDate = activities.OutcomeAlreadyUpToDate
	OutcomeDeleted         = activities.OutcomeDeleted
)

// Step options of Merge, Restore, DeleteBranch and the tag workflows, at
// the top where a reader looks for them. Every step is short and
// idempotent, so each is a local activity — recorded in history, retried
// by the worker running the workflow, and free of the matching round trip
// an ordinary activity costs (docs/benchmarks.md). A worker that dies after a put
// landed but before its workflow task completed replays the steps: the
// plan then finds the operation's own commit at the head (committed) or,
// if another commit was appended on top meanwhile, finds nothing left to
// do (a merge is already up to date; a restore appends its pins again).
var (
	// Steps before any storage effect: one that keeps failing ends the
	// operation with nothing written.
	opPrepareOptions = beforeEffect
	// Steps that write, or come after a write may have happened: they retry
	// until the store and the ledger answer, because giving up would leave
	// a write unsettled.
	opEffectOptions = afterEffect
)

// MergeInput is the input of graft.Merge.
type MergeInput struct {
	Graph string `json:"graph"`
	// Source is the branch merged; Target the branch the merge commit is
	// appended to.
	Source string `json:"source"`
	Target string `json:"target"`
	// ExpectedHead, when set, makes the merge a conflict unless the
	// target's head is this commit. Defaults to "" (merge into whatever
	// the head is, re-planning up to MaxHeadRetries times if it moves).
	ExpectedHead string `json:"expected_head,omitempty"`
	// Preview returns the plan and writes nothing: no commit, no ledger row.
	Preview bool `json:"preview,omitempty"`
	// OpID identifies the operation in the ledger. Defaults to the workflow id.
	OpID    string `json:"op_id,omitempty"`
	Author  string `json:"author,omitempty"`
	Message string `json:"message,omitempty"`
}

// MergeResult is the result of graft.Merge.
type MergeResult struct {
	// Outcome is merged, adopted or already_up_to_date on success; conflict
	// (with Tables listing every conflict, and nothing written), not_found,
	// not_retained, invalid or refused otherwise. A preview's outcome is
	// the one the merge would have.
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
	Tables    []MergeTable `json:"tables"`
	Unchanged int          `json:"unchanged"`
	Conflicts int          `json:"conflicts"`
	Message   string       `json:"message,omitempty"`
	// HeadRetries counts re-plans after the target's head moved.
	HeadRetries int `json:"head_retries,omitempty"`
	// SettleAttempts counts re-issues of in-doubt writes.
	SettleAttempts int `json:"settle_attempts,omitempty"`
}

// OperationStatus answers graft.status while a merge, restore, branch
// delete or tag operation runs. Outcome is in_doubt while a write settles.
type OperationStatus struct {
	Phase          string          `json:"phase"`
	Outcome        outcome.Outcome `json:"outcome,omitempty"`
	OpID           string          `json:"op_id"`
	Commit         string          `json:"commit,omitempty"`
	Pending        string          `json:"pending,omitempty"`
	SettleAttempts int             `json:"settle_attempts,omitempty"`
}

// Merge merges a source branch into a target branch by adoption: plan (read
// both heads, find the merge base from their lineages, classify every
// table), then — with no conflict and something to adopt — append one
// commit to the target with first parent the target head and merged parent
// the source head, settling an in-doubt put before anything else. A target
// that moved is re-planned, or is a conflict when the caller gave an
// expected head. The inputs stay pinned until the outcome is definitive.
func Merge(ctx workflow.Context, in MergeInput) (MergeResult, error) {
	var a *activities.Activities
	info := workflow.GetInfo(ctx)
	r, err := newOpRun(ctx, in.OpID, catalog.OpMerge, in.Graph, in.Target, in.Source+" → "+in.Target)
	if err != nil {
		return MergeResult{}, err
	}
	if in.Preview {
		r.opID, r.status.OpID = in.OpID, in.OpID // a preview is not an operation of the ledger
	}
	res := MergeResult{OpID: r.opID, Graph: in.Graph, Source: in.Source, Target: in.Target, Preview: in.Preview, Tables: []MergeTable{}}
	for attempt := 0; ; attempt++ {
		r.setPhase(ctx, "plan", "reading the heads of "+in.Source+" and "+in.Target)
		var plan activities.PlanMergeResult
		if err := workflow.ExecuteLocalActivity(localStep(ctx, opPrepareOptions, "plan: read heads, find the merge base, classify tables"),
			a.PlanMerge, activities.PlanMergeInput{
				OpID: r.opID, Graph: in.Graph, Source: in.Source, Target: in.Target, ExpectedHead: in.ExpectedHead,
				Preview: in.Preview, Author: in.Author, Message: in.Message,
				WorkflowID: info.WorkflowExecution.ID, RunID: info.WorkflowExecution.RunID,
			}).Get(ctx, &plan); err != nil {
			return r.failMerge(ctx, &res, fmt.Errorf("plan: %w", err), !in.Preview)
		}
		res.SourceHead, res.TargetHead, res.Bases = plan.SourceHead, plan.TargetHead, plan.Bases
		res.Unchanged, res.Conflicts = plan.Unchanged, plan.Conflicts
		res.Tables = mergeTables(plan.Tables) // a re-plan replaces the whole plan
		if plan.Outcome != "" {
			return r.endMerge(ctx, &res, plan.Outcome, plan.Message, plan.Recorded && !in.Preview)
		}
		if plan.Committed {
			res.Commit = plan.Commit
			return r.endMerge(ctx, &res, plan.Kind, "", true)
		}

		r.status.Commit = plan.Commit
		put, err := r.putCommit(ctx, in.Graph, catalog.OpMerge, plan.Commit, plan.Body)
		res.SettleAttempts = r.status.SettleAttempts
		if err != nil {
			return r.failMerge(ctx, &res, err, true)
		}
		switch put.State {
		case activities.CommitStored:
			res.Commit = plan.Commit
			return r.endMerge(ctx, &res, plan.Kind, "", true)
		case activities.CommitRefused:
			return r.endMerge(ctx, &res, outcome.Refused, put.Message, true)
		case activities.CommitInvalid:
			return r.endMerge(ctx, &res, outcome.Invalid, put.Message, true)
		}
		// Stale: another commit took the next seq of the target; ours never lands.
		if in.ExpectedHead != "" {
			return r.endMerge(ctx, &res, outcome.Conflict, fmt.Sprintf("the head of %q is no longer %s: %s", in.Target, in.ExpectedHead, put.Message), true)
		}
		if attempt >= MaxHeadRetries {
			return r.endMerge(ctx, &res, outcome.Conflict, fmt.Sprintf("the head of %q moved %d times while merging; retry the merge", in.Target, attempt+1), true)
		}
		res.HeadRetries = attempt + 1
	}
}

func (r *opRun) endMerge(ctx workflow.Context, res *MergeResult, out outcome.Outcome, message string, recorded bool) (MergeResult, error) {
	res.Outcome, res.Message = out, message
	if out != OutcomeMerged && out != OutcomeAdopted {
		res.Commit = ""
	}
	r.finish(ctx, out, message, recorded)
	return *res, nil
}

func (r *opRun) failMerge(ctx workflow.Context, res *MergeResult, err error, recorded bool) (MergeResult, error) {
	res.Message, res.Commit = err.Error(), ""
	r.finish(ctx, "", res.Message, recorded)
	return *res, err
}

// opRun is the state of one merge, restore, delete or tag operation: its
// identity, and its status as the graft.status query reports it.
type opRun struct {
	opID    string
	kind    catalog.OperationKind
	subject string
	status  OperationStatus
	// marked is set once the operation is recorded in_doubt in the ledger.
	marked bool
}

// newOpRun starts an operation's run: op id (the workflow id by default),
// status query and search attributes.
func newOpRun(ctx workflow.Context, opID string, kind catalog.OperationKind, graph, branch, subject string) (*opRun, error) {
	if opID == "" {
		opID = workflow.GetInfo(ctx).WorkflowExecution.ID
	}
	r := &opRun{opID: opID, kind: kind, subject: subject}
	r.status.OpID = opID
	if err := workflow.SetQueryHandler(ctx, StatusQueryName, func() (OperationStatus, error) { return r.status, nil }); err != nil {
		return nil, err
	}
	attrs := []temporal.SearchAttributeUpdate{searchattr.Graph.ValueSet(graph), searchattr.Operation.ValueSet(string(kind))}
	if branch != "" {
		attrs = append(attrs, searchattr.Branch.ValueSet(branch))
	}
	_ = workflow.UpsertTypedSearchAttributes(ctx, attrs...)
	return r, nil
}

func (r *opRun) setPhase(ctx workflow.Context, phase, pending string) {
	r.status.Phase, r.status.Pending = phase, pending
	setDetails(ctx, phase, r.subject, pending)
}

// finish records the operation's outcome ("" when it failed) in the ledger,
// which releases its pins, and in visibility.
func (r *opRun) finish(ctx workflow.Context, out outcome.Outcome, message string, recorded bool) {
	r.status.Outcome, r.status.Phase, r.status.Pending = out, "done", message
	finishOperation(ctx, r.opID, r.kind, out, message, recorded)
}

// putCommit appends a planned commit (a merge's or a restore's) and, if
// its put is in doubt, settles it by re-issuing the same bytes.
func (r *opRun) putCommit(ctx workflow.Context, graph string, kind catalog.OperationKind, commit string, body []byte) (activities.PutCommitResult, error) {
	var a *activities.Activities
	var put activities.PutCommitResult
	do := func(since time.Time) (bool, string, error) {
		r.setPhase(ctx, "commit", "put-if-absent of commit "+commit)
		err := workflow.ExecuteLocalActivity(localStep(ctx, opEffectOptions, "commit: put-if-absent "+commit),
			a.PutPlannedCommit, activities.PutPlannedCommitInput{OpID: r.opID, Graph: graph, Kind: kind, Body: body, InDoubtSince: since}).Get(ctx, &put)
		if err != nil {
			return false, "", fmt.Errorf("put commit: %w", err)
		}
		return put.State == activities.CommitInDoubt, put.Message, nil
	}
	return put, r.write(ctx, "commit "+commit, do)
}

// write runs a write step and, while it reports in doubt, settles it: the
// operation is recorded in_doubt (ledger, visibility, graft.status) and the
// byte-identical write is re-issued on a durable backoff — SettleBackoff,
// doubling up to SettleBackoffMax — until the store proves what happened.
func (r *opRun) write(ctx workflow.Context, what string, do func(inDoubtSince time.Time) (inDoubt bool, message string, err error)) error {
	var a *activities.Activities
	inDoubt, msg, err := do(time.Time{})
	if err != nil || !inDoubt {
		return err
	}
	var since time.Time
	if !r.marked {
		if err := workflow.ExecuteLocalActivity(localStep(ctx, opEffectOptions, "record in_doubt"),
			a.MarkOperationInDoubt, activities.MarkOperationInDoubtInput{OpID: r.opID}).Get(ctx, nil); err != nil {
			return fmt.Errorf("mark in doubt: %w", err)
		}
		r.marked = true
		since = workflow.Now(ctx) // only the episode that marked the operation reports its settling
	}
	r.status.Outcome = outcome.InDoubt
	_ = workflow.UpsertTypedSearchAttributes(ctx, searchattr.Outcome.ValueSet(string(outcome.InDoubt)))
	backoff := SettleBackoff
	for inDoubt {
		r.setPhase(ctx, "settle", fmt.Sprintf("%s in doubt (%s); re-issuing it in %s", what, msg, backoff))
		if err := workflow.NewTimerWithOptions(ctx, backoff, workflow.TimerOptions{Summary: "pause before re-issue of " + what}).Get(ctx, nil); err != nil {
			return err
		}
		backoff = min(2*backoff, SettleBackoffMax)
		r.status.SettleAttempts++
		if inDoubt, msg, err = do(since); err != nil {
			return err
		}
	}
	r.status.Outcome = ""
	return nil
}
