package client

import (
	"context"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/graftworks/graft/workflows"
)

// DeleteBranchRequest asks to delete a branch.
type DeleteBranchRequest struct {
	Graph, Branch string
	// Force deletes the branch although live tags name commits of it (the tags keep those
	// commits). main is never deleted.
	Force          bool
	IdempotencyKey string
}

// DeleteBranchWorkflowID is the workflow id of a delete: one in flight per branch name.
func DeleteBranchWorkflowID(graph, branch string) string {
	return "graft/delete-branch/" + graph + "/" + branch
}

// DeleteBranchHandle is a started branch delete.
type DeleteBranchHandle = OperationHandle[workflows.DeleteBranchResult]

// DeleteBranch deletes req.Branch through graft.DeleteBranch — its live ref retired by
// compare-and-swap into a fence — and waits for the outcome: deleted with a nil error;
// invalid for main; conflict for a branch live tags name (unless Force); in doubt as
// OperationHandle.Wait says.
func (c *Client) DeleteBranch(ctx context.Context, req DeleteBranchRequest) (workflows.DeleteBranchResult, error) {
	h, err := c.StartDeleteBranch(ctx, req)
	return startWait(ctx, h, err, false)
}

// StartDeleteBranch starts (or attaches to) a branch delete and returns at once.
func (c *Client) StartDeleteBranch(ctx context.Context, req DeleteBranchRequest) (*DeleteBranchHandle, error) {
	key := keyOrNew(req.IdempotencyKey)
	in := workflows.DeleteBranchInput{Graph: req.Graph, Branch: req.Branch, Force: req.Force, OpID: key}
	return startOperation(ctx, c, operationStart{
		Check: req.Validate(), Kind: "delete_branch",
		ID: DeleteBranchWorkflowID(req.Graph, req.Branch), Workflow: workflows.DeleteBranchName, Input: in,
		Summary: fmt.Sprintf("delete branch %s in %s", req.Branch, req.Graph), Graph: req.Graph, Branch: req.Branch, OpID: key,
		ReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE, Finished: req.IdempotencyKey != "",
	}, workflows.DeleteBranchResult{Graph: req.Graph, Branch: req.Branch})
}
