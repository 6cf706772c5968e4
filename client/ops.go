package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/api/serviceerror"
	sdkclient "go.temporal.io/sdk/client"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/workflows"
)

// Ops reads graft's operations from the ledger — the audit log every
// workflow writes — and waits on their workflows.
type Ops struct {
	cat *catalog.Catalog
	c   *Client
}

// NewOps returns Ops over the ledger. c is used by Wait to wait on an
// operation's workflow; with c nil, Wait polls the ledger instead.
func NewOps(cat *catalog.Catalog, c *Client) *Ops { return &Ops{cat: cat, c: c} }

// OpsFilter selects operations. Empty fields do not filter.
type OpsFilter struct {
	Graph string
	// Kind is an operation kind: create_branch, init_graph, write_table,
	// cleanup, merge, restore, delete_branch (branch repairs), tag.
	Kind string
	// State is running, in_doubt or done.
	State string
	// Limit caps the operations returned, newest first. Defaults to 100; at most 1000.
	Limit int
}

// List returns the operations matching f, newest first. A bad filter is an
// *outcome.Error with outcome invalid.
func (o *Ops) List(ctx context.Context, f OpsFilter) ([]catalog.Operation, error) {
	if f.Kind != "" && !slices.Contains(catalog.OperationKinds, catalog.OperationKind(f.Kind)) {
		return nil, outcome.Errorf(outcome.Invalid, "", "unknown operation kind %q; one of %v", f.Kind, catalog.OperationKinds)
	}
	states := []catalog.OperationState{catalog.OperationRunning, catalog.OperationInDoubt, catalog.OperationDone}
	if f.State != "" && !slices.Contains(states, catalog.OperationState(f.State)) {
		return nil, outcome.Errorf(outcome.Invalid, "", "unknown operation state %q; one of %v", f.State, states)
	}
	ops, err := o.cat.OperationList(ctx, catalog.OperationListParams{
		Graph: f.Graph, Kind: catalog.OperationKind(f.Kind), State: catalog.OperationState(f.State), Limit: f.Limit,
	})
	if errors.Is(err, catalog.ErrInvalid) {
		return nil, outcome.Errorf(outcome.Invalid, "", "%v", err)
	}
	if err != nil {
		return nil, fmt.Errorf("list operations: %w", err)
	}
	return ops, nil
}

// Show returns one operation; an unknown id is an *outcome.Error with
// outcome not_found.
func (o *Ops) Show(ctx context.Context, id string) (catalog.Operation, error) {
	op, err := o.cat.OperationGet(ctx, catalog.OperationGetParams{ID: id})
	if errors.Is(err, catalog.ErrNotFound) {
		return op, outcome.Errorf(outcome.NotFound, "", "operation %q does not exist; list operations with `graft op list`", id)
	}
	if err != nil {
		return op, fmt.Errorf("show operation %s: %w", id, err)
	}
	return op, nil
}

// Wait waits until the operation's workflow (named by its ledger row)
// completes — through any in-doubt settling — and returns the operation's
// ledger row then. An operation already done returns at once. Without a
// workflow to wait on it polls the ledger until the operation is done.
func (o *Ops) Wait(ctx context.Context, id string) (catalog.Operation, error) {
	op, err := o.Show(ctx, id)
	if err != nil || op.State == catalog.OperationDone {
		return op, err
	}
	if o.c != nil && op.WorkflowID != "" {
		werr := o.c.tc.GetWorkflow(ctx, op.WorkflowID, op.RunID).Get(ctx, nil)
		if ctx.Err() != nil {
			return op, ctx.Err()
		}
		if op, err = o.Show(ctx, id); err != nil || op.State == catalog.OperationDone {
			return op, err
		}
		var nf *serviceerror.NotFound
		if errors.As(werr, &nf) {
			return op, fmt.Errorf("operation %s is %s, and its workflow %s no longer exists", id, op.State, op.WorkflowID)
		}
		if werr != nil {
			return op, fmt.Errorf("operation %s is %s: its workflow %s failed: %w", id, op.State, op.WorkflowID, werr)
		}
		return op, fmt.Errorf("operation %s is %s although its workflow %s completed", id, op.State, op.WorkflowID)
	}
	interval := time.Second
	if o.c != nil {
		interval = o.c.opts.PollInterval
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for op.State != catalog.OperationDone {
		select {
		case <-ctx.Done():
			return op, ctx.Err()
		case <-tick.C:
		}
		if op, err = o.Show(ctx, id); err != nil {
			return op, err
		}
	}
	return op, nil
}

// outcomeError is nil for a successful outcome (created, done) and an
// *outcome.Error for any other.
func outcomeError(o outcome.Outcome, opID, message string) error {
	if o == outcome.Created || o == outcome.Done {
		return nil
	}
	return &outcome.Error{Outcome: o, OpID: opID, Message: message}
}

// waitOrInDoubt waits for run's result (into res), asking the workflow's
// graft.status query every PollInterval whether it is in doubt. It returns
// the status as soon as inDoubt accepts it, and nil once the result is in.
func waitOrInDoubt[S any](ctx context.Context, c *Client, run sdkclient.WorkflowRun, workflowID string, res any, inDoubt func(*S) bool) (*S, error) {
	for {
		gctx, cancel := context.WithTimeout(ctx, c.opts.PollInterval)
		err := run.Get(gctx, res)
		cancel()
		if err == nil {
			return nil, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if gctx.Err() == nil { // the poll did not merely time out: the workflow failed
			return nil, err
		}
		v, err := c.tc.QueryWorkflow(ctx, workflowID, run.GetRunID(), workflows.StatusQueryName)
		if err != nil {
			continue // a query can race the workflow's completion; Get answers next
		}
		var st S
		if v.Get(&st) == nil && inDoubt(&st) {
			return &st, nil
		}
	}
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
