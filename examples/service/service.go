// Package service is an example of a service that lives in its own Go module and drives
// graft only through its public client (github.com/graftworks/graft/client and
// client/outcome): it opens feature branches, tells a branch that is there already from
// one still settling, follows a settling operation to its end through the ledger, and
// lists what it did. Its test runs it against a real stack: `graft dev` on an S3 server.
package service

import (
	"context"
	"errors"
	"fmt"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
)

// Features opens and follows feature branches of one graph.
type Features struct {
	Client *client.Client
	Ops    *client.Ops
	Graph  string
}

// ErrExists reports a feature branch that is live already.
var ErrExists = errors.New("feature branch exists")

// Opened is a feature branch the service asked for.
type Opened struct {
	Branch string
	// Native is the branch's live incarnation, "" while Settling.
	Native string
	// Settling is set when the create's ref put answered ambiguously: OpID is then the
	// operation to follow with Settle.
	Settling bool
	OpID     string
}

// Open creates feature/NAME from main. A branch that is live already is ErrExists (it
// matches outcome.ErrConflict too); a create still settling comes back Settling with its
// operation id, not as an error.
func (f *Features) Open(ctx context.Context, name string) (Opened, error) {
	branch := "feature/" + name
	res, err := f.Client.CreateBranch(ctx, client.CreateBranchRequest{Graph: f.Graph, Branch: branch, Author: "features-service"})
	switch {
	case err == nil:
		return Opened{Branch: branch, Native: res.Native, OpID: res.OpID}, nil
	case errors.Is(err, outcome.ErrInDoubt):
		var oe *outcome.Error
		errors.As(err, &oe)
		return Opened{Branch: branch, Settling: true, OpID: oe.OpID}, nil
	case errors.Is(err, outcome.ErrConflict):
		return Opened{Branch: branch}, fmt.Errorf("%w: %w", ErrExists, err)
	}
	return Opened{Branch: branch}, err
}

// Settle waits for an operation to end, through any settling, and returns its outcome.
func (f *Features) Settle(ctx context.Context, opID string) (outcome.Outcome, error) {
	op, err := f.Ops.Wait(ctx, opID)
	if err != nil {
		return "", err
	}
	return op.Outcome, nil
}

// Recent lists the graph's operations, newest first.
func (f *Features) Recent(ctx context.Context) ([]client.Operation, error) {
	return f.Ops.List(ctx, client.OpsFilter{Graph: f.Graph})
}
