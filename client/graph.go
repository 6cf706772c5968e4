package client

import (
	"context"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	sdkclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/searchattr"
	"github.com/graftworks/graft/workflows"
)

// InitGraphRequest asks for a new graph.
type InitGraphRequest struct {
	Graph string
	// IdempotencyKey identifies the operation: an init repeated with the
	// same key (or attached to while it runs) finds its own graph and
	// succeeds. Defaults to the workflow id, InitGraphWorkflowID(Graph), so
	// a repeated init of one graph is idempotent.
	IdempotencyKey string
	// Author of main's root commit. Defaults to "graft".
	Author string
}

// InitGraphWorkflowID is the workflow id of an init of graph: one in-flight
// init per graph.
func InitGraphWorkflowID(graph string) string { return "graft/init-graph/" + graph }

// InitGraph creates a graph (main's root commit, main's ref, the graph
// record) and waits for the outcome. Done comes back with a nil error — with
// Created false when the graph was already there from the same operation;
// any other outcome is an *outcome.Error (conflict: the graph exists from
// another operation).
func (c *Client) InitGraph(ctx context.Context, req InitGraphRequest) (workflows.InitGraphResult, error) {
	if err := format.ValidateGraphName(req.Graph); err != nil {
		return workflows.InitGraphResult{}, outcome.Errorf(outcome.Invalid, "", "%v", err)
	}
	if req.IdempotencyKey != "" {
		if err := format.ValidateOp(req.IdempotencyKey); err != nil {
			return workflows.InitGraphResult{}, outcome.Errorf(outcome.Invalid, "", "idempotency key: %v", err)
		}
	}
	id := InitGraphWorkflowID(req.Graph)
	run, err := c.tc.ExecuteWorkflow(ctx, sdkclient.StartWorkflowOptions{
		ID:                       id,
		TaskQueue:                c.opts.TaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		EnableEagerStart:         c.opts.EagerStart,
		StaticSummary:            "init graph " + req.Graph,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			searchattr.Graph.ValueSet(req.Graph), searchattr.Operation.ValueSet("init_graph")),
	}, workflows.InitGraphName, workflows.InitGraphInput{Graph: req.Graph, OpID: req.IdempotencyKey, Author: req.Author})
	if err != nil {
		return workflows.InitGraphResult{}, fmt.Errorf("start init of %s: %w", req.Graph, err)
	}
	var res workflows.InitGraphResult
	if err := run.Get(ctx, &res); err != nil {
		return res, fmt.Errorf("init graph %s: %w", req.Graph, err)
	}
	return res, outcomeError(res.Outcome, res.OpID, res.Message)
}
