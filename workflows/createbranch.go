package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/searchattr"
)

// Registered names of CreateBranch and its handlers. Stable: renaming a Go
// function never renames them.
const (
	CreateBranchName  = "graft.CreateBranch"
	AbandonSignalName = "graft.abandon"
	StatusQueryName   = "graft.status"
)

// Step options, at the top where a reader looks for them. Every step of a
// create is short and idempotent, so each runs as a local activity: recorded in
// history like any activity, retried by the worker running the workflow, and
// free of the matching round trip an ordinary activity costs (docs/benchmarks.md).
var (
	// Steps before any storage effect: a step that keeps failing (storage or
	// Postgres down) ends the create with nothing written.
	prepareOptions = beforeEffect
	// Steps after a storage effect may have happened: they retry until they
	// succeed, because giving up would leave a half-done create.
	effectOptions = afterEffect
)

// Timing of the decision after an ambiguous ref put (docs/workflows.md).
var (
	// RereadPauses are the pauses before each read-back of a ref whose put
	// answered ambiguously.
	RereadPauses = []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, 1600 * time.Millisecond}
	// SettleBackoff is the first pause between settle attempts; it doubles up to SettleBackoffMax.
	SettleBackoff    = 2 * time.Second
	SettleBackoffMax = time.Minute
	// MaxSettleAttempts bounds re-issues of an in-doubt ref put; after that the
	// workflow settles by fencing, as an operator's abandon would.
	MaxSettleAttempts = 30
	// maxIncarnations is one create plus one retry under a fresh native name.
	maxIncarnations = 2
)

// Source names what a new branch starts from: exactly one of Branch, Commit
// or Tag. All empty means the head of main.
type Source struct {
	Branch string `json:"branch,omitempty"`
	Commit string `json:"commit,omitempty"`
	Tag    string `json:"tag,omitempty"`
}

// CreateBranchInput is the input of graft.CreateBranch.
type CreateBranchInput struct {
	Graph  string `json:"graph"`
	Branch string `json:"branch"`
	Source Source `json:"source"`
	// OpID identifies the operation in the ledger. Defaults to the workflow id.
	OpID    string `json:"op_id,omitempty"`
	Author  string `json:"author,omitempty"`
	Message string `json:"message,omitempty"`
}

// CreateBranchResult is the result of graft.CreateBranch.
type CreateBranchResult struct {
	Outcome      outcome.Outcome `json:"outcome"`
	OpID         string          `json:"op_id"`
	Graph        string          `json:"graph"`
	Branch       string          `json:"branch"`
	Native       string          `json:"native,omitempty"`
	Head         string          `json:"head,omitempty"`
	SourceCommit string          `json:"source_commit,omitempty"`
	Message      string          `json:"message,omitempty"`
	// Incarnations counts native names tried (2 after a retry).
	Incarnations int `json:"incarnations"`
	// SettleAttempts counts re-issues of an in-doubt ref put.
	SettleAttempts int `json:"settle_attempts,omitempty"`
}

// CreateBranchStatus answers graft.status while the workflow runs.
type CreateBranchStatus struct {
	Phase          string          `json:"phase"`
	Outcome        outcome.Outcome `json:"outcome,omitempty"`
	OpID           string          `json:"op_id"`
	Native         string          `json:"native,omitempty"`
	Pending        string          `json:"pending,omitempty"`
	SettleAttempts int             `json:"settle_attempts,omitempty"`
}

// AbandonRequest is the payload of graft.abandon: settle an in-doubt create by
// fencing its ref key instead of waiting for the put to land.
type AbandonRequest struct {
	Reason string `json:"reason,omitempty"`
}

// createRun is one execution's state, readable through the status query.
type createRun struct {
	in       CreateBranchInput
	opID     string
	status   CreateBranchStatus
	abandon  *AbandonRequest
	abandonC workflow.ReceiveChannel
	// prep is the current attempt's prepared incarnation, nil before prepare
	// returns: what a cancellation must fence.
	prep *activities.PrepareCreateResult
	// recorded is set when the step that proved the create also recorded it
	// as finished in the ledger, so finish need not.
	recorded bool
	// foreign is set when the operation id belongs to another request, whose
	// ledger row this workflow must not finish.
	foreign bool
}

func (r *createRun) setPhase(ctx workflow.Context, phase, pending string) {
	r.status.Phase, r.status.Pending = phase, pending
	details := fmt.Sprintf("**%s**", phase)
	if r.status.Native != "" {
		details += " · " + r.status.Native
	}
	if pending != "" {
		details += " — " + pending
	}
	workflow.SetCurrentDetails(ctx, details)
}

// CreateBranch creates a branch: prepare (resolve the source, mint a native
// name, witness the intent), clone (the new tree's fork commit), publish the
// ref, and — when the ref put's outcome is unknown — settle it definitively
// before anything is reclaimed.
func CreateBranch(ctx workflow.Context, in CreateBranchInput) (CreateBranchResult, error) {
	info := workflow.GetInfo(ctx)
	r := &createRun{in: in, opID: in.OpID}
	if r.opID == "" {
		r.opID = info.WorkflowExecution.ID
	}
	r.status.OpID = r.opID
	r.abandonC = workflow.GetSignalChannel(ctx, AbandonSignalName)
	if err := workflow.SetQueryHandler(ctx, StatusQueryName, func() (CreateBranchStatus, error) { return r.status, nil }); err != nil {
		return CreateBranchResult{}, err
	}
	_ = workflow.UpsertTypedSearchAttributes(ctx,
		searchattr.Graph.ValueSet(in.Graph), searchattr.Branch.ValueSet(in.Branch), searchattr.Operation.ValueSet("create_branch"))

	res := CreateBranchResult{OpID: r.opID, Graph: in.Graph, Branch: in.Branch}
	// The execution's start time, not the task's: a workflow whose first task
	// died with its worker restarts with the same time, so prepare mints the
	// same native name and finds its own witness.
	started := info.WorkflowStartTime
	for attempt := 1; ; attempt++ {
		res.Incarnations = attempt
		end, err := r.createOnce(ctx, attempt, started, &res)
		if err != nil && (temporal.IsCanceledError(err) || ctx.Err() != nil) {
			return r.cancelled(ctx, &res, err)
		}
		if err != nil {
			res.Message = err.Error()
			r.finish(ctx, &res, "")
			return res, err
		}
		if end.out == outcome.Unpublished && end.retry && attempt < maxIncarnations {
			continue
		}
		res.Outcome = end.out
		r.finish(ctx, &res, end.out)
		return res, nil
	}
}

// attemptEnd is how one incarnation's attempt ended; retry marks an
// unpublished attempt that proved its ref could never land for a reason a
// fresh native name avoids.
type attemptEnd struct {
	out   outcome.Outcome
	retry bool
}

func (r *createRun) createOnce(ctx workflow.Context, attempt int, started time.Time, res *CreateBranchResult) (attemptEnd, error) {
	var a *activities.Activities
	r.status.Native = ""
	r.prep = nil
	r.setPhase(ctx, "prepare", "")
	var prep activities.PrepareCreateResult
	err := workflow.ExecuteLocalActivity(withSummary(ctx, prepareOptions, "prepare: resolve source, mint native name, witness intent"),
		a.PrepareCreate, activities.PrepareCreateInput{
			OpID: r.opID, Graph: r.in.Graph, Branch: r.in.Branch,
			SourceBranch: r.in.Source.Branch, SourceCommit: r.in.Source.Commit, SourceTag: r.in.Source.Tag,
			Author: r.in.Author, Message: r.in.Message, Time: started, Attempt: attempt,
			WorkflowID: workflow.GetInfo(ctx).WorkflowExecution.ID, RunID: workflow.GetInfo(ctx).WorkflowExecution.RunID,
		}).Get(ctx, &prep)
	if err != nil {
		return attemptEnd{}, fmt.Errorf("prepare: %w", err)
	}
	if prep.Outcome != "" {
		r.foreign = prep.Foreign
		res.Message = prep.Message
		if prep.Outcome == outcome.InDoubt { // attached to another operation's in-doubt create
			res.OpID = prep.ExistingOp
		}
		return attemptEnd{out: prep.Outcome}, nil
	}
	res.Native, res.SourceCommit, res.Head = prep.Native, prep.SourceCommit, prep.ForkID
	r.status.Native = prep.Native
	r.prep = &prep

	r.setPhase(ctx, "clone", "writing the fork commit "+prep.ForkID)
	var clone activities.CloneResult
	if err := workflow.ExecuteLocalActivity(withSummary(ctx, effectOptions, "clone: put-if-absent fork commit "+prep.ForkID),
		a.CloneTree, activities.CloneInput{OpID: r.opID, Graph: r.in.Graph, Native: prep.Native, ForkID: prep.ForkID, ForkBytes: prep.ForkBytes}).Get(ctx, &clone); err != nil {
		return attemptEnd{}, fmt.Errorf("clone: %w", err)
	}
	if clone.State != activities.CloneCommitted {
		// The ref was never sent, so nothing can name this tree once a fence
		// holds its ref key.
		return r.fenceAndReclaim(ctx, prep, res, "clone not committed: "+clone.Message, true)
	}

	r.setPhase(ctx, "publish", "put-if-absent of the ref")
	put, err := r.putRef(ctx, prep, "publish")
	if err != nil {
		return attemptEnd{}, err
	}
	switch put.State {
	case activities.RefOurs:
		r.recorded = put.Finished
		return attemptEnd{out: outcome.Created}, nil
	case activities.RefOther:
		res.Message = "another writer's ref holds " + prep.Native + ": " + put.Message
		return attemptEnd{out: outcome.Conflict}, nil
	case activities.RefFence:
		return r.reclaim(ctx, prep, res, "a fence holds the ref key: "+put.Message, true)
	case activities.RefRefused:
		return r.fenceAndReclaim(ctx, prep, res, "ref put refused: "+put.Message, true)
	}

	// The put's outcome is unknown: read back before deciding anything.
	for i, pause := range RereadPauses {
		r.setPhase(ctx, "reread", fmt.Sprintf("ref put answered ambiguously (%s); read-back %d of %d after %s", put.Message, i+1, len(RereadPauses), pause))
		if err := workflow.NewTimerWithOptions(ctx, pause, workflow.TimerOptions{Summary: "pause before ref read-back"}).Get(ctx, nil); err != nil {
			return attemptEnd{}, err
		}
		var read activities.RefResult
		if err := workflow.ExecuteLocalActivity(withSummary(ctx, effectOptions, "read back the ref"),
			a.ReadRef, r.refInput(prep, "reread")).Get(ctx, &read); err != nil {
			return attemptEnd{}, fmt.Errorf("read ref: %w", err)
		}
		switch read.State {
		case activities.RefOurs:
			r.recorded = read.Finished
			return attemptEnd{out: outcome.Created}, nil
		case activities.RefOther:
			res.Message = "another writer's ref holds " + prep.Native
			return attemptEnd{out: outcome.Conflict}, nil
		case activities.RefFence:
			return r.reclaim(ctx, prep, res, "a fence holds the ref key", true)
		}
	}
	return r.settle(ctx, prep, res)
}

// settle turns an in-doubt ref put into a definitive outcome: re-issue the
// byte-identical put-if-absent on a durable backoff until the store answers,
// or — on an operator's abandon, or after MaxSettleAttempts — win a fence.
func (r *createRun) settle(ctx workflow.Context, prep activities.PrepareCreateResult, res *CreateBranchResult) (attemptEnd, error) {
	var a *activities.Activities
	if err := workflow.ExecuteLocalActivity(withSummary(ctx, effectOptions, "witness in_doubt"),
		a.MarkInDoubt, activities.MarkInDoubtInput{OpID: r.opID, Graph: r.in.Graph, Native: prep.Native}).Get(ctx, nil); err != nil {
		return attemptEnd{}, fmt.Errorf("mark in doubt: %w", err)
	}
	r.status.Outcome = outcome.InDoubt
	_ = workflow.UpsertTypedSearchAttributes(ctx, searchattr.Outcome.ValueSet(string(outcome.InDoubt)))

	backoff := SettleBackoff
	for attempt := 1; ; attempt++ {
		// Wait before each re-issue: the caller has been told in_doubt, and a
		// put that is merely slow gets time to land on its own.
		r.setPhase(ctx, "settle", fmt.Sprintf("in doubt: next re-issue of the ref put in %s, or signal %s to fence", backoff, AbandonSignalName))
		r.waitOrAbandon(ctx, backoff)
		backoff = min(2*backoff, SettleBackoffMax)
		if reason, ok := r.abandonRequested(); ok {
			return r.fenceAndReclaim(ctx, prep, res, "abandoned by operator: "+reason, false)
		}
		if attempt > MaxSettleAttempts {
			return r.fenceAndReclaim(ctx, prep, res, fmt.Sprintf("ref put still unknown after %d re-issues", MaxSettleAttempts), false)
		}
		r.setPhase(ctx, "settle", fmt.Sprintf("in doubt: re-issuing the ref put, attempt %d of %d", attempt, MaxSettleAttempts))
		res.SettleAttempts = attempt
		r.status.SettleAttempts = attempt
		put, err := r.putRef(ctx, prep, "settle")
		if err != nil {
			return attemptEnd{}, err
		}
		switch put.State {
		case activities.RefOurs:
			r.recorded = put.Finished
			return attemptEnd{out: outcome.Created}, nil
		case activities.RefOther:
			res.Message = "another writer's ref holds " + prep.Native
			return attemptEnd{out: outcome.Conflict}, nil
		case activities.RefFence:
			return r.reclaim(ctx, prep, res, "a fence holds the ref key", false)
		}
		// Still unknown (or a refusal of the re-issue, which proves nothing
		// about the first put): wait durably again, or until an operator abandons.
		r.status.Pending = "ref put still unknown: " + put.Message
	}
}

// fenceAndReclaim settles an attempt as unpublished: it wins a fence at the
// ref key so no late put can ever publish the incarnation, then reclaims the
// clone. A fence that loses to our own ref means the create happened.
func (r *createRun) fenceAndReclaim(ctx workflow.Context, prep activities.PrepareCreateResult, res *CreateBranchResult, reason string, retry bool) (attemptEnd, error) {
	var a *activities.Activities
	backoff := SettleBackoff
	for {
		r.setPhase(ctx, "fence", reason)
		var f activities.RefResult
		if err := workflow.ExecuteLocalActivity(withSummary(ctx, effectOptions, "fence the ref key"),
			a.FenceRef, activities.FenceInput{OpID: r.opID, Graph: r.in.Graph, Native: prep.Native, Branch: r.in.Branch, Reason: reason}).Get(ctx, &f); err != nil {
			return attemptEnd{}, fmt.Errorf("fence ref: %w", err)
		}
		switch f.State {
		case activities.RefFence:
			return r.reclaim(ctx, prep, res, reason, retry)
		case activities.RefOurs:
			r.recorded = f.Finished
			return attemptEnd{out: outcome.Created}, nil
		case activities.RefOther:
			res.Message = "another writer's ref holds " + prep.Native
			return attemptEnd{out: outcome.Conflict}, nil
		}
		r.setPhase(ctx, "fence", fmt.Sprintf("%s; fence put unknown (%s), retrying in %s", reason, f.Message, backoff))
		if err := workflow.NewTimerWithOptions(ctx, backoff, workflow.TimerOptions{Summary: "pause before fence retry"}).Get(ctx, nil); err != nil {
			return attemptEnd{}, err
		}
		backoff = min(2*backoff, SettleBackoffMax)
	}
}

// reclaim deletes the clone of an incarnation whose ref key a fence holds.
func (r *createRun) reclaim(ctx workflow.Context, prep activities.PrepareCreateResult, res *CreateBranchResult, reason string, retry bool) (attemptEnd, error) {
	var a *activities.Activities
	r.setPhase(ctx, "reclaim", reason)
	if err := workflow.ExecuteLocalActivity(withSummary(ctx, effectOptions, "reclaim the clone"),
		a.ReclaimClone, activities.ReclaimInput{OpID: r.opID, Graph: r.in.Graph, Native: prep.Native, Fork: prep.ForkID, Reason: reason}).Get(ctx, nil); err != nil {
		return attemptEnd{}, fmt.Errorf("reclaim clone: %w", err)
	}
	res.Message = reason
	res.Head = ""
	return attemptEnd{out: outcome.Unpublished, retry: retry}, nil
}

func (r *createRun) putRef(ctx workflow.Context, prep activities.PrepareCreateResult, phase string) (activities.RefResult, error) {
	var a *activities.Activities
	var put activities.RefResult
	err := workflow.ExecuteLocalActivity(withSummary(ctx, effectOptions, phase+": put-if-absent ref "+prep.Native),
		a.PutRef, r.refInput(prep, phase)).Get(ctx, &put)
	if err != nil {
		return put, fmt.Errorf("%s ref: %w", phase, err)
	}
	return put, nil
}

func (r *createRun) refInput(prep activities.PrepareCreateResult, phase string) activities.RefInput {
	return activities.RefInput{OpID: r.opID, Graph: r.in.Graph, Native: prep.Native, RefBytes: prep.RefBytes, Phase: phase}
}

func (r *createRun) abandonRequested() (string, bool) {
	if r.abandon == nil {
		var req AbandonRequest
		if r.abandonC.ReceiveAsync(&req) {
			r.abandon = &req
		}
	}
	if r.abandon == nil {
		return "", false
	}
	return r.abandon.Reason, true
}

// waitOrAbandon sleeps d on a durable timer, waking early on an abandon signal.
func (r *createRun) waitOrAbandon(ctx workflow.Context, d time.Duration) {
	if _, ok := r.abandonRequested(); ok {
		return
	}
	tctx, cancel := workflow.WithCancel(ctx)
	defer cancel()
	sel := workflow.NewSelector(ctx)
	sel.AddFuture(workflow.NewTimerWithOptions(tctx, d, workflow.TimerOptions{Summary: "pause before settle re-issue"}), func(workflow.Future) {})
	sel.AddReceive(r.abandonC, func(c workflow.ReceiveChannel, more bool) {
		var req AbandonRequest
		c.Receive(ctx, &req)
		r.abandon = &req
	})
	sel.Select(ctx)
}

// cancelled ends a create whose workflow was cancelled without leaving it
// half-done: the cancellation counts as an operator's abandon. On a
// disconnected context, a prepared incarnation is fenced and its clone
// reclaimed (or, if its ref landed first, found created), and the outcome is
// recorded; a create cancelled before prepare returned wrote nothing to
// storage, and FinishCreate settles any witness it left.
func (r *createRun) cancelled(ctx workflow.Context, res *CreateBranchResult, cause error) (CreateBranchResult, error) {
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	var out outcome.Outcome
	res.Message = "cancelled before any storage effect"
	if r.prep != nil {
		end, err := r.fenceAndReclaim(dctx, *r.prep, res, "abandoned by cancellation", false)
		if err != nil {
			res.Message = err.Error()
		} else {
			out = end.out
		}
	}
	res.Outcome = out
	r.finish(dctx, res, out)
	return *res, cause
}

// finish records the operation's end in the ledger and in visibility.
func (r *createRun) finish(ctx workflow.Context, res *CreateBranchResult, out outcome.Outcome) {
	var a *activities.Activities
	r.status.Outcome = out
	r.setPhase(ctx, "done", string(out))
	if (out == outcome.Created && r.recorded) || r.foreign {
		_ = workflow.UpsertTypedSearchAttributes(ctx, searchattr.Outcome.ValueSet(string(out)))
		return
	}
	// The ledger write must not be lost; it retries like any post-effect step.
	_ = workflow.ExecuteLocalActivity(withSummary(ctx, effectOptions, "finish: record outcome "+string(out)),
		a.FinishCreate, activities.FinishInput{OpID: r.opID, Graph: r.in.Graph, Branch: r.in.Branch, Native: res.Native, Outcome: out, Message: res.Message}).Get(ctx, nil)
	if out != "" {
		_ = workflow.UpsertTypedSearchAttributes(ctx, searchattr.Outcome.ValueSet(string(out)))
	}
}

func withSummary(ctx workflow.Context, o workflow.LocalActivityOptions, summary string) workflow.Context {
	o.Summary = summary
	return workflow.WithLocalActivityOptions(ctx, o)
}
