package client

import (
	"cmp"
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

// RequestConflictError is a request whose idempotency key (or, for an operation that runs
// once per name, whose workflow id) names an operation started for a different request.
// It is not attached, so that operation's result is never reported as its own; it was not
// started, and a table write uploaded nothing for it. It unwraps to an *outcome.Error
// with outcome conflict and the first operation's id.
type RequestConflictError struct {
	// Key is the idempotency key the request gave.
	Key string
	// OpID is the operation found, WorkflowID and RunID its run.
	OpID, WorkflowID, RunID string
	// Differences names each field in which this request differs from the first.
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
// when its own input holds the request ours (so a run any SDK started compares too), and
// a *RequestConflictError when not. With onlyKey, a run of another operation than key is
// neither: it returns nil.
func (c *Client) attachSame(ctx context.Context, workflowID, runID, key string, ours workflows.Request, onlyKey bool) (sdkclient.WorkflowRun, string, error) {
	first, opID, err := c.startedRequest(ctx, workflowID, runID)
	switch {
	case err != nil:
		return nil, "", unanswered(ctx, "read the request of "+workflowID, workflowID, key, err)
	case onlyKey && opID != key:
		return nil, "", nil
	case !ours.Same(first):
		return nil, "", &RequestConflictError{Key: key, OpID: opID, WorkflowID: workflowID, RunID: runID, Differences: ours.Differences(first)}
	}
	return c.tc.GetWorkflow(ctx, workflowID, runID), opID, nil
}

// lookupSame looks up the latest run of workflowID and returns it if it is the request
// ours, and a *RequestConflictError if not; nil when there is none. With finished, only a
// run that ended — completed, or failed with its outcome — under operation key counts:
// otherwise (one still going — the start meets it — another operation's, or one
// terminated, cancelled or timed out, whose row the reconciler finishes) it returns nil.
func (c *Client) lookupSame(ctx context.Context, workflowID, key string, finished bool, ours func() (workflows.Request, error)) (sdkclient.WorkflowRun, error) {
	desc, err := c.tc.DescribeWorkflowExecution(ctx, workflowID, "")
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &nf):
		return nil, nil
	case err != nil:
		return nil, unanswered(ctx, "look up "+workflowID, workflowID, key, err)
	}
	info := desc.GetWorkflowExecutionInfo()
	if st := info.GetStatus(); finished && st != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED && st != enumspb.WORKFLOW_EXECUTION_STATUS_FAILED {
		return nil, nil
	}
	req, err := ours()
	if err != nil {
		return nil, err
	}
	run, _, err := c.attachSame(ctx, workflowID, info.GetExecution().GetRunId(), key, req, finished)
	return run, err
}

// startedRequest reads the request a run was started with (its first event's input) and
// its operation id (the workflow id when the input names none; "" for a cleanup).
func (c *Client) startedRequest(ctx context.Context, workflowID, runID string) (workflows.Request, string, error) {
	name, p, err := c.startInput(ctx, workflowID, runID)
	if err != nil {
		return workflows.Request{}, "", err
	}
	decode, ok := inputRequests[name]
	if !ok {
		// Another workflow type under a graft workflow id: never the same request.
		return workflows.Request{Workflow: name}, workflowID, nil
	}
	req, err := decode(p)
	if err != nil {
		return workflows.Request{}, "", fmt.Errorf("decode the run's input: %w", err)
	}
	var ids struct {
		OpID  string `json:"op_id"`
		RunID string `json:"run_id"` // a cleanup's operation id
	}
	if err := converter.GetDefaultDataConverter().FromPayload(p, &ids); err != nil {
		return workflows.Request{}, "", fmt.Errorf("decode the run's input: %w", err)
	}
	if name == workflows.CleanupName {
		return req, ids.RunID, nil
	}
	return req, cmp.Or(ids.OpID, workflowID), nil
}

// inputRequests decode each graft workflow's input into its canonical request.
var inputRequests = map[string]func(*commonpb.Payload) (workflows.Request, error){
	workflows.WriteTableName:   decodeRequest[workflows.WriteTableInput],
	workflows.InitGraphName:    decodeRequest[workflows.InitGraphInput],
	workflows.CreateBranchName: decodeRequest[workflows.CreateBranchInput],
	workflows.MergeName:        decodeRequest[workflows.MergeInput],
	workflows.RestoreName:      decodeRequest[workflows.RestoreInput],
	workflows.CreateTagName:    decodeRequest[workflows.CreateTagInput],
	workflows.DeleteTagName:    decodeRequest[workflows.DeleteTagInput],
	workflows.DeleteBranchName: decodeRequest[workflows.DeleteBranchInput],
	workflows.RepairBranchName: decodeRequest[workflows.RepairBranchInput],
	workflows.CleanupName:      decodeRequest[workflows.CleanupInput],
}

func decodeRequest[T interface{ Request() workflows.Request }](p *commonpb.Payload) (workflows.Request, error) {
	var in T
	err := converter.GetDefaultDataConverter().FromPayload(p, &in)
	return in.Request(), err
}

// startInput reads a run's workflow type and input from its first event.
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
