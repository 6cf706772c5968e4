package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/oklog/ulid/v2"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	sdkclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/searchattr"
	"github.com/graftworks/graft/workflows"
)

// MergeRequest asks to merge Source into Target.
type MergeRequest struct {
	Graph, Source, Target string
	// ExpectedHead, when set, makes the merge a conflict unless Target's
	// head is this commit id. Defaults to "" (merge into the current head).
	ExpectedHead string
	// Preview returns the plan and writes nothing. Defaults to false.
	Preview bool
	// Author of the merge commit. Defaults to "graft".
	Author string
	// Message of the merge commit. Defaults to "merge {source} into {target}".
	Message string
	// IdempotencyKey identifies the operation: the same request repeated
	// with the same key attaches to the first, running or finished; another
	// request under the key is a *RequestConflictError. Defaults to a fresh
	// ULID.
	IdempotencyKey string
}

// MergeWorkflowID is the workflow id of a merge into target.
func MergeWorkflowID(graph, target, key string) string {
	return "graft/merge/" + graph + "/" + target + "/" + key
}

// MergePreviewWorkflowID is the workflow id of a merge preview.
func MergePreviewWorkflowID(graph, target, key string) string {
	return "graft/merge-preview/" + graph + "/" + target + "/" + key
}

// MergeHandle is a started merge.
type MergeHandle = OperationHandle[workflows.MergeResult]

// Merge merges req.Source into req.Target through graft.Merge and waits for
// the outcome. merged, adopted and already_up_to_date come back with a nil
// error (a preview's would-be outcome too); conflict is an *outcome.Error
// with the result's Tables listing every conflict; in_doubt returns as soon
// as the merge commit is known to be settling.
func (c *Client) Merge(ctx context.Context, req MergeRequest) (workflows.MergeResult, error) {
	h, err := c.StartMerge(ctx, req)
	if err != nil {
		return workflows.MergeResult{}, err
	}
	return h.Wait(ctx)
}

// StartMerge starts (or attaches to) a merge and returns at once.
func (c *Client) StartMerge(ctx context.Context, req MergeRequest) (*MergeHandle, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	key, err := idempotencyKey(req.IdempotencyKey)
	if err != nil {
		return nil, err
	}
	in := workflows.MergeInput{Graph: req.Graph, Source: req.Source, Target: req.Target, ExpectedHead: req.ExpectedHead,
		Preview: req.Preview, OpID: key, Author: req.Author, Message: req.Message}
	id, summary := MergeWorkflowID(req.Graph, req.Target, key), fmt.Sprintf("merge %s into %s in %s", req.Source, req.Target, req.Graph)
	if req.Preview { // not an operation of the ledger
		in.OpID = ""
		id, summary = MergePreviewWorkflowID(req.Graph, req.Target, key), "preview of "+summary
	}
	h, err := startOperation[workflows.MergeResult](ctx, c, operationStart{
		Kind: "merge",
		ID:   id, Workflow: workflows.MergeName, Input: in, Summary: summary, Graph: req.Graph, Branch: req.Target, OpID: in.OpID,
		ReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE, Request: requestOf(in),
	})
	if err != nil {
		return nil, err
	}
	h.fromStatus = func(st Status) workflows.MergeResult {
		return workflows.MergeResult{Outcome: st.Outcome, OpID: st.OpID, Graph: req.Graph, Source: req.Source, Target: req.Target,
			Commit: st.Commit, Message: st.Pending, SettleAttempts: st.SettleAttempts}
	}
	h.outcome = func(r workflows.MergeResult) (outcome.Outcome, string, string) { return r.Outcome, r.OpID, r.Message }
	return h, nil
}

// OperationHandle is a started operation whose result is R.
type OperationHandle[R any] struct {
	c          *Client
	WorkflowID string
	RunID      string
	// OpID is the operation's id in the ledger ("" for a merge preview).
	OpID       string
	run        sdkclient.WorkflowRun
	fromStatus func(Status) R
	outcome    func(R) (out outcome.Outcome, opID, message string)
}

func (h *OperationHandle[R]) target() waitTarget {
	return waitTarget{workflowID: h.WorkflowID, runID: h.RunID, opID: h.OpID, run: h.run}
}

// Wait waits for the operation's definitive outcome, or for it to be in
// doubt: then the result carries outcome in_doubt and the error is an
// *outcome.Error matching outcome.ErrInDoubt, with the operation id. A
// workflow that ends without a definitive outcome is a *WorkflowError, at
// once.
func (h *OperationHandle[R]) Wait(ctx context.Context) (R, error) {
	var early func(context.Context) (R, bool, error)
	if h.fromStatus != nil {
		early = func(qctx context.Context) (R, bool, error) {
			var zero R
			var st Status
			if err := h.c.queryStatus(qctx, h.WorkflowID, h.RunID, &st); err != nil {
				return zero, false, err
			}
			if !st.InDoubt() {
				return zero, false, nil
			}
			return h.fromStatus(st), true, nil
		}
	}
	res, err := await(ctx, h.c, h.target(), early)
	if err != nil {
		return res, h.waitError(err)
	}
	return res, h.err(res)
}

// WaitFinal waits for the operation's definitive outcome, even through a
// long settle (in_doubt is never returned).
func (h *OperationHandle[R]) WaitFinal(ctx context.Context) (R, error) {
	res, err := await[R](ctx, h.c, h.target(), nil)
	if err != nil {
		return res, h.waitError(err)
	}
	return res, h.err(res)
}

func (h *OperationHandle[R]) waitError(err error) error {
	var we *WorkflowError
	if errors.As(err, &we) {
		return err
	}
	return fmt.Errorf("wait for %s: %w", h.WorkflowID, err)
}

// Status asks the running operation which phase it is in, bounded by
// Options.QueryTimeout.
func (h *OperationHandle[R]) Status(ctx context.Context) (Status, error) {
	return h.c.Status(ctx, h.WorkflowID, h.RunID)
}

// Attached reports whether res belongs to another request's operation: the
// start found an operation of the same workflow id running (one create per
// branch name, say) and followed it, so this request's idempotency key was
// not used and res carries the other operation's id.
func (h *OperationHandle[R]) Attached(res R) bool {
	if h.outcome == nil || h.OpID == "" {
		return false
	}
	_, opID, _ := h.outcome(res)
	return opID != "" && opID != h.OpID
}

func (h *OperationHandle[R]) err(res R) error {
	out, opID, msg := h.outcome(res)
	if out.Success() {
		return nil
	}
	if opID == "" {
		opID = h.OpID
	}
	return &outcome.Error{Outcome: out, OpID: opID, Message: msg}
}

// operationStart is how startOperation starts a workflow.
type operationStart struct {
	ID, Workflow string
	Input        any
	Summary      string
	Graph        string
	// Branch is the GraftBranch search attribute; "" sets none.
	Branch, OpID string
	// Kind is the GraftOperation search attribute: the operation's kind.
	Kind string
	// ReusePolicy is what a start does after a finished run of the same id:
	// REJECT_DUPLICATE finds that run (an idempotency key is used once),
	// ALLOW_DUPLICATE starts a new one.
	ReusePolicy enumspb.WorkflowIdReusePolicy
	// Request is the input's canonical request. A start that finds a run of the same
	// id (running, or finished under REJECT_DUPLICATE) attaches to it only when that
	// run's request is this one, and is a *RequestConflictError otherwise. nil attaches
	// to any running run of the id (conflict policy USE_EXISTING).
	Request *workflows.Request
	// Finished, with Request, looks the id's latest run up first: one that ended
	// (completed, or failed with an outcome) under this OpID is attached to when it
	// is this request, and is a *RequestConflictError when it is not — rather than a
	// new run (ALLOW_DUPLICATE) that would find the ledger's row finished and report
	// its outcome without its result. Set when the caller gave the key.
	Finished bool
}

// startOperation starts a workflow, or attaches to the run of the same id it finds
// when that run is the same request (operationStart.Request).
func startOperation[R any](ctx context.Context, c *Client, s operationStart) (*OperationHandle[R], error) {
	var attrs []temporal.SearchAttributeUpdate
	if s.Graph != "" {
		attrs = append(attrs, searchattr.Graph.ValueSet(s.Graph))
	}
	if s.Branch != "" {
		attrs = append(attrs, searchattr.Branch.ValueSet(s.Branch))
	}
	if s.Kind != "" {
		attrs = append(attrs, searchattr.Operation.ValueSet(s.Kind))
	}
	opts := sdkclient.StartWorkflowOptions{
		ID:                       s.ID,
		TaskQueue:                c.opts.TaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    s.ReusePolicy,
		EnableEagerStart:         c.opts.EagerStart,
		StaticSummary:            s.Summary,
		TypedSearchAttributes:    temporal.NewSearchAttributes(attrs...),
	}
	if s.Request != nil {
		opts.WorkflowIDConflictPolicy = enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL
		opts.WorkflowExecutionErrorWhenAlreadyStarted = true
	}
	if s.Request != nil && s.Finished {
		run, err := c.finishedSame(ctx, s.ID, s.OpID, *s.Request)
		if err != nil {
			return nil, err
		}
		if run != nil {
			return &OperationHandle[R]{c: c, WorkflowID: run.GetID(), RunID: run.GetRunID(), OpID: s.OpID, run: run}, nil
		}
	}
	run, err := c.tc.ExecuteWorkflow(ctx, opts, s.Workflow, s.Input)
	if exists := (*serviceerror.WorkflowExecutionAlreadyStarted)(nil); s.Request != nil && errors.As(err, &exists) {
		run, _, err = c.attachSame(ctx, s.ID, exists.RunId, s.OpID, *s.Request)
		if err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, unanswered(ctx, "start "+s.Summary, s.ID, s.OpID, err)
	}
	return &OperationHandle[R]{c: c, WorkflowID: run.GetID(), RunID: run.GetRunID(), OpID: s.OpID, run: run}, nil
}

// requestOf returns an input's canonical request, for operationStart.Request.
func requestOf(in interface{ Request() workflows.Request }) *workflows.Request {
	r := in.Request()
	return &r
}

// idempotencyKey validates a caller's key, or mints a fresh one.
func idempotencyKey(key string) (string, error) {
	if key == "" {
		return ulid.Make().String(), nil
	}
	if err := checkKey(key); err != nil {
		return "", err
	}
	return key, nil
}
