package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
)

// CreateBranchName is the registered name of CreateBranch. Stable: renaming a Go function
// never renames it.
const CreateBranchName = "graft.CreateBranch"

// maxIncarnations is one create plus one retry under a fresh native name.
const maxIncarnations = 2

// Source names what a new branch starts from: at most one of Branch, Commit or Tag. All
// empty means the head of main.
type Source struct {
	Branch string `json:"branch,omitempty"`
	Commit string `json:"commit,omitempty"`
	Tag    string `json:"tag,omitempty"`
}

// CreateBranchInput is the input of graft.CreateBranch.
type CreateBranchInput struct {
	Graph   string `json:"graph"`
	Branch  string `json:"branch"`
	Source  Source `json:"source"`
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
	Incarnations   int `json:"incarnations"`
	SettleAttempts int `json:"settle_attempts,omitempty"`
}

func (r *CreateBranchResult) setSettleAttempts(n int) { r.SettleAttempts = n }

func (r *CreateBranchResult) setEnd(out outcome.Outcome, msg string) {
	r.Outcome, r.Message = out, msg
	if out != outcome.Created {
		r.Head = ""
	}
}

// createRun is one create's state on top of the kernel's.
type createRun struct {
	*opRun
	in CreateBranchInput
	// prep is the current attempt's prepared incarnation, nil before prepare returns: what
	// a cancellation's fence needs to reclaim.
	prep *activities.PrepareCreateResult
}

// CreateBranch creates a branch: prepare (validate, resolve the source, mint a native
// name, encode every byte, claim the operation, pin, witness the intent), clone (the new
// tree's fork commit), publish the ref through the kernel — which settles an ambiguous
// put before anything is reclaimed — and, when the ref can never land, reclaim the clone.
func CreateBranch(ctx workflow.Context, in CreateBranchInput) (CreateBranchResult, error) {
	info := workflow.GetInfo(ctx)
	op := startOp(ctx, runSpec{opID: in.OpID, kind: catalog.OpCreateBranch, graph: in.Graph, branch: in.Branch, subject: in.Branch})
	r := &createRun{in: in, opRun: op}
	r.onFenced = r.reclaimAfterFence
	res := CreateBranchResult{OpID: r.owner.OpID, Graph: in.Graph, Branch: in.Branch}
	// The execution's start time, not the task's: a workflow whose first task died with its
	// worker restarts with the same time, so prepare mints the same native name and finds
	// its own witness.
	started := info.WorkflowStartTime
	err := r.run(ctx, &res, func(ctx workflow.Context) (ending, error) {
		for attempt := 1; ; attempt++ {
			res.Incarnations = attempt
			e, retry, err := r.createOnce(ctx, attempt, started, &res)
			res.SettleAttempts = r.status.SettleAttempts
			if err != nil || !retry || attempt >= maxIncarnations {
				return e, err
			}
		}
	})
	return res, err
}

// createOnce is one incarnation's attempt; retry reports an unpublished attempt whose ref
// could never land for a reason a fresh native name avoids.
func (r *createRun) createOnce(ctx workflow.Context, attempt int, started time.Time, res *CreateBranchResult) (ending, bool, error) {
	r.status.Native = ""
	r.prep = nil
	r.pendingRecorded = false
	var prep activities.PrepareCreateResult
	if err := r.prepare(ctx, "", "validate, resolve source, mint native name, claim, witness intent",
		acts.PrepareCreate, activities.PrepareCreateInput{
			OpID: r.owner.OpID, Graph: r.in.Graph, Branch: r.in.Branch,
			SourceBranch: r.in.Source.Branch, SourceCommit: r.in.Source.Commit, SourceTag: r.in.Source.Tag,
			Author: r.in.Author, Message: r.in.Message, Time: started, Attempt: attempt, WorkflowID: r.wfID, RunID: r.owner.Run,
		}, &prep); err != nil {
		return ending{}, false, err
	}
	if prep.Outcome != "" {
		r.claimed(prep.Owned, prep.Recorded)
		if prep.Outcome == outcome.InDoubt { // attached to another operation's in-doubt create
			res.OpID = prep.ExistingOp
		}
		return ending{out: prep.Outcome, msg: prep.Message}, false, nil
	}
	res.Native, res.SourceCommit, res.Head = prep.Native, prep.SourceCommit, prep.ForkID
	r.status.Native = prep.Native
	r.prep = &prep

	r.setPhase(ctx, "clone", "writing the fork commit "+prep.ForkID)
	var clone activities.CloneResult
	if err := r.step(ctx, "clone: put-if-absent fork commit "+prep.ForkID, acts.CloneTree, activities.CloneInput{
		Owner: r.owner, Graph: r.in.Graph, Native: prep.Native, ForkID: prep.ForkID, ForkBytes: prep.ForkBytes, ForkChunks: prep.ForkChunks}, &clone); err != nil {
		return ending{}, false, fmt.Errorf("clone: %w", err)
	}
	refSpec := activities.WriteSpec{Kind: activities.WriteRef, Graph: r.in.Graph, Body: prep.RefBytes, Branch: r.in.Branch, Landed: outcome.Created, Subject: prep.Native}
	if prep.RefSpec != nil {
		// The prepare recorded the ref put as the operation's pending write.
		refSpec, r.pendingRecorded = *prep.RefSpec, true
	}
	switch clone.State {
	case activities.CloneRefused:
		// Definitely not stored, and the ref was never sent: nothing to fence.
		r.log(ctx, "graft create: clone refused; nothing was written", "native", prep.Native, "detail", clone.Message)
		return ending{out: outcome.Refused, msg: "clone refused: " + clone.Message}, false, nil
	case activities.CloneNotCommitted:
		return ending{out: outcome.Conflict, msg: "clone not committed: " + clone.Message}, false, nil
	case activities.CloneUnknown:
		// The fork commit may land later; the ref was never sent. A fence at the ref key
		// makes the tree unreachable for good, then it is reclaimed.
		e, err := r.fenceAndReclaim(ctx, refSpec, "clone answer unknown: "+clone.Message)
		return e, err == nil && e.out == outcome.Unpublished, err
	}

	r.setPhase(ctx, "publish", "put-if-absent of the ref")
	v, err := r.writeLanding(ctx, refSpec, landedAs(r.opRun, res, outcome.Created))
	if err != nil {
		return ending{}, false, err
	}
	switch v.State {
	case activities.Landed:
		return ending{out: outcome.Created, recorded: v.Recorded, native: prep.Native}, false, nil
	case activities.Other:
		return ending{out: outcome.Conflict, msg: "another writer's ref holds " + prep.Native + ": " + v.Message}, false, nil
	case activities.Refused:
		// A ref put the store definitely refused cannot land: no fence is needed. The
		// clone is reclaimed, and the create tried once more under a fresh name.
		if err := r.reclaim(ctx, "ref put refused: "+v.Message); err != nil {
			return ending{}, false, err
		}
		return ending{out: outcome.Refused, msg: "ref put refused: " + v.Message}, true, nil
	case activities.Invalid:
		return ending{out: outcome.Invalid, msg: v.Message}, false, nil
	case activities.NotOwner:
		return ending{}, false, fmt.Errorf("the ledger row of %s is no longer this run's: %s", r.owner.OpID, v.Message)
	}
	// Fenced: by this run's settle, an operator's abandon, or cleanup's collector.
	if err := r.reclaim(ctx, "a fence holds the ref key: "+v.Message); err != nil {
		return ending{}, false, err
	}
	// A fence found at once (not one this run put after settling) is worth a retry under a
	// fresh native name.
	return ending{out: outcome.Unpublished, msg: "a fence holds the ref key of " + prep.Native + ": " + v.Message}, r.status.SettleAttempts == 0 && r.abandon == nil, nil
}

// fenceAndReclaim settles an incarnation as unpublished: a fence at its ref key so no
// late put can ever publish it, then its clone reclaimed. A fence that loses to our own
// ref means the create happened.
func (r *createRun) fenceAndReclaim(ctx workflow.Context, refSpec activities.WriteSpec, reason string) (ending, error) {
	v, err := r.fence(ctx, refSpec, reason)
	if err != nil {
		return ending{}, err
	}
	switch v.State {
	case activities.Landed:
		return ending{out: outcome.Created, recorded: v.Recorded, native: r.prep.Native}, nil
	case activities.Other:
		return ending{out: outcome.Conflict, msg: "another writer's ref holds " + r.prep.Native}, nil
	}
	if err := r.reclaim(ctx, reason); err != nil {
		return ending{}, err
	}
	return ending{out: outcome.Unpublished, msg: reason}, nil
}

// reclaim deletes the clone of an incarnation no ref can ever publish.
func (r *createRun) reclaim(ctx workflow.Context, reason string) error {
	r.setPhase(ctx, "reclaim", reason)
	if err := r.step(ctx, "reclaim the clone", acts.ReclaimClone, activities.ReclaimInput{Owner: r.owner, Graph: r.in.Graph,
		Native: r.prep.Native, Fork: r.prep.ForkID, Reason: reason}, nil); err != nil {
		return fmt.Errorf("reclaim clone: %w", err)
	}
	return nil
}

// reclaimAfterFence is the kernel's hook after a cancellation fenced the ref.
func (r *createRun) reclaimAfterFence(ctx workflow.Context) error {
	if r.prep == nil {
		return nil
	}
	return r.reclaim(ctx, "abandoned by cancellation")
}
