package activities

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
)

// PrepareDeleteBranchInput is the input of PrepareDeleteBranch.
type PrepareDeleteBranchInput struct {
	OpID, Graph, Branch string
	// Force deletes a branch even though live tags name commits of its tree (never main).
	Force             bool
	WorkflowID, RunID string // the workflow's; RunID claims the ledger row
}

// PrepareDeleteBranchResult is the ref to retire, or the outcome that ends the delete.
type PrepareDeleteBranchResult struct {
	Outcome outcome.Outcome
	Message string
	Owned   bool // the ledger row is this run's: the kernel finishes it
	// Native names the live ref, and Spec the compare-and-swap that retires it.
	Native  string
	Spec    WriteSpec
	Head    string   // the branch's head when it was read
	Tags    []string // the live tags naming commits of the branch's tree
	Retired bool     // this operation retired the branch already (a repeated request)
	// PendingRecorded: Spec is recorded as the pending write (WriteInput.PendingRecorded).
	PendingRecorded bool `json:",omitempty"`
}

// readDeleteTarget finds the live ref a delete retires: the ref of the ledger's open
// incarnation of the name (one GET) when it is live, else every ref of the name, which also
// finds a ref this operation retired (retiredBy). The hint is used only while the operation
// has no pending write (it cannot have retired anything), so a repeated delete never
// retires a later create's ref.
func (a *Activities) readDeleteTarget(ctx context.Context, op catalog.Operation, graphName, logical string) (live []graph.Incarnation, retiredBy string, refs graph.NameRefs, err error) {
	if len(op.Pending) == 0 {
		w, ok, err := a.openIncarnation(ctx, graphName, logical)
		if err != nil {
			return nil, "", graph.NameRefs{}, err
		}
		if ok {
			b, isLive, err := graph.ReadLiveRef(ctx, a.Store, graphName, logical, w.Native)
			if err != nil {
				return nil, "", graph.NameRefs{}, fmt.Errorf("read incarnations: %w", err)
			}
			if isLive {
				return []graph.Incarnation{{Native: b.Native, Ref: b.Ref, ETag: b.ETag}}, "", graph.NameRefs{}, nil
			}
		}
	}
	refs, err = graph.ReadBranchRefs(ctx, a.Store, graphName, logical)
	if err != nil {
		return nil, "", graph.NameRefs{}, fmt.Errorf("read incarnations: %w", err)
	}
	for _, inc := range refs.Incarnations {
		switch {
		case inc.Ref.State == format.RefLive:
			live = append(live, inc)
		case inc.Ref.State == format.RefRetired && inc.Ref.RetiredOp == op.ID:
			retiredBy = inc.Native
		}
	}
	return live, retiredBy, refs, nil
}

// PrepareDeleteBranch records a branch delete and decides whether it may go ahead: main
// never (invalid); a branch whose tree a live tag names only with Force (the tags keep
// those commits either way); a branch whose create is still settling, not yet (conflict).
func (a *Activities) PrepareDeleteBranch(ctx context.Context, in PrepareDeleteBranchInput) (PrepareDeleteBranchResult, error) {
	if err := firstError(format.ValidateGraphName(in.Graph), format.ValidateBranchName(in.Branch), format.ValidateOp(in.OpID)); err != nil {
		return PrepareDeleteBranchResult{Outcome: outcome.Invalid, Message: err.Error()}, nil
	}
	if in.Branch == graph.DefaultBranch {
		return PrepareDeleteBranchResult{Outcome: outcome.Invalid, Message: "main cannot be deleted: it is every graph's default branch"}, nil
	}
	rec := opRecord(catalog.OpDeleteBranch, in.OpID, in.Graph, in.WorkflowID, in.RunID, map[string]any{"action": "delete", "branch": in.Branch, "force": in.Force})
	// Decide from storage (reads only), then claim the operation and record the retire, if
	// any, as its pending write in one transaction.
	res, err := a.decideDelete(ctx, in)
	if err != nil {
		return PrepareDeleteBranchResult{}, err
	}
	pending := res.Outcome == "" && !res.Retired
	var c claimed
	err = a.Catalog.InTx(ctx, func(tx pgx.Tx) error {
		var err error
		if c, err = a.claim(ctx, tx, rec); err != nil || !c.owned {
			return err
		}
		if res.Retired {
			// An earlier run retired the ref but may have stopped before it recorded the
			// witness retired: record it now, or the ledger keeps the name live for good.
			_, err = a.retireWitnessTx(ctx, tx, in.Graph, res.Native)
			return err
		}
		if !pending {
			return nil
		}
		return a.recordPendingTx(ctx, tx, Owner{OpID: in.OpID, Run: in.RunID}, res.Spec)
	})
	switch {
	case err != nil:
		return PrepareDeleteBranchResult{}, err
	case !c.owned:
		return PrepareDeleteBranchResult{Outcome: c.outcome, Message: c.message}, nil
	}
	res.Owned, res.PendingRecorded = true, pending
	return res, nil
}

// decideDelete reads the name's refs, its live incarnation's witness and the graph's tags,
// and decides the retire to send, or the outcome that ends the delete. It writes nothing.
func (a *Activities) decideDelete(ctx context.Context, in PrepareDeleteBranchInput) (PrepareDeleteBranchResult, error) {
	var res PrepareDeleteBranchResult
	stop := func(o outcome.Outcome, f string, args ...any) (PrepareDeleteBranchResult, error) {
		res.Outcome, res.Message = o, fmt.Sprintf(f, args...)
		return res, nil
	}

	// A pending write left by an earlier run means a retire may have been sent already.
	op, err := a.Catalog.OperationGet(ctx, catalog.OperationGetParams{ID: in.OpID})
	switch {
	case errors.Is(err, catalog.ErrNotFound):
		op = catalog.Operation{ID: in.OpID}
	case err != nil:
		return PrepareDeleteBranchResult{}, fmt.Errorf("read operation: %w", err)
	}
	live, retiredBy, refs, err := a.readDeleteTarget(ctx, op, in.Graph, in.Branch)
	if err != nil {
		return PrepareDeleteBranchResult{}, err
	}
	switch {
	case retiredBy != "":
		res.Retired, res.Native = true, retiredBy
		return res, nil // a repeated request; a live incarnation now is a later create's
	case len(live) == 0 && refs.Err() != nil:
		// No readable ref is live, and one could not be read: it may be the live one.
		return stop(outcome.Conflict, "read incarnations of %q: %v", in.Branch, refs.Err())
	case len(live) == 0:
		if _, gerr := graph.ReadGraph(ctx, a.Store, in.Graph); errors.Is(gerr, graph.ErrGraphNotFound) {
			return stop(outcome.NotFound, "graph %q does not exist", in.Graph)
		}
		// A create whose ref put may still land would race a delete (docs/outcomes.md).
		ws, err := a.Catalog.IncarnationListByLogical(ctx, catalog.IncarnationListByLogicalParams{Graph: in.Graph, Logical: in.Branch})
		if err != nil {
			return PrepareDeleteBranchResult{}, fmt.Errorf("read witnesses: %w", err)
		}
		for _, w := range ws {
			if !w.State.Settled() {
				return stop(outcome.Conflict, "%s, then delete", settling(w))
			}
		}
		return stop(outcome.NotFound, "branch %q does not exist in graph %q", in.Branch, in.Graph)
	case len(live) > 1:
		e := &graph.MultipleLiveError{Graph: in.Graph, Branch: in.Branch,
			Natives: mapped(live, func(inc graph.Incarnation) string { return inc.Native })}
		return stop(outcome.Conflict, "%v; %s", e, e.RepairHint())
	}
	b := live[0]
	res.Native = b.Native
	res.Spec = WriteSpec{Kind: WriteRetireRef, Graph: in.Graph, Native: b.Native, ETag: b.ETag, Landed: outcome.Deleted}

	w, err := a.Catalog.IncarnationGetByNative(ctx, catalog.IncarnationGetByNativeParams{Graph: in.Graph, Native: b.Native})
	switch {
	case errors.Is(err, catalog.ErrNotFound): // written outside this ledger
	case err != nil:
		return PrepareDeleteBranchResult{}, fmt.Errorf("read witness: %w", err)
	case !w.State.Settled():
		return stop(outcome.Conflict, "%s, then delete", settling(w))
	}
	res.Head = b.Ref.Head.String()
	tags, err := graph.ListTags(ctx, a.Store, in.Graph)
	if isUnreadableObject(err) {
		return stop(outcome.Conflict, "read tags: %v", err)
	}
	if err != nil {
		return PrepareDeleteBranchResult{}, fmt.Errorf("read tags: %w", err)
	}
	for _, t := range tags {
		if t.Tag.State == format.TagLive && t.Tag.Commit.Tree == b.Ref.Tree {
			res.Tags = append(res.Tags, t.Tag.Name)
		}
	}
	if len(res.Tags) > 0 && !in.Force {
		return stop(outcome.Conflict, "live tags name commits of %q: %s; delete them first, or delete the branch with --force "+
			"(the tags keep their commits either way)", in.Branch, strings.Join(res.Tags, ", "))
	}
	return res, nil
}
