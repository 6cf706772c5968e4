package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
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
	// Recorded is the result this run recorded when it finished the operation, found
	// when the step runs again after that end (docs/operations.md).
	Recorded json.RawMessage `json:",omitempty"`
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
		return PrepareDeleteBranchResult{Outcome: c.outcome, Message: c.message, Recorded: c.recorded}, nil
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

// PrepareRepairInput is the input of PrepareRepair.
type PrepareRepairInput struct {
	OpID, Graph, Branch string
	Keep                string // the native name of the live incarnation to keep
	WorkflowID, RunID   string // the workflow's; RunID claims the ledger row
}

// RetireTarget is a live ref a repair retires.
type RetireTarget struct {
	Native string
	Spec   WriteSpec // the compare-and-swap that retires it
}

// PrepareRepairResult is what PrepareRepair decided; an Outcome ends the repair.
type PrepareRepairResult struct {
	Outcome        outcome.Outcome
	Message        string
	Owned          bool           // the ledger row is this run's: the kernel finishes it
	Retire         []RetireTarget // the live refs other than Keep
	AlreadyRetired []string       // refs this operation retired in an earlier attempt
	// Recorded is the result this run recorded when it finished the operation, found
	// when the step runs again after that end (docs/operations.md).
	Recorded json.RawMessage `json:",omitempty"`
}

// PrepareRepair records the repair (a delete_branch operation) and reads the name's refs
// directly, not through the listing that refuses several live refs. Keep must be a live
// native; a ref whose create is still settling is not retired until that create ends.
func (a *Activities) PrepareRepair(ctx context.Context, in PrepareRepairInput) (PrepareRepairResult, error) {
	end := func(o outcome.Outcome, f string, args ...any) (PrepareRepairResult, error) {
		return PrepareRepairResult{Outcome: o, Message: fmt.Sprintf(f, args...)}, nil
	}
	if err := firstError(format.ValidateGraphName(in.Graph), format.ValidateBranchName(in.Branch), format.ValidateOp(in.OpID)); err != nil {
		return end(outcome.Invalid, "%v", err)
	}
	logical, _, err := format.ParseNative(in.Keep)
	if err != nil {
		return end(outcome.Invalid, "keep: %v", err)
	}
	if logical != in.Branch {
		return end(outcome.Invalid, "keep: %s is an incarnation of %q, not of %q", in.Keep, logical, in.Branch)
	}
	c, err := a.claim(ctx, nil, opRecord(catalog.OpDeleteBranch, in.OpID, in.Graph, in.WorkflowID, in.RunID, map[string]string{"action": "repair", "branch": in.Branch, "keep": in.Keep}))
	if err != nil || !c.owned {
		return PrepareRepairResult{Outcome: c.outcome, Message: c.message, Recorded: c.recorded}, err
	}
	res := PrepareRepairResult{Owned: true}
	stop := func(o outcome.Outcome, f string, args ...any) (PrepareRepairResult, error) {
		res.Outcome, res.Message = o, fmt.Sprintf(f, args...)
		return res, nil
	}
	if _, err := graph.ReadGraph(ctx, a.Store, in.Graph); errors.Is(err, graph.ErrGraphNotFound) {
		return stop(outcome.NotFound, "graph %q does not exist", in.Graph)
	} else if err != nil {
		return PrepareRepairResult{}, fmt.Errorf("read graph: %w", err)
	}
	incs, err := graph.ReadBranchIncarnations(ctx, a.Store, in.Graph, in.Branch)
	if isUnreadableObject(err) {
		return stop(outcome.Conflict, "%v", err)
	}
	if err != nil {
		return PrepareRepairResult{}, fmt.Errorf("read incarnations: %w", err)
	}
	var live []string
	for _, inc := range incs {
		switch {
		case inc.Ref.State == format.RefLive:
			live = append(live, inc.Native)
			if inc.Native != in.Keep {
				res.Retire = append(res.Retire, RetireTarget{Native: inc.Native,
					Spec: WriteSpec{Kind: WriteRetireRef, Graph: in.Graph, Native: inc.Native, ETag: inc.ETag}})
			}
		case inc.Ref.State == format.RefRetired && inc.Ref.RetiredOp == in.OpID:
			res.AlreadyRetired = append(res.AlreadyRetired, inc.Native)
		}
	}
	switch {
	case len(live) == 0 && len(res.AlreadyRetired) == 0:
		return stop(outcome.NotFound, "branch %q has no live incarnation in graph %q", in.Branch, in.Graph)
	case !slices.Contains(live, in.Keep):
		return stop(outcome.Invalid, "%s is not a live incarnation of %q; live: %s", in.Keep, in.Branch, strings.Join(live, ", "))
	}
	for _, t := range res.Retire {
		w, err := a.Catalog.IncarnationGetByNative(ctx, catalog.IncarnationGetByNativeParams{Graph: in.Graph, Native: t.Native})
		if errors.Is(err, catalog.ErrNotFound) {
			continue // written outside this ledger (an older tool)
		}
		if err != nil {
			return PrepareRepairResult{}, fmt.Errorf("read witness: %w", err)
		}
		if !w.State.Settled() {
			return stop(outcome.Conflict, "%s, then repair", settling(w))
		}
	}
	return res, nil
}

func settling(w catalog.Incarnation) string {
	return fmt.Sprintf("the create of %s is still settling (%s, operation %s); wait for it with `graft op wait %s`", w.Native, w.State, w.OpID, w.OpID)
}

// retireRefused says why a RetireRef error proves the swap did not and will not happen
// (another writer changed the ref, or it is not a ref this format can swap), or false.
func retireRefused(err error) (string, bool) {
	var changed *graph.RefChangedError
	switch {
	case errors.As(err, &changed):
		return changed.Error(), true
	case errors.Is(err, graph.ErrInvalid), isUnreadableObject(err):
		return err.Error(), true
	}
	return "", false
}

// retireWitnessTx records a retired ref's witness, if any, retired, in tx; one neither live
// nor retired is left as is, and the returned note says so.
func (a *Activities) retireWitnessTx(ctx context.Context, tx pgx.Tx, graphName, native string) (string, error) {
	w, err := a.Catalog.IncarnationGetByNativeTx(ctx, tx, catalog.IncarnationGetByNativeParams{Graph: graphName, Native: native})
	switch {
	case errors.Is(err, catalog.ErrNotFound):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("read witness: %w", err)
	case w.State == catalog.IncarnationLive:
		if _, err := a.Catalog.IncarnationSetStateTx(ctx, tx, catalog.IncarnationSetStateParams{
			Graph: graphName, Native: native, From: catalog.IncarnationLive, To: catalog.IncarnationRetired,
		}); err != nil {
			return "", fmt.Errorf("witness retired: %w", err)
		}
	case w.State != catalog.IncarnationRetired:
		return fmt.Sprintf("its witness is %s (operation %s), left as is", w.State, w.OpID), nil
	}
	return "", nil
}

// AdoptKeptInput is the input of AdoptKept.
type AdoptKeptInput struct {
	Owner               Owner
	Graph, Branch, Keep string
}

// AdoptKeptResult is the output of AdoptKept.
type AdoptKeptResult struct {
	Note string // what happened to the kept incarnation's witness, if anything
}

// AdoptKept makes the ledger name a repair's kept incarnation live, recording a witness for
// it under the repair's operation when it was written outside this ledger.
func (a *Activities) AdoptKept(ctx context.Context, in AdoptKeptInput) (AdoptKeptResult, error) {
	_, tree, err := format.ParseNative(in.Keep)
	if err != nil {
		return AdoptKeptResult{}, fmt.Errorf("adopt %s: %w", in.Keep, err)
	}
	w, err := a.Catalog.IncarnationGetByNative(ctx, catalog.IncarnationGetByNativeParams{Graph: in.Graph, Native: in.Keep})
	switch {
	case err == nil && w.OpID != in.Owner.OpID:
		return AdoptKeptResult{}, nil // the ledger knows it already (live, or a create still settling it)
	case err != nil && !errors.Is(err, catalog.ErrNotFound):
		return AdoptKeptResult{}, fmt.Errorf("read witness: %w", err)
	}
	inc, err := a.Catalog.IncarnationInsert(ctx, catalog.IncarnationInsertParams{
		Graph: in.Graph, Logical: in.Branch, Native: in.Keep, Tree: tree.String(), OpID: in.Owner.OpID,
	})
	var exists *catalog.IncarnationExistsError
	switch {
	case errors.As(err, &exists):
		return AdoptKeptResult{Note: fmt.Sprintf("%s has no witness and %s holds the name in the ledger (%s)", in.Keep, exists.Existing.Native, exists.Existing.State)}, nil
	case err != nil:
		return AdoptKeptResult{}, fmt.Errorf("witness %s: %w", in.Keep, err)
	case inc.State == catalog.IncarnationIntent:
		if _, err := a.Catalog.IncarnationSetState(ctx, catalog.IncarnationSetStateParams{
			Graph: in.Graph, Native: in.Keep, From: catalog.IncarnationIntent, To: catalog.IncarnationLive,
		}); err != nil {
			return AdoptKeptResult{}, fmt.Errorf("witness %s live: %w", in.Keep, err)
		}
	}
	return AdoptKeptResult{Note: "recorded " + in.Keep + " live in the ledger"}, nil
}
