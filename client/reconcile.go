package client

import (
	"context"
	"encoding/json"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/graftworks/graft/client/outcome"
)

// The reconciler: a workflow that finds ledger rows whose workflow closed
// without recording the operation's end (terminated, timed out, reset, lost)
// and settles each as its own workflow would have. The worker schedules it;
// Reconcile runs it once now.
const (
	// ReconcileWorkflowName is the reconciler's registered workflow type.
	ReconcileWorkflowName = "graft.Reconcile"
	// ReconcileWorkflowID is the id of an on-demand reconcile: one at a
	// time, and a second request attaches to the running one.
	ReconcileWorkflowID = "graft/reconcile"
)

// ReconcileRequest asks for one reconcile pass.
type ReconcileRequest struct {
	// Graph limits the pass to one graph. Defaults to "": every graph.
	Graph string `json:"graph,omitempty"`
}

// ReconcileResult is what a reconcile pass reports. Its fields are the ones
// every version of the reconciler reports; Raw is the whole result as the
// workflow returned it.
type ReconcileResult struct {
	Outcome outcome.Outcome `json:"outcome"`
	Message string          `json:"message,omitempty"`
	// Examined counts the unfinished rows looked at; Settled those settled.
	Examined int `json:"examined"`
	Settled  int `json:"settled"`
	// Raw is the workflow's result.
	Raw json.RawMessage `json:"-"`
}

// Validate checks the request without contacting anything.
func (r ReconcileRequest) Validate() error {
	if r.Graph == "" {
		return nil
	}
	return checkGraph(r.Graph)
}

// Reconcile runs one reconcile pass now (or attaches to the one running)
// and waits for its result.
func (c *Client) Reconcile(ctx context.Context, req ReconcileRequest) (ReconcileResult, error) {
	if err := req.Validate(); err != nil {
		return ReconcileResult{}, err
	}
	h, err := startOperation[json.RawMessage](ctx, c, operationStart{
		ID: ReconcileWorkflowID, Workflow: ReconcileWorkflowName, Input: req,
		Summary: "reconcile the ledger with Temporal", Graph: req.Graph,
		ReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
	})
	if err != nil {
		return ReconcileResult{}, err
	}
	h.outcome = func(json.RawMessage) (outcome.Outcome, string, string) { return outcome.Done, "", "" }
	raw, err := h.WaitFinal(ctx)
	if err != nil {
		return ReconcileResult{}, err
	}
	res := ReconcileResult{Raw: raw}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &res); err != nil {
			return res, fmt.Errorf("decode the reconcile result: %w", err)
		}
	}
	if res.Outcome != "" && !res.Outcome.Success() {
		return res, &outcome.Error{Outcome: res.Outcome, Message: res.Message}
	}
	return res, nil
}
