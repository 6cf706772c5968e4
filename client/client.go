// Package client is graft's typed Go client for services: one method per
// operation over a Temporal client. Mutating calls start a workflow whose id
// makes a repeated request attach to the one in flight, then wait for a
// definitive outcome — or return as soon as the outcome is known to be in
// doubt, with the operation id to watch. Outcomes other than success are
// *outcome.Error values that match outcome.ErrConflict, outcome.ErrInDoubt, …
// with errors.Is.
package client

import (
	"context"
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

// Options configure a Client.
type Options struct {
	// TaskQueue graft's workers poll. Defaults to "graft".
	TaskQueue string
	// EagerStart asks the server to hand a new workflow's first task straight
	// to a worker in this process, saving a matching round trip. Only useful
	// when this process also runs a graft worker on the same Temporal client.
	// Defaults to false.
	EagerStart bool
	// PollInterval is how often Wait checks whether a running operation is in
	// doubt. Defaults to 1s.
	PollInterval time.Duration
}

// Client starts and watches graft operations.
type Client struct {
	tc   sdkclient.Client
	opts Options
}

// New returns a Client over an existing Temporal client.
func New(tc sdkclient.Client, o Options) *Client {
	if o.TaskQueue == "" {
		o.TaskQueue = "graft"
	}
	if o.PollInterval <= 0 {
		o.PollInterval = time.Second
	}
	return &Client{tc: endShapeClient{tc}, opts: o}
}

// Temporal returns the underlying Temporal client.
func (c *Client) Temporal() sdkclient.Client { return c.tc }

// CreateBranchRequest asks for a new branch.
type CreateBranchRequest struct {
	Graph  string
	Branch string
	// At most one source; all empty means the head of main.
	FromBranch, FromCommit, FromTag string
	Author, Message                 string
	// IdempotencyKey identifies the operation; repeating a request with the
	// same key while it runs attaches to it. Defaults to a fresh ULID.
	IdempotencyKey string
}

// CreateBranchWorkflowID is the workflow id of a create of (graph, branch):
// one in-flight create per logical name.
func CreateBranchWorkflowID(graph, branch string) string {
	return "graft/create-branch/" + graph + "/" + branch
}

// Handle is a started operation.
type Handle struct {
	c          *Client
	WorkflowID string
	RunID      string
	run        sdkclient.WorkflowRun
}

// StartCreateBranch starts (or attaches to) the create of req.Branch and returns at once.
func (c *Client) StartCreateBranch(ctx context.Context, req CreateBranchRequest) (*Handle, error) {
	opID := req.IdempotencyKey
	if opID == "" {
		opID = ulid.Make().String()
	}
	in := workflows.CreateBranchInput{
		Graph: req.Graph, Branch: req.Branch,
		Source: workflows.Source{Branch: req.FromBranch, Commit: req.FromCommit, Tag: req.FromTag},
		OpID:   opID, Author: req.Author, Message: req.Message,
	}
	id := CreateBranchWorkflowID(req.Graph, req.Branch)
	run, err := c.tc.ExecuteWorkflow(ctx, sdkclient.StartWorkflowOptions{
		ID:                       id,
		TaskQueue:                c.opts.TaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		EnableEagerStart:         c.opts.EagerStart,
		StaticSummary:            fmt.Sprintf("create branch %s in %s", req.Branch, req.Graph),
		TypedSearchAttributes: temporal.NewSearchAttributes(
			searchattr.Graph.ValueSet(req.Graph), searchattr.Branch.ValueSet(req.Branch),
			searchattr.Operation.ValueSet("create_branch")),
	}, workflows.CreateBranchName, in)
	if err != nil {
		return nil, fmt.Errorf("start create of %s/%s: %w", req.Graph, req.Branch, err)
	}
	return &Handle{c: c, WorkflowID: run.GetID(), RunID: run.GetRunID(), run: run}, nil
}

// CreateBranch creates a branch and waits for its outcome. A result other
// than created comes with an *outcome.Error; in_doubt returns as soon as the
// create is known to be settling, with the operation id in the error.
func (c *Client) CreateBranch(ctx context.Context, req CreateBranchRequest) (workflows.CreateBranchResult, error) {
	h, err := c.StartCreateBranch(ctx, req)
	if err != nil {
		return workflows.CreateBranchResult{}, err
	}
	return h.WaitCreateBranch(ctx)
}

// WaitCreateBranch waits for the create's definitive outcome, or for it to be in doubt.
func (h *Handle) WaitCreateBranch(ctx context.Context) (workflows.CreateBranchResult, error) {
	for {
		var res workflows.CreateBranchResult
		gctx, cancel := context.WithTimeout(ctx, h.c.opts.PollInterval)
		err := h.run.Get(gctx, &res)
		cancel()
		if err == nil {
			return res, resultError(res)
		}
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		if gctx.Err() == nil { // the poll did not merely time out: the workflow failed
			return res, fmt.Errorf("create branch: %w", err)
		}
		st, err := h.c.CreateBranchStatus(ctx, h.WorkflowID)
		if err != nil {
			continue // a query can race the workflow's completion; Get answers next
		}
		if st.Outcome == outcome.InDoubt {
			res = workflows.CreateBranchResult{Outcome: outcome.InDoubt, OpID: st.OpID, Native: st.Native, Message: st.Pending}
			return res, resultError(res)
		}
	}
}

// WaitFinal waits for the create's definitive outcome, even through a long
// settle (in_doubt is never returned).
func (h *Handle) WaitFinal(ctx context.Context) (workflows.CreateBranchResult, error) {
	var res workflows.CreateBranchResult
	if err := h.run.Get(ctx, &res); err != nil {
		return res, fmt.Errorf("create branch: %w", err)
	}
	return res, resultError(res)
}

// CreateBranchStatus asks a running create which phase it is in.
func (c *Client) CreateBranchStatus(ctx context.Context, workflowID string) (workflows.CreateBranchStatus, error) {
	var st workflows.CreateBranchStatus
	v, err := c.tc.QueryWorkflow(ctx, workflowID, "", workflows.StatusQueryName)
	if err != nil {
		return st, fmt.Errorf("query %s: %w", workflowID, err)
	}
	return st, v.Get(&st)
}

// AbandonCreate asks an in-doubt create of (graph, branch) to settle by
// fencing its ref key instead of waiting for the put to land.
func (c *Client) AbandonCreate(ctx context.Context, graph, branch, reason string) error {
	id := CreateBranchWorkflowID(graph, branch)
	err := c.tc.SignalWorkflow(ctx, id, "", workflows.AbandonSignalName, workflows.AbandonRequest{Reason: reason})
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return outcome.Errorf(outcome.NotFound, "", "no create of %s/%s is running", graph, branch)
	}
	return err
}

func resultError(res workflows.CreateBranchResult) error {
	if res.Outcome == outcome.Created || res.Outcome == outcome.Done {
		return nil
	}
	return &outcome.Error{Outcome: res.Outcome, OpID: res.OpID, Message: res.Message}
}
