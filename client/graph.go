package client

import (
	"cmp"
	"context"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/graftworks/graft/workflows"
)

// InitGraphRequest asks for a new graph.
type InitGraphRequest struct {
	Graph string
	// IdempotencyKey identifies the operation: the same init under it finds its own graph
	// and succeeds; another request is a conflict. Defaults to InitGraphWorkflowID(Graph),
	// so a repeated init of a graph is idempotent.
	IdempotencyKey string
	// Author of main's root commit. Defaults to "graft".
	Author string
}

// InitGraphWorkflowID is the workflow id of an init of graph: one in flight per graph.
func InitGraphWorkflowID(graph string) string { return "graft/init-graph/" + graph }

// InitGraph creates a graph (main's root commit, main's ref, the graph record) and waits
// for the outcome: done with a nil error — Created false when the same operation made it
// already; conflict when another did.
func (c *Client) InitGraph(ctx context.Context, req InitGraphRequest) (workflows.InitGraphResult, error) {
	in := workflows.InitGraphInput{Graph: req.Graph, OpID: req.IdempotencyKey, Author: req.Author}
	h, err := startOperation(ctx, c, operationStart{
		Check: req.Validate(), Wrap: "start init of " + req.Graph, Kind: "init_graph",
		ID: InitGraphWorkflowID(req.Graph), Workflow: workflows.InitGraphName, Input: in,
		Summary: "init graph " + req.Graph, Graph: req.Graph, OpID: cmp.Or(req.IdempotencyKey, InitGraphWorkflowID(req.Graph)),
		ReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
	}, workflows.InitGraphResult{})
	return startWait(ctx, h, err, true)
}
