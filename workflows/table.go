package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/searchattr"
)

// WriteTableName is the registered name of WriteTable. Stable.
const WriteTableName = "graft.WriteTable"

// WriteTable's step options, at the top where a reader looks for them.
var (
	// Steps before any storage effect (validate, record, pin, probe): a
	// step that keeps failing ends the write with nothing published.
	writePrepareOptions = beforeEffect
	// The manifest put and the commit plan are idempotent and retry until
	// the store answers.
	writeStepOptions = afterEffect
	// The commit put is an ordinary activity, not a local one, on purpose:
	// scheduling it completes a workflow task, so the planned commit is in
	// history before any put of it is sent. A worker that dies after the
	// put therefore replays the same plan and re-sends the same bytes,
	// instead of planning a second commit on top of its own.
	commitPutOptions = workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy:         untilAnswered,
	}
)

// MaxHeadRetries bounds how many times a write without an expected head
// re-reads a branch head that moved under it before giving up with conflict.
var MaxHeadRetries = 5

// TableObject is one uploaded data object of a new table version.
type TableObject struct {
	// ID is the object's ULID; its key is {graph}/tables/{table}/objects/{ID}.
	ID     string `json:"id"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"` // lower-case hex
}

// WriteTableInput is the input of graft.WriteTable. The data objects are
// already in the store (the client uploads them put-if-absent); the input
// carries only their ids, sizes and checksums.
type WriteTableInput struct {
	Graph   string        `json:"graph"`
	Branch  string        `json:"branch"`
	Table   string        `json:"table"`
	Objects []TableObject `json:"objects"`
	// ExpectedHead, when set, makes the write conflict unless the branch's
	// head is this commit. Defaults to "" (append to whatever the head is,
	// re-reading it up to MaxHeadRetries times if it moves).
	ExpectedHead string `json:"expected_head,omitempty"`
	// OpID identifies the operation in the ledger. Defaults to the workflow id.
	OpID    string `json:"op_id,omitempty"`
	Author  string `json:"author,omitempty"`
	Message string `json:"message,omitempty"`
}

// WriteTableResult is the result of graft.WriteTable. Outcome done means
// Commit is on the branch and pins Version of Table.
type WriteTableResult struct {
	Outcome outcome.Outcome `json:"outcome"`
	OpID    string          `json:"op_id"`
	Graph   string          `json:"graph"`
	Branch  string          `json:"branch"`
	Table   string          `json:"table"`
	Version string          `json:"version,omitempty"`
	Commit  string          `json:"commit,omitempty"`
	Objects int             `json:"objects"`
	Bytes   int64           `json:"bytes"`
	Message string          `json:"message,omitempty"`
	// HeadRetries counts re-plans after the head moved.
	HeadRetries int `json:"head_retries,omitempty"`
	// SettleAttempts counts re-issues of an in-doubt commit put.
	SettleAttempts int `json:"settle_attempts,omitempty"`
}

// WriteTableStatus answers graft.status while a write runs.
type WriteTableStatus struct {
	Phase          string          `json:"phase"`
	Outcome        outcome.Outcome `json:"outcome,omitempty"`
	OpID           string          `json:"op_id"`
	Version        string          `json:"version,omitempty"`
	Commit         string          `json:"commit,omitempty"`
	Pending        string          `json:"pending,omitempty"`
	SettleAttempts int             `json:"settle_attempts,omitempty"`
}

type writeRun struct {
	in     WriteTableInput
	opID   string
	status WriteTableStatus
	objs   []activities.TableObject
}

func (w *writeRun) setPhase(ctx workflow.Context, phase, pending string) {
	w.status.Phase, w.status.Pending = phase, pending
	setDetails(ctx, phase, w.in.Table+"@"+w.in.Branch, pending)
}

// WriteTable publishes a new table version on a branch: prepare (record,
// pin, probe the uploaded objects), write the manifest, then append a
// commit that pins it with expected-head semantics — settling an in-doubt
// commit put on a durable timer rather than guessing.
func WriteTable(ctx workflow.Context, in WriteTableInput) (WriteTableResult, error) {
	var a *activities.Activities
	info := workflow.GetInfo(ctx)
	w := &writeRun{in: in, opID: in.OpID}
	if w.opID == "" {
		w.opID = info.WorkflowExecution.ID
	}
	w.status.OpID = w.opID
	if err := workflow.SetQueryHandler(ctx, StatusQueryName, func() (WriteTableStatus, error) { return w.status, nil }); err != nil {
		return WriteTableResult{}, err
	}
	_ = workflow.UpsertTypedSearchAttributes(ctx,
		searchattr.Graph.ValueSet(in.Graph), searchattr.Branch.ValueSet(in.Branch), searchattr.Operation.ValueSet(string(catalog.OpWriteTable)))
	res := WriteTableResult{OpID: w.opID, Graph: in.Graph, Branch: in.Branch, Table: in.Table, Objects: len(in.Objects)}
	for _, o := range in.Objects {
		w.objs = append(w.objs, activities.TableObject{ID: o.ID, Size: o.Size, SHA256: o.SHA256})
		res.Bytes += o.Size
	}

	w.setPhase(ctx, "prepare", fmt.Sprintf("recording the write, pinning and probing %d objects", len(in.Objects)))
	var prep activities.PrepareWriteResult
	err := workflow.ExecuteLocalActivity(localStep(ctx, writePrepareOptions, "prepare: record, pin and probe the uploaded objects"),
		a.PrepareWrite, activities.PrepareWriteInput{
			OpID: w.opID, Graph: in.Graph, Branch: in.Branch, Table: in.Table, Objects: w.objs,
			ExpectedHead: in.ExpectedHead, Author: in.Author, Message: in.Message,
			WorkflowID: info.WorkflowExecution.ID, RunID: info.WorkflowExecution.RunID,
		}).Get(ctx, &prep)
	if err != nil {
		return w.fail(ctx, &res, fmt.Errorf("prepare: %w", err), true)
	}
	if prep.Outcome != "" {
		return w.end(ctx, &res, prep.Outcome, prep.Message, prep.Recorded)
	}
	res.Version, w.status.Version = prep.Version, prep.Version

	w.setPhase(ctx, "manifest", "put-if-absent of version "+prep.Version)
	var man activities.WriteManifestResult
	if err := workflow.ExecuteLocalActivity(localStep(ctx, writeStepOptions, "manifest: put-if-absent version "+prep.Version),
		a.WriteManifest, activities.WriteManifestInput{
			OpID: w.opID, Graph: in.Graph, Table: in.Table, Version: prep.Version, Objects: w.objs, Time: prep.Time,
		}).Get(ctx, &man); err != nil {
		return w.fail(ctx, &res, fmt.Errorf("manifest: %w", err), true)
	}
	if man.Outcome != "" {
		return w.end(ctx, &res, man.Outcome, man.Message, true)
	}

	out, msg, err := w.commit(ctx, prep, &res)
	if err != nil {
		return w.fail(ctx, &res, err, true)
	}
	return w.end(ctx, &res, out, msg, true)
}

// commit plans and puts the commit that pins the new version, re-planning
// on a moved head (when no expected head was given) and settling an
// in-doubt put by re-issuing the same bytes on a durable backoff.
func (w *writeRun) commit(ctx workflow.Context, prep activities.PrepareWriteResult, res *WriteTableResult) (outcome.Outcome, string, error) {
	var a *activities.Activities
	for attempt := 0; ; attempt++ {
		w.setPhase(ctx, "plan", "reading the head of "+w.in.Branch)
		var plan activities.PlanCommitResult
		if err := workflow.ExecuteLocalActivity(localStep(ctx, writeStepOptions, "plan: read the head, compute the commit"),
			a.PlanCommit, activities.PlanCommitInput{
				OpID: w.opID, Graph: w.in.Graph, Branch: w.in.Branch, Table: w.in.Table, Version: prep.Version,
				ExpectedHead: w.in.ExpectedHead, Author: w.in.Author, Message: w.in.Message, Time: prep.Time,
			}).Get(ctx, &plan); err != nil {
			return "", "", fmt.Errorf("plan commit: %w", err)
		}
		if plan.Outcome != "" {
			return plan.Outcome, plan.Message, nil
		}
		res.Commit, w.status.Commit = plan.Commit, plan.Commit
		if plan.Committed {
			return outcome.Done, "", nil
		}

		put, err := w.putCommit(ctx, plan, time.Time{})
		if err != nil {
			return "", "", err
		}
		if put.State == activities.CommitInDoubt {
			if put, err = w.settle(ctx, plan, put, res); err != nil {
				return "", "", err
			}
		}
		switch put.State {
		case activities.CommitStored:
			return outcome.Done, "", nil
		case activities.CommitRefused:
			res.Commit = ""
			return outcome.Refused, put.Message, nil
		case activities.CommitInvalid:
			res.Commit = ""
			return outcome.Invalid, put.Message, nil
		}
		// Stale: another commit took the next seq; ours never lands.
		res.Commit = ""
		if w.in.ExpectedHead != "" {
			return outcome.Conflict, fmt.Sprintf("the head of %q is no longer %s: %s", w.in.Branch, w.in.ExpectedHead, put.Message), nil
		}
		if attempt >= MaxHeadRetries {
			return outcome.Conflict, fmt.Sprintf("the head of %q moved %d times while appending; retry the write", w.in.Branch, attempt+1), nil
		}
		res.HeadRetries = attempt + 1
	}
}

// settle re-issues an in-doubt commit put, byte-identical, on a durable
// backoff until the store proves what happened: ours landed (committed),
// another commit holds the key (stale), or a definite refusal. The ledger
// and visibility say in_doubt meanwhile.
func (w *writeRun) settle(ctx workflow.Context, plan activities.PlanCommitResult, put activities.PutCommitResult, res *WriteTableResult) (activities.PutCommitResult, error) {
	var a *activities.Activities
	if err := workflow.ExecuteLocalActivity(localStep(ctx, writeStepOptions, "record in_doubt"),
		a.MarkOperationInDoubt, activities.MarkOperationInDoubtInput{OpID: w.opID}).Get(ctx, nil); err != nil {
		return put, fmt.Errorf("mark in doubt: %w", err)
	}
	w.status.Outcome = outcome.InDoubt
	_ = workflow.UpsertTypedSearchAttributes(ctx, searchattr.Outcome.ValueSet(string(outcome.InDoubt)))
	since := workflow.Now(ctx)
	backoff := SettleBackoff
	for attempt := 1; put.State == activities.CommitInDoubt; attempt++ {
		w.setPhase(ctx, "settle", fmt.Sprintf("commit %s in doubt (%s); re-issuing its put in %s", plan.Commit, put.Message, backoff))
		if err := workflow.NewTimerWithOptions(ctx, backoff, workflow.TimerOptions{Summary: "pause before commit re-issue"}).Get(ctx, nil); err != nil {
			return put, err
		}
		backoff = min(2*backoff, SettleBackoffMax)
		res.SettleAttempts, w.status.SettleAttempts = attempt, attempt
		var err error
		if put, err = w.putCommit(ctx, plan, since); err != nil {
			return put, err
		}
	}
	w.status.Outcome = ""
	return put, nil
}

func (w *writeRun) putCommit(ctx workflow.Context, plan activities.PlanCommitResult, inDoubtSince time.Time) (activities.PutCommitResult, error) {
	var a *activities.Activities
	w.setPhase(ctx, "commit", "put-if-absent of commit "+plan.Commit)
	o := commitPutOptions
	o.Summary = "commit: put-if-absent " + plan.Commit
	var put activities.PutCommitResult
	err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, o), a.PutCommit,
		activities.PutCommitInput{OpID: w.opID, Graph: w.in.Graph, Body: plan.Body, InDoubtSince: inDoubtSince}).Get(ctx, &put)
	if err != nil {
		return put, fmt.Errorf("put commit: %w", err)
	}
	return put, nil
}

func (w *writeRun) end(ctx workflow.Context, res *WriteTableResult, out outcome.Outcome, message string, recorded bool) (WriteTableResult, error) {
	res.Outcome, res.Message = out, message
	if out != outcome.Done {
		res.Commit = ""
	}
	w.status.Outcome = out
	w.setPhase(ctx, "done", string(out))
	finishOperation(ctx, w.opID, catalog.OpWriteTable, out, message, recorded)
	return *res, nil
}

func (w *writeRun) fail(ctx workflow.Context, res *WriteTableResult, err error, recorded bool) (WriteTableResult, error) {
	res.Message = err.Error()
	res.Commit = ""
	finishOperation(ctx, w.opID, catalog.OpWriteTable, "", res.Message, recorded)
	return *res, err
}
