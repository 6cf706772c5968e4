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

// InitGraphName is the registered name of InitGraph. Stable.
const InitGraphName = "graft.InitGraph"

// InitGraph's step options. The init is one short idempotent step (every
// byte it writes is fixed by the operation id), so it runs as a local
// activity that retries until the store and ledger answer; a store that
// definitely refuses ends it as refused.
var initStepOptions = workflow.LocalActivityOptions{
	StartToCloseTimeout:    30 * time.Second,
	ScheduleToCloseTimeout: 10 * time.Minute,
	RetryPolicy:            untilAnswered,
}

// finishStepOptions are the options of every graft workflow's last step,
// recording the outcome in the ledger: it must not be lost, so it retries
// until Postgres answers.
var finishStepOptions = afterEffect

// InitGraphInput is the input of graft.InitGraph.
type InitGraphInput struct {
	Graph string `json:"graph"`
	// OpID identifies the operation in the ledger. Defaults to the workflow id.
	OpID string `json:"op_id,omitempty"`
	// Author of main's root commit. Defaults to "graft".
	Author string `json:"author,omitempty"`
}

// InitGraphResult is the result of graft.InitGraph. Outcome done means the
// graph exists with this operation's bytes; Created says whether this run
// wrote it or found it already written by an earlier run of the operation.
type InitGraphResult struct {
	Outcome outcome.Outcome `json:"outcome"`
	OpID    string          `json:"op_id"`
	Graph   string          `json:"graph"`
	// Main is the native name of main's first incarnation.
	Main string `json:"main,omitempty"`
	// Root is the id of main's root commit.
	Root    string `json:"root,omitempty"`
	Created bool   `json:"created"`
	Message string `json:"message,omitempty"`
}

// InitGraph creates a graph: main's root commit, main's live ref and the
// graph record, witnessed in the ledger before they are written.
func InitGraph(ctx workflow.Context, in InitGraphInput) (InitGraphResult, error) {
	var a *activities.Activities
	info := workflow.GetInfo(ctx)
	opID := in.OpID
	if opID == "" {
		opID = info.WorkflowExecution.ID
	}
	_ = workflow.UpsertTypedSearchAttributes(ctx,
		searchattr.Graph.ValueSet(in.Graph), searchattr.Branch.ValueSet("main"), searchattr.Operation.ValueSet(string(catalog.OpInitGraph)))
	res := InitGraphResult{OpID: opID, Graph: in.Graph}

	setDetails(ctx, "init", in.Graph, "writing the root commit, main's ref and the graph record")
	var init activities.InitGraphResult
	err := workflow.ExecuteLocalActivity(localStep(ctx, initStepOptions, "init: root commit, main ref, graph record"),
		a.InitGraph, activities.InitGraphInput{
			OpID: opID, Graph: in.Graph, Author: in.Author,
			WorkflowID: info.WorkflowExecution.ID, RunID: info.WorkflowExecution.RunID,
		}).Get(ctx, &init)
	if err != nil {
		res.Message = err.Error()
		finishOperation(ctx, opID, catalog.OpInitGraph, "", res.Message, true)
		return res, fmt.Errorf("init graph: %w", err)
	}
	res.Outcome, res.Message, res.Main, res.Root, res.Created = init.Outcome, init.Message, init.Main, init.Root, init.Created
	finishOperation(ctx, opID, catalog.OpInitGraph, res.Outcome, res.Message, init.Recorded)
	return res, nil
}

// finishOperation records a workflow's outcome ("" when it failed) in the
// ledger — when the operation was recorded as this request — and in
// visibility.
func finishOperation(ctx workflow.Context, opID string, kind catalog.OperationKind, out outcome.Outcome, message string, recorded bool) {
	var a *activities.Activities
	setDetails(ctx, "done", string(out), message)
	if recorded {
		_ = workflow.ExecuteLocalActivity(localStep(ctx, finishStepOptions, "finish: record outcome "+string(out)),
			a.FinishOperation, activities.FinishOperationInput{OpID: opID, Kind: kind, Outcome: out, Message: message}).Get(ctx, nil)
	}
	if out != "" {
		_ = workflow.UpsertTypedSearchAttributes(ctx, searchattr.Outcome.ValueSet(string(out)))
	}
}

// setDetails shows the phase, its subject and what is pending in the UI.
func setDetails(ctx workflow.Context, phase, subject, pending string) {
	details := "**" + phase + "**"
	if subject != "" {
		details += " · " + subject
	}
	if pending != "" {
		details += " — " + pending
	}
	workflow.SetCurrentDetails(ctx, details)
}

// localStep returns ctx with local activity options o and the step's summary.
func localStep(ctx workflow.Context, o workflow.LocalActivityOptions, summary string) workflow.Context {
	o.Summary = summary
	return workflow.WithLocalActivityOptions(ctx, o)
}
