// Package client is graft's typed Go client: one method per operation over a
// Temporal client. Mutating calls start a workflow, then wait for a
// definitive outcome — or return as soon as the outcome is in doubt, with the
// operation id to watch. Outcomes other than success are *outcome.Error
// values that match outcome.ErrConflict, outcome.ErrInDoubt, … with errors.Is.
//
// A request attaches to an operation it finds — under its idempotency key, or
// under the workflow id of an operation that runs once per name (a create of
// a branch, a cleanup of a graph) — only when that operation's own input
// holds the same canonical request (workflows.Request), whichever SDK started
// it. Any other request is a *RequestConflictError and nothing is uploaded or
// started for it: a result is never another request's. Repeating a request
// after an *UnansweredError with its OpID attaches (docs/outcomes.md). A request's
// IdempotencyKey is its operation id; it defaults to a fresh ULID. An ExpectedHead, when
// set, makes the request a conflict unless the branch's head is that commit id.
package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	sdkclient "go.temporal.io/sdk/client"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/workflows"
)

// Options configure a Client.
type Options struct {
	// TaskQueue graft's workers poll. Defaults to "graft".
	TaskQueue string
	// EagerStart hands a new workflow's first task straight to a worker in this process
	// (one that runs a graft worker on the same Temporal client), saving a round trip.
	EagerStart bool
	// PollInterval is the first pause between the status queries of a wait (is the
	// operation in doubt?); it doubles up to 5s. Defaults to 1s.
	PollInterval time.Duration
	// QueryTimeout bounds every status query and description: a workflow whose task is
	// held (a step retrying) cannot answer, and a wait must not hang on it. Defaults to 5s.
	QueryTimeout time.Duration
	// Notify, when set, is told from the waiting goroutine why a wait is taking long
	// (Notice), at most once per reason and wait.
	Notify func(Notice)
}

// Client starts and watches graft operations.
type Client struct {
	tc   sdkclient.Client
	opts Options
}

// New returns a Client over an existing Temporal client.
func New(tc sdkclient.Client, o Options) *Client {
	o.TaskQueue = cmp.Or(o.TaskQueue, "graft")
	if o.PollInterval <= 0 {
		o.PollInterval = time.Second
	}
	if o.QueryTimeout <= 0 {
		o.QueryTimeout = 5 * time.Second
	}
	return &Client{tc: tc, opts: o}
}

// CreateBranchRequest asks for a new branch.
type CreateBranchRequest struct {
	Graph  string
	Branch string
	// At most one source; all empty means the head of main.
	FromBranch, FromCommit, FromTag string
	Author, Message                 string
	IdempotencyKey                  string
}

// CreateBranchWorkflowID is the workflow id of a create: one in flight per branch name.
func CreateBranchWorkflowID(graph, branch string) string {
	return "graft/create-branch/" + graph + "/" + branch
}

// Handle is a started create.
type Handle struct {
	*OperationHandle[workflows.CreateBranchResult]
}

// StartCreateBranch starts (or attaches to) the create of req.Branch and returns at once.
func (c *Client) StartCreateBranch(ctx context.Context, req CreateBranchRequest) (*Handle, error) {
	opID := keyOrNew(req.IdempotencyKey)
	in := workflows.CreateBranchInput{
		Graph: req.Graph, Branch: req.Branch,
		Source: workflows.Source{Branch: req.FromBranch, Commit: req.FromCommit, Tag: req.FromTag},
		OpID:   opID, Author: req.Author, Message: req.Message,
	}
	h, err := startOperation(ctx, c, operationStart{
		Check: req.Validate(), Kind: "create_branch", Wrap: "start create of " + req.Graph + "/" + req.Branch,
		ID: CreateBranchWorkflowID(req.Graph, req.Branch), Workflow: workflows.CreateBranchName, Input: in,
		Summary: fmt.Sprintf("create branch %s in %s", req.Branch, req.Graph), Graph: req.Graph, Branch: req.Branch, OpID: opID,
		ReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE, Finished: req.IdempotencyKey != "",
	}, workflows.CreateBranchResult{Graph: req.Graph, Branch: req.Branch})
	if err != nil {
		return nil, err
	}
	return &Handle{h}, nil
}

// AttachCreateBranch returns a handle on the create of (graph, branch) that is running,
// or that ran last.
func (c *Client) AttachCreateBranch(ctx context.Context, graph, branch string) *Handle {
	id := CreateBranchWorkflowID(graph, branch)
	run := c.tc.GetWorkflow(ctx, id, "")
	return &Handle{&OperationHandle[workflows.CreateBranchResult]{c: c, WorkflowID: id, RunID: run.GetRunID(), run: run,
		fromStatus: inDoubtResult(workflows.CreateBranchResult{Graph: graph, Branch: branch})}}
}

// CreateBranch creates a branch and waits for its outcome (OperationHandle.Wait).
func (c *Client) CreateBranch(ctx context.Context, req CreateBranchRequest) (workflows.CreateBranchResult, error) {
	h, err := c.StartCreateBranch(ctx, req)
	if err != nil {
		return workflows.CreateBranchResult{}, err
	}
	return h.Wait(ctx)
}

// WaitCreateBranch is Wait.
func (h *Handle) WaitCreateBranch(ctx context.Context) (workflows.CreateBranchResult, error) {
	return h.Wait(ctx)
}

// AbandonCreate asks an in-doubt create of (graph, branch) to settle by fencing its ref
// key instead of waiting for the put to land.
func (c *Client) AbandonCreate(ctx context.Context, graph, branch, reason string) error {
	id := CreateBranchWorkflowID(graph, branch)
	err := c.tc.SignalWorkflow(ctx, id, "", workflows.AbandonSignalName, workflows.AbandonRequest{Reason: reason})
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &nf):
		return outcome.Errorf(outcome.NotFound, "", "no create of %s/%s is running", graph, branch)
	case err != nil:
		return unanswered(ctx, fmt.Sprintf("signal abandon to the create of %s/%s", graph, branch), id, "", err)
	}
	return nil
}
