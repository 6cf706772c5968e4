package activities

import (
	"context"
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
		return PrepareRepairResult{Outcome: c.outcome, Message: c.message}, err
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
