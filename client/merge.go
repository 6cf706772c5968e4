package client

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

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
	ExpectedHead          string
	// Preview returns the plan and writes nothing.
	Preview bool
	// Author and Message of the merge commit. Default to "graft" and
	// "merge {source} into {target}".
	Author, Message string
	IdempotencyKey  string
	// WaitTimeout, when set, bounds how long a merge into a protected branch waits for its
	// checks and approvals; then it ends rejected.
	WaitTimeout time.Duration
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

// Merge merges req.Source into req.Target through graft.Merge and waits for the outcome:
// merged, adopted and already_up_to_date (a preview's too) with a nil error; conflict
// with the result's Tables listing every conflict; in doubt as OperationHandle.Wait says.
func (c *Client) Merge(ctx context.Context, req MergeRequest) (workflows.MergeResult, error) {
	h, err := c.StartMerge(ctx, req)
	return startWait(ctx, h, err, false)
}

// StartMerge starts (or attaches to) a merge and returns at once.
func (c *Client) StartMerge(ctx context.Context, req MergeRequest) (*MergeHandle, error) {
	key := keyOrNew(req.IdempotencyKey)
	in := workflows.MergeInput{Graph: req.Graph, Source: req.Source, Target: req.Target, ExpectedHead: req.ExpectedHead,
		Preview: req.Preview, OpID: key, Author: req.Author, Message: req.Message, WaitTimeout: req.WaitTimeout}
	id, summary := MergeWorkflowID(req.Graph, req.Target, key), fmt.Sprintf("merge %s into %s in %s", req.Source, req.Target, req.Graph)
	if req.Preview { // not an operation of the ledger
		in.OpID = ""
		id, summary = MergePreviewWorkflowID(req.Graph, req.Target, key), "preview of "+summary
	}
	return startOperation(ctx, c, operationStart{
		Check: req.Validate(), Kind: "merge",
		ID: id, Workflow: workflows.MergeName, Input: in, Summary: summary, Graph: req.Graph, Branch: req.Target, OpID: in.OpID,
		ReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
	}, workflows.MergeResult{Graph: req.Graph, Source: req.Source, Target: req.Target})
}

// OperationHandle is a started operation whose result is R.
type OperationHandle[R any] struct {
	c          *Client
	WorkflowID string
	RunID      string
	// OpID is the operation's id in the ledger ("" for a merge preview).
	OpID string
	run  sdkclient.WorkflowRun
	// fromStatus, when set, builds the in-doubt result from a status query (inDoubtResult).
	fromStatus func(Status) R
}

// Wait waits for the operation's definitive outcome, or for it to be in doubt: then the
// result carries outcome in_doubt and the error matches outcome.ErrInDoubt, with the
// operation id. An outcome other than success is an *outcome.Error; a workflow that ends
// without one is a *WorkflowError.
func (h *OperationHandle[R]) Wait(ctx context.Context) (R, error) { return h.wait(ctx, h.fromStatus) }

// WaitFinal waits for the operation's definitive outcome, even through a long settle.
func (h *OperationHandle[R]) WaitFinal(ctx context.Context) (R, error) { return h.wait(ctx, nil) }

func (h *OperationHandle[R]) wait(ctx context.Context, inDoubt func(Status) R) (R, error) {
	res, err := h.await(ctx, inDoubt)
	var we *WorkflowError
	switch {
	case errors.As(err, &we):
		return res, err
	case err != nil:
		return res, fmt.Errorf("wait for %s: %w", h.WorkflowID, err)
	}
	out, opID, msg := resultEnd(res)
	if out.Success() {
		return res, nil
	}
	return res, &outcome.Error{Outcome: out, OpID: cmp.Or(opID, h.OpID), Message: msg}
}

// startWait waits for the operation a Start method returned: as Wait, or with final as
// WaitFinal.
func startWait[R any](ctx context.Context, h *OperationHandle[R], err error, final bool) (R, error) {
	switch {
	case err != nil:
		var zero R
		return zero, err
	case final:
		return h.WaitFinal(ctx)
	}
	return h.Wait(ctx)
}

// Status asks the running operation its phase, bounded by Options.QueryTimeout.
func (h *OperationHandle[R]) Status(ctx context.Context) (Status, error) {
	return h.c.Status(ctx, h.WorkflowID, h.RunID)
}

// Attached reports whether res belongs to another request's operation: the start found
// one of the same workflow id running (one create per branch name, say) and followed it,
// so this request's idempotency key was not used and res carries the other's id.
func (h *OperationHandle[R]) Attached(res R) bool {
	_, opID, _ := resultEnd(res)
	return h.OpID != "" && opID != "" && opID != h.OpID
}

// resultEnd reads the outcome, operation id and message every operation's result carries
// under the same JSON names (a cleanup's id is its run_id); a reconcile pass has no
// outcome and is done when it returns.
func resultEnd(res any) (outcome.Outcome, string, string) {
	if _, ok := res.(ReconcileResult); ok {
		return outcome.Done, "", ""
	}
	var e struct {
		Outcome outcome.Outcome `json:"outcome"`
		OpID    string          `json:"op_id"`
		RunID   string          `json:"run_id"`
		Message string          `json:"message"`
	}
	b, _ := json.Marshal(res)
	_ = json.Unmarshal(b, &e)
	return e.Outcome, cmp.Or(e.OpID, e.RunID), e.Message
}

// operationStart is how startOperation starts a workflow.
type operationStart struct {
	// Check is the request's Validate: an error ends the start before anything is contacted.
	Check error
	// Wrap, when set, prefixes an error of the start itself.
	Wrap         string
	ID, Workflow string
	Input        any
	Summary      string
	// Graph, Branch and Kind are the GraftGraph, GraftBranch and GraftOperation search
	// attributes; "" sets none.
	Graph, Branch, Kind string
	OpID                string
	// ReusePolicy after a finished run of the id: REJECT_DUPLICATE finds that run (an
	// idempotency key is used once), ALLOW_DUPLICATE starts anew.
	ReusePolicy enumspb.WorkflowIdReusePolicy
	// Finished, for an input with a canonical request, looks up the id's latest run first
	// (lookupSame): one that ended under this OpID is attached to (or a conflict) rather
	// than started anew (ALLOW_DUPLICATE), which would find the ledger's row finished and
	// report its outcome without its result. Set when the caller gave the key.
	Finished bool
	// What names the start in an *UnansweredError; defaults to "start "+Summary.
	What string
	// NoEager starts without Options.EagerStart.
	NoEager bool
}

// startOperation starts a workflow, or attaches to the run of the same id it finds when
// that run is the same request; base is the result an in-doubt status fills.
func startOperation[R any](ctx context.Context, c *Client, s operationStart, base R) (*OperationHandle[R], error) {
	if s.Check != nil {
		return nil, s.Check
	}
	run, _, err := c.startRun(ctx, s)
	switch {
	case err != nil && s.Wrap != "":
		return nil, fmt.Errorf("%s: %w", s.Wrap, err)
	case err != nil:
		return nil, err
	}
	return &OperationHandle[R]{c: c, WorkflowID: run.GetID(), RunID: run.GetRunID(), OpID: s.OpID, run: run, fromStatus: inDoubtResult(base)}, nil
}

// inDoubtResult builds an in-doubt result from a status query: base with the status's
// fields under the JSON names every result shares (outcome, op_id, settle_attempts;
// native, commit and version when reported), and what it waits for as its message.
func inDoubtResult[R any](base R) func(Status) R {
	return func(st Status) R {
		res := base
		b, _ := json.Marshal(st)
		_ = json.Unmarshal(b, &res)
		b, _ = json.Marshal(map[string]string{"message": st.Pending})
		_ = json.Unmarshal(b, &res)
		return res
	}
}

// startRun is startOperation's start; it also returns the run's operation id, another's
// when it attached to a run of the same request. An input with a canonical request
// (workflows.Request) attaches to a run of the id it finds (running, or finished under
// REJECT_DUPLICATE) only when that run is this request, and is a *RequestConflictError
// otherwise; an input without one attaches to any running run of the id.
func (c *Client) startRun(ctx context.Context, s operationStart) (sdkclient.WorkflowRun, string, error) {
	var req *workflows.Request
	if in, ok := s.Input.(interface{ Request() workflows.Request }); ok {
		r := in.Request()
		req = &r
	}
	opts := c.startOptions(s, req != nil)
	if req != nil && s.Finished {
		if run, err := c.lookupSame(ctx, s.ID, s.OpID, true, func() (workflows.Request, error) { return *req, nil }); err != nil || run != nil {
			return run, s.OpID, err
		}
	}
	run, err := c.tc.ExecuteWorkflow(ctx, opts, s.Workflow, s.Input)
	if exists := (*serviceerror.WorkflowExecutionAlreadyStarted)(nil); req != nil && errors.As(err, &exists) {
		return c.attachSame(ctx, s.ID, exists.RunId, s.OpID, *req, false)
	}
	if err != nil {
		return nil, "", unanswered(ctx, cmp.Or(s.What, "start "+s.Summary), s.ID, s.OpID, err)
	}
	return run, s.OpID, nil
}

// startOptions are the options s starts its workflow with; with canonical (its input has
// a canonical request) a run of the id already there is an error for attachSame to judge.
func (c *Client) startOptions(s operationStart, canonical bool) sdkclient.StartWorkflowOptions {
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
		EnableEagerStart:         c.opts.EagerStart && !s.NoEager,
		StaticSummary:            s.Summary,
		TypedSearchAttributes:    temporal.NewSearchAttributes(attrs...),
	}
	if canonical {
		opts.WorkflowIDConflictPolicy = enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL
		opts.WorkflowExecutionErrorWhenAlreadyStarted = true
	}
	return opts
}

// keyOrNew is the caller's idempotency key (checked by the request's Validate), or a fresh one.
func keyOrNew(key string) string { return cmp.Or(key, ulid.Make().String()) }
