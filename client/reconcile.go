package client

import (
	"context"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/graftworks/graft/workflows"
)

// The reconciler settles ledger rows whose workflow closed without recording the
// operation's end (terminated, timed out, reset, lost) as that workflow would have. The
// worker schedules it; Reconcile runs it once now, one at a time (a second request attaches).
const (
	ReconcileWorkflowName = workflows.ReconcileName
	ReconcileWorkflowID   = workflows.ReconcileWorkflowID
)

// ReconcileRequest asks for one reconcile pass.
type ReconcileRequest struct {
	// Graph limits the pass to one graph. Defaults to "": every graph.
	Graph string `json:"graph,omitempty"`
}

// ReconcileResult is what a reconcile pass reports.
type ReconcileResult = workflows.ReconcileResult

// Validate checks the request without contacting anything.
func (r ReconcileRequest) Validate() error {
	if r.Graph != "" {
		return checkGraph(r.Graph)
	}
	return nil
}

// Reconcile runs one reconcile pass now (or attaches to the one running) and waits for it.
func (c *Client) Reconcile(ctx context.Context, req ReconcileRequest) (ReconcileResult, error) {
	h, err := startOperation(ctx, c, operationStart{Check: req.Validate(),
		ID: ReconcileWorkflowID, Workflow: ReconcileWorkflowName, Input: workflows.ReconcileInput{Graph: req.Graph},
		Summary: "reconcile the ledger with Temporal", Graph: req.Graph,
		ReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
	}, ReconcileResult{})
	return startWait(ctx, h, err, true)
}
