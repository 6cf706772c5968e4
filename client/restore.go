package client

import (
	"cmp"
	"context"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/graftworks/graft/workflows"
)

// RestoreRequest asks to give Branch back the table versions of an earlier commit, named
// by id (ToCommit) or by a tag (ToTag): exactly one.
type RestoreRequest struct {
	Graph, Branch   string
	ToCommit, ToTag string
	ExpectedHead    string
	// NoBackup skips the backup tag of the pre-restore head, otherwise tagged
	// "backup/{branch}/{head}" first, or BackupTag when set.
	NoBackup        bool
	BackupTag       string
	Author, Message string
	IdempotencyKey  string
}

// RestoreWorkflowID is the workflow id of a restore of branch.
func RestoreWorkflowID(graph, branch, key string) string {
	return "graft/restore/" + graph + "/" + branch + "/" + key
}

// RestoreHandle is a started restore.
type RestoreHandle = OperationHandle[workflows.RestoreResult]

// Restore restores req.Branch through graft.Restore and waits for the outcome: done with
// a nil error; not_retained when cleanup reclaimed something the commit needs (nothing is
// written then); in doubt as OperationHandle.Wait says.
func (c *Client) Restore(ctx context.Context, req RestoreRequest) (workflows.RestoreResult, error) {
	h, err := c.StartRestore(ctx, req)
	return startWait(ctx, h, err, false)
}

// StartRestore starts (or attaches to) a restore and returns at once.
func (c *Client) StartRestore(ctx context.Context, req RestoreRequest) (*RestoreHandle, error) {
	key := keyOrNew(req.IdempotencyKey)
	in := workflows.RestoreInput{Graph: req.Graph, Branch: req.Branch, To: workflows.RestoreTarget{Commit: req.ToCommit, Tag: req.ToTag},
		ExpectedHead: req.ExpectedHead, NoBackup: req.NoBackup, BackupTag: req.BackupTag, OpID: key, Author: req.Author, Message: req.Message}
	to := cmp.Or(req.ToCommit, "tag "+req.ToTag)
	return startOperation(ctx, c, operationStart{
		Check: req.Validate(), Kind: "restore",
		ID: RestoreWorkflowID(req.Graph, req.Branch, key), Workflow: workflows.RestoreName, Input: in,
		Summary: fmt.Sprintf("restore %s in %s to %s", req.Branch, req.Graph, to), Graph: req.Graph, Branch: req.Branch, OpID: key,
		ReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
	}, workflows.RestoreResult{Graph: req.Graph, Branch: req.Branch})
}
