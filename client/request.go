package client

import (
	"context"
	"errors"
	"fmt"
	"strings"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	sdkclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/workflows"
)

// RequestConflictError is a request that would attach to an operation started for a
// different request: its idempotency key names that operation (or, for an operation that
// runs once per name — a create of a branch, say — that operation runs under the same
// workflow id). The client never attaches it, so it never reports that operation's result
// as its own; this request was not started, and a table write uploaded nothing for it.
//
// It matches outcome.ErrConflict; outcome.Of says conflict, and the *outcome.Error it
// unwraps to carries the first operation's id.
type RequestConflictError struct {
	// Key is the idempotency key the request gave.
	Key string
	// OpID is the operation found (the first request's), WorkflowID and RunID its run.
	OpID, WorkflowID, RunID string
	// Differences names each field in which this request differs from the first
	// (workflows.Request.Differences).
	Differences []string
}

func (e *RequestConflictError) Error() string {
	what := fmt.Sprintf("workflow %s runs operation %s, which was started for a different request", e.WorkflowID, e.OpID)
	if e.Key != "" && e.Key == e.OpID {
		what = fmt.Sprintf("idempotency key %q was already used for a different request (workflow %s)", e.Key, e.WorkflowID)
	}
	return what + ": " + strings.Join(e.Differences, "; ") + "; this request was not started"
}

// Unwrap returns the conflict as an *outcome.Error.
func (e *RequestConflictError) Unwrap() error {
	return &outcome.Error{Outcome: outcome.Conflict, OpID: e.OpID, Message: e.Error()}
}

// attachSame returns the run a start found under its workflow id, and its operation id,
// when that run was started for the same request as ours (workflows.Request), and a
// *RequestConflictError when it was not. The run's request is read from its own input,
// so a run any SDK started is compared as well.
func (c *Client) attachSame(ctx context.Context, workflowID, runID, key string, ours workflows.Request) (sdkclient.WorkflowRun, string, error) {
	first, opID, err := c.startedRequest(ctx, workflowID, runID)
	if err != nil {
		return nil, "", unanswered(ctx, "read the request of "+workflowID, workflowID, key, err)
	}
	if !ours.Same(first) {
		return nil, "", &RequestConflictError{Key: key, OpID: opID, WorkflowID: workflowID, RunID: runID, Differences: ours.Differences(first)}
	}
	return c.tc.GetWorkflow(ctx, workflowID, runID), opID, nil
}

// finishedSame looks up the latest run of workflowID: when it ended — completed, or
// failed with its outcome — under operation key, it returns that run if it was started
// for the request ours, and a *RequestConflictError if not. Otherwise (no run, a run
// still going — the start meets it — or another operation's, or one terminated,
// cancelled or timed out, whose row the reconciler finishes) it returns nil.
func (c *Client) finishedSame(ctx context.Context, workflowID, key string, ours workflows.Request) (sdkclient.WorkflowRun, error) {
	desc, err := c.tc.DescribeWorkflowExecution(ctx, workflowID, "")
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &nf):
		return nil, nil
	case err != nil:
		return nil, unanswered(ctx, "look up "+workflowID, workflowID, key, err)
	}
	info := desc.GetWorkflowExecutionInfo()
	if st := info.GetStatus(); st != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED && st != enumspb.WORKFLOW_EXECUTION_STATUS_FAILED {
		return nil, nil
	}
	runID := info.GetExecution().GetRunId()
	first, opID, err := c.startedRequest(ctx, workflowID, runID)
	switch {
	case err != nil:
		return nil, unanswered(ctx, "read the request of "+workflowID, workflowID, key, err)
	case opID != key:
		return nil, nil
	case !ours.Same(first):
		return nil, &RequestConflictError{Key: key, OpID: opID, WorkflowID: workflowID, RunID: runID, Differences: ours.Differences(first)}
	}
	return c.tc.GetWorkflow(ctx, workflowID, runID), nil
}

// startedRequest reads the request a run was started with (its first event's input) and
// its operation id (the workflow id when the input names none; "" for a cleanup that
// names none).
func (c *Client) startedRequest(ctx context.Context, workflowID, runID string) (workflows.Request, string, error) {
	name, p, err := c.startInput(ctx, workflowID, runID)
	if err != nil {
		return workflows.Request{}, "", err
	}
	var (
		req  workflows.Request
		opID string
	)
	switch name {
	case workflows.WriteTableName:
		req, opID, err = decodeRequest(p, func(in workflows.WriteTableInput) string { return in.OpID })
	case workflows.InitGraphName:
		req, opID, err = decodeRequest(p, func(in workflows.InitGraphInput) string { return in.OpID })
	case workflows.CreateBranchName:
		req, opID, err = decodeRequest(p, func(in workflows.CreateBranchInput) string { return in.OpID })
	case workflows.MergeName:
		req, opID, err = decodeRequest(p, func(in workflows.MergeInput) string { return in.OpID })
	case workflows.RestoreName:
		req, opID, err = decodeRequest(p, func(in workflows.RestoreInput) string { return in.OpID })
	case workflows.CreateTagName:
		req, opID, err = decodeRequest(p, func(in workflows.CreateTagInput) string { return in.OpID })
	case workflows.DeleteTagName:
		req, opID, err = decodeRequest(p, func(in workflows.DeleteTagInput) string { return in.OpID })
	case workflows.DeleteBranchName:
		req, opID, err = decodeRequest(p, func(in workflows.DeleteBranchInput) string { return in.OpID })
	case workflows.RepairBranchName:
		req, opID, err = decodeRequest(p, func(in workflows.RepairBranchInput) string { return in.OpID })
	case workflows.CleanupName:
		req, opID, err = decodeRequest(p, func(in workflows.CleanupInput) string { return in.RunID })
		return req, opID, err
	default:
		// Another workflow type under a graft workflow id: never the same request.
		return workflows.Request{Workflow: name}, workflowID, nil
	}
	if opID == "" {
		opID = workflowID
	}
	return req, opID, err
}

func decodeRequest[T interface{ Request() workflows.Request }](p *commonpb.Payload, opID func(T) string) (workflows.Request, string, error) {
	var in T
	if err := converter.GetDefaultDataConverter().FromPayload(p, &in); err != nil {
		return workflows.Request{}, "", fmt.Errorf("decode the run's input: %w", err)
	}
	return in.Request(), opID(in), nil
}

// startInput reads a run's workflow type and input from its first event, bounded by
// Options.QueryTimeout.
func (c *Client) startInput(ctx context.Context, workflowID, runID string) (string, *commonpb.Payload, error) {
	dctx, cancel := context.WithTimeout(ctx, c.opts.QueryTimeout)
	defer cancel()
	it := c.tc.GetWorkflowHistory(dctx, workflowID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	if !it.HasNext() {
		return "", nil, errors.New("no history")
	}
	ev, err := it.Next()
	if err != nil {
		return "", nil, err
	}
	attrs := ev.GetWorkflowExecutionStartedEventAttributes()
	if attrs == nil || len(attrs.GetInput().GetPayloads()) == 0 {
		return "", nil, errors.New("no start input")
	}
	return attrs.GetWorkflowType().GetName(), attrs.GetInput().GetPayloads()[0], nil
}
