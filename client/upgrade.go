package client

import (
	"context"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/workflows"
)

// UpgradeGraphRequest asks for a format-1 graph to be upgraded to format 2
// (docs/format.md, *Upgrading a format-1 graph*; docs/operations.md).
type UpgradeGraphRequest struct {
	Graph string
	// IdempotencyKey identifies the operation: an upgrade repeated with the same
	// key (or attached to while it runs) finishes the same upgrade and reports
	// the same result. Defaults to the workflow id, UpgradeGraphWorkflowID(Graph).
	IdempotencyKey string
}

// Validate checks the request as graft.UpgradeGraph would, without contacting anything.
func (r UpgradeGraphRequest) Validate() error {
	return firstInvalid(checkGraph(r.Graph), checkKey(r.IdempotencyKey))
}

// UpgradeGraphWorkflowID is the workflow id of an upgrade of graph: one in-flight
// upgrade per graph.
func UpgradeGraphWorkflowID(graph string) string { return "graft/upgrade-graph/" + graph }

// StartUpgradeGraph starts (or attaches to) the upgrade of a graph.
func (c *Client) StartUpgradeGraph(ctx context.Context, req UpgradeGraphRequest) (*OperationHandle[workflows.UpgradeGraphResult], error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	opID := req.IdempotencyKey
	if opID == "" {
		opID = UpgradeGraphWorkflowID(req.Graph)
	}
	h, err := startOperation[workflows.UpgradeGraphResult](ctx, c, operationStart{
		Kind: "upgrade_graph",
		ID:   UpgradeGraphWorkflowID(req.Graph), Workflow: workflows.UpgradeGraphName,
		Input:   workflows.UpgradeGraphInput{Graph: req.Graph, OpID: req.IdempotencyKey},
		Summary: "upgrade graph " + req.Graph, Graph: req.Graph, OpID: opID,
		ReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
	})
	if err != nil {
		return nil, fmt.Errorf("start upgrade of %s: %w", req.Graph, err)
	}
	h.outcome = func(r workflows.UpgradeGraphResult) (outcome.Outcome, string, string) {
		return r.Outcome, r.OpID, r.Message
	}
	return h, nil
}

// UpgradeGraph upgrades a format-1 graph to format 2 and waits for the outcome.
// Done comes back with a nil error — also for a graph that was format 2 already
// (GraphRecord false); any other outcome is an *outcome.Error: not_found (no such
// graph), conflict (a format-1 operation is in flight on it; wait for it, then run
// the upgrade again), refused.
func (c *Client) UpgradeGraph(ctx context.Context, req UpgradeGraphRequest) (workflows.UpgradeGraphResult, error) {
	h, err := c.StartUpgradeGraph(ctx, req)
	if err != nil {
		return workflows.UpgradeGraphResult{}, err
	}
	return h.WaitFinal(ctx)
}
