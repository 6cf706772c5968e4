package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
)

// PrepareRepairInput is the input of PrepareRepair.
type PrepareRepairInput struct {
	OpID, Graph, Branch string
	// Keep is the native name of the live incarnation to keep.
	Keep              string
	WorkflowID, RunID string
}

// RetireTarget is a live ref a repair retires.
type RetireTarget struct {
	Native string
	ETag   string
}

// PrepareRepairResult is what PrepareRepair decided. A non-empty Outcome
// ends the repair before any storage effect.
type PrepareRepairResult struct {
	Outcome  outcome.Outcome
	Message  string
	Recorded bool
	// Retire lists the live refs other than Keep, with the ETags to
	// compare-and-swap against.
	Retire []RetireTarget
	// AlreadyRetired lists refs this operation retired in an earlier attempt.
	AlreadyRetired []string
}

// PrepareRepair records the repair (as a delete_branch operation: it
// retires incarnations the way a branch delete does) and reads the refs of
// the one logical name directly — not through the listing that refuses a
// name with several live refs. Keep must be one of the live natives. A
// live ref whose create is still settling in the ledger is not retired:
// that create must end first.
func (a *Activities) PrepareRepair(ctx context.Context, in PrepareRepairInput) (PrepareRepairResult, error) {
	end := func(o outcome.Outcome, f string, args ...any) (PrepareRepairResult, error) {
		return PrepareRepairResult{Outcome: o, Message: fmt.Sprintf(f, args...)}, nil
	}
	for _, check := range []error{format.ValidateGraphName(in.Graph), format.ValidateBranchName(in.Branch), format.ValidateOp(in.OpID)} {
		if check != nil {
			return end(outcome.Invalid, "%v", check)
		}
	}
	logical, _, err := format.ParseNative(in.Keep)
	if err != nil {
		return end(outcome.Invalid, "keep: %v", err)
	}
	if logical != in.Branch {
		return end(outcome.Invalid, "keep: %s is an incarnation of %q, not of %q", in.Keep, logical, in.Branch)
	}
	inputs, _ := json.Marshal(map[string]string{"action": "repair", "branch": in.Branch, "keep": in.Keep})
	op, err := a.Catalog.OperationInsert(ctx, catalog.OperationInsertParams{
		ID: in.OpID, Kind: catalog.OpDeleteBranch, Graph: in.Graph, Inputs: inputs,
		WorkflowID: in.WorkflowID, RunID: in.RunID,
	})
	if errors.Is(err, catalog.ErrDuplicate) {
		return end(outcome.Conflict, "operation id %q was already used for a different request", in.OpID)
	}
	if err != nil {
		return PrepareRepairResult{}, fmt.Errorf("record operation: %w", err)
	}
	res := PrepareRepairResult{Recorded: true}
	stop := func(o outcome.Outcome, f string, args ...any) (PrepareRepairResult, error) {
		res.Outcome, res.Message = o, fmt.Sprintf(f, args...)
		return res, nil
	}
	if op.State == catalog.OperationDone {
		return stop(outcome.Outcome(op.Outcome), "operation %s already finished: %s", in.OpID, op.Error)
	}
	if _, err := graph.ReadGraph(ctx, a.Store, in.Graph); err != nil {
		if errors.Is(err, graph.ErrGraphNotFound) {
			return stop(outcome.NotFound, "graph %q does not exist", in.Graph)
		}
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
	keepLive := false
	for _, inc := range incs {
		switch {
		case inc.Ref.State == format.RefLive && inc.Native == in.Keep:
			keepLive = true
			live = append(live, inc.Native)
		case inc.Ref.State == format.RefLive:
			live = append(live, inc.Native)
			res.Retire = append(res.Retire, RetireTarget{Native: inc.Native, ETag: inc.ETag})
		case inc.Ref.State == format.RefRetired && inc.Ref.RetiredOp == in.OpID:
			res.AlreadyRetired = append(res.AlreadyRetired, inc.Native)
		}
	}
	switch {
	case len(live) == 0 && len(res.AlreadyRetired) == 0:
		return stop(outcome.NotFound, "branch %q has no live incarnation in graph %q", in.Branch, in.Graph)
	case !keepLive:
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
			return stop(outcome.Conflict, "the create of %s is still settling (%s, operation %s); wait for it with `graft op wait %s`, then repair",
				t.Native, w.State, w.OpID, w.OpID)
		}
	}
	return res, nil
}

// RetireIncarnationInput is the input of RetireIncarnation.
type RetireIncarnationInput struct {
	OpID, Graph, Native, ETag string
}

// RetireState is what RetireIncarnation proved about one ref.
type RetireState string

const (
	RetireDone    RetireState = "retired"  // the ref holds our retired bytes
	RetireNotLive RetireState = "not_live" // someone else retired or fenced it, or it is gone
	RetireChanged RetireState = "changed"  // it is live with other bytes than the ones read
)

// RetireIncarnationResult is the output of RetireIncarnation.
type RetireIncarnationResult struct {
	State   RetireState
	Message string
}

// RetireIncarnation retires one live ref by compare-and-swap
// (graph.RetireRef) and then records its witness, if the ledger has one,
// as retired. An outcome still unknown is an error: the activity is retried,
// and RetireRef settles it by reading back.
func (a *Activities) RetireIncarnation(ctx context.Context, in RetireIncarnationInput) (RetireIncarnationResult, error) {
	_, err := graph.RetireRef(ctx, a.Store, in.Graph, in.Native, in.ETag, in.OpID)
	if res, ok := retireRefused(err); ok {
		return res, nil
	}
	if err != nil {
		return RetireIncarnationResult{}, fmt.Errorf("retire %s: %w", in.Native, err)
	}
	note, err := a.retireWitness(ctx, in.Graph, in.Native)
	if err != nil {
		return RetireIncarnationResult{}, err
	}
	return RetireIncarnationResult{State: RetireDone, Message: note}, nil
}

// retireRefused classifies a RetireRef error that proves the swap did not
// and will not happen: another writer changed the ref (still live, or no
// longer live), or it is not a ref this format can swap.
func retireRefused(err error) (RetireIncarnationResult, bool) {
	var changed *graph.RefChangedError
	switch {
	case errors.As(err, &changed) && changed.Found == format.RefLive:
		return RetireIncarnationResult{State: RetireChanged, Message: changed.Error()}, true
	case errors.As(err, &changed):
		return RetireIncarnationResult{State: RetireNotLive, Message: changed.Error()}, true
	case errors.Is(err, graph.ErrInvalid), isUnreadableObject(err):
		return RetireIncarnationResult{State: RetireChanged, Message: err.Error()}, true
	}
	return RetireIncarnationResult{}, false
}

// retireWitness records a retired ref's witness, if the ledger has one, as
// retired. A witness in another state than live or retired is left as is,
// and the returned note says so.
func (a *Activities) retireWitness(ctx context.Context, graphName, native string) (string, error) {
	w, err := a.Catalog.IncarnationGetByNative(ctx, catalog.IncarnationGetByNativeParams{Graph: graphName, Native: native})
	switch {
	case errors.Is(err, catalog.ErrNotFound):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("read witness: %w", err)
	case w.State == catalog.IncarnationLive:
		if _, err := a.Catalog.IncarnationSetState(ctx, catalog.IncarnationSetStateParams{
			Graph: graphName, Native: native, From: catalog.IncarnationLive, To: catalog.IncarnationRetired,
		}); err != nil {
			return "", fmt.Errorf("witness retired: %w", err)
		}
	case w.State != catalog.IncarnationRetired:
		return fmt.Sprintf("its witness is %s (operation %s), left as is", w.State, w.OpID), nil
	}
	return "", nil
}

// FinishRepairInput is the input of FinishRepair.
type FinishRepairInput struct {
	OpID, Graph, Branch, Keep string
	// Outcome is "" when the workflow failed on an infrastructure error.
	Outcome outcome.Outcome
	Message string
}

// FinishRepairResult is the output of FinishRepair.
type FinishRepairResult struct {
	// Note says what happened to the kept incarnation's witness, if anything.
	Note string
}

// FinishRepair makes the ledger name the kept incarnation live — recording
// a witness for it, under the repair's operation, when it was written
// outside this ledger — and then records the repair's outcome.
func (a *Activities) FinishRepair(ctx context.Context, in FinishRepairInput) (FinishRepairResult, error) {
	var res FinishRepairResult
	if in.Outcome == outcome.Done {
		note, err := a.adoptKept(ctx, in)
		if err != nil {
			return res, err
		}
		res.Note = note
	}
	err := a.FinishOperation(ctx, FinishOperationInput{OpID: in.OpID, Kind: catalog.OpDeleteBranch, Outcome: in.Outcome, Message: in.Message})
	return res, err
}

// adoptKept gives the kept incarnation a live witness if it has none.
func (a *Activities) adoptKept(ctx context.Context, in FinishRepairInput) (string, error) {
	_, tree, err := format.ParseNative(in.Keep)
	if err != nil {
		return "", fmt.Errorf("adopt %s: %w", in.Keep, err)
	}
	w, err := a.Catalog.IncarnationGetByNative(ctx, catalog.IncarnationGetByNativeParams{Graph: in.Graph, Native: in.Keep})
	switch {
	case err == nil && w.OpID != in.OpID:
		return "", nil // the ledger knows it already (live, or a create still settling it)
	case err != nil && !errors.Is(err, catalog.ErrNotFound):
		return "", fmt.Errorf("read witness: %w", err)
	}
	inc, err := a.Catalog.IncarnationInsert(ctx, catalog.IncarnationInsertParams{
		Graph: in.Graph, Logical: in.Branch, Native: in.Keep, Tree: tree.String(), OpID: in.OpID,
	})
	var exists *catalog.IncarnationExistsError
	switch {
	case errors.As(err, &exists):
		return fmt.Sprintf("%s has no witness and %s holds the name in the ledger (%s)", in.Keep, exists.Existing.Native, exists.Existing.State), nil
	case err != nil:
		return "", fmt.Errorf("witness %s: %w", in.Keep, err)
	case inc.State == catalog.IncarnationIntent:
		if _, err := a.Catalog.IncarnationSetState(ctx, catalog.IncarnationSetStateParams{
			Graph: in.Graph, Native: in.Keep, From: catalog.IncarnationIntent, To: catalog.IncarnationLive,
		}); err != nil {
			return "", fmt.Errorf("witness %s live: %w", in.Keep, err)
		}
	}
	return "recorded " + in.Keep + " live in the ledger", nil
}
