package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/storage"
)

// PrepareDeleteBranchInput is the input of PrepareDeleteBranch.
type PrepareDeleteBranchInput struct {
	OpID, Graph, Branch string
	// Force deletes a branch even though live tags name commits of its
	// tree. It never deletes main.
	Force             bool
	WorkflowID, RunID string
}

// PrepareDeleteBranchResult is the ref to retire, or the outcome that ends the delete.
type PrepareDeleteBranchResult struct {
	Outcome  outcome.Outcome
	Message  string
	Recorded bool
	Foreign  bool
	// Native and ETag name the live ref to retire by compare-and-swap.
	Native, ETag string
	// Head is the branch's head when it was read.
	Head string
	// Tags are the live tags naming commits of the branch's tree.
	Tags []string
	// Retired: this operation retired the branch already (a repeated request).
	Retired bool
}

// PrepareDeleteBranch records a branch delete and decides whether it may
// go ahead: main is never deleted (invalid); a branch whose tree a live tag
// names is deleted only with Force (conflict otherwise) — the tags keep
// those commits for cleanup either way; a branch whose create is still
// settling in the ledger waits for that create (conflict). It reads the
// name's refs (one LIST, one GET per incarnation), the head (LIST + GET)
// and the graph's tags (one LIST, one GET per tag).
func (a *Activities) PrepareDeleteBranch(ctx context.Context, in PrepareDeleteBranchInput) (PrepareDeleteBranchResult, error) {
	for _, check := range []error{format.ValidateGraphName(in.Graph), format.ValidateBranchName(in.Branch), format.ValidateOp(in.OpID)} {
		if check != nil {
			return PrepareDeleteBranchResult{Outcome: outcome.Invalid, Message: check.Error()}, nil
		}
	}
	if in.Branch == graph.DefaultBranch {
		return PrepareDeleteBranchResult{Outcome: outcome.Invalid, Message: "main cannot be deleted: it is every graph's default branch"}, nil
	}
	inputs, _ := json.Marshal(map[string]any{"action": "delete", "branch": in.Branch, "force": in.Force})
	r, err := a.recordOnly(ctx, catalog.OperationInsertParams{ID: in.OpID, Kind: catalog.OpDeleteBranch, Graph: in.Graph,
		Inputs: inputs, WorkflowID: in.WorkflowID, RunID: in.RunID})
	if err != nil {
		return PrepareDeleteBranchResult{}, err
	}
	res := PrepareDeleteBranchResult{Recorded: !r.foreign, Foreign: r.foreign}
	stop := func(o outcome.Outcome, f string, args ...any) (PrepareDeleteBranchResult, error) {
		res.Outcome, res.Message = o, fmt.Sprintf(f, args...)
		return res, nil
	}
	if r.outcome != "" {
		return stop(r.outcome, "%s", r.message)
	}

	incs, err := graph.ReadBranchIncarnations(ctx, a.Store, in.Graph, in.Branch)
	if isUnreadableObject(err) {
		return stop(outcome.Conflict, "%v", err)
	}
	if err != nil {
		return PrepareDeleteBranchResult{}, fmt.Errorf("read incarnations: %w", err)
	}
	var live []graph.Incarnation
	for _, inc := range incs {
		switch {
		case inc.Ref.State == format.RefLive:
			live = append(live, inc)
		case inc.Ref.State == format.RefRetired && inc.Ref.RetiredOp == in.OpID:
			res.Retired, res.Native = true, inc.Native
		}
	}
	switch {
	case res.Retired:
		return res, nil // a repeated request; a live incarnation now is a later create's
	case len(live) == 0:
		if _, gerr := graph.ReadGraph(ctx, a.Store, in.Graph); errors.Is(gerr, graph.ErrGraphNotFound) {
			return stop(outcome.NotFound, "graph %q does not exist", in.Graph)
		}
		// No live ref yet, but a create whose ref put may still land: deleting
		// now would race it (docs/outcomes.md: conflict, not not_found).
		ws, err := a.Catalog.IncarnationListByLogical(ctx, catalog.IncarnationListByLogicalParams{Graph: in.Graph, Logical: in.Branch})
		if err != nil {
			return PrepareDeleteBranchResult{}, fmt.Errorf("read witnesses: %w", err)
		}
		for _, w := range ws {
			if !w.State.Settled() {
				return stop(outcome.Conflict, "the create of %s is still settling (%s, operation %s); wait for it with `graft op wait %s`, then delete",
					w.Native, w.State, w.OpID, w.OpID)
			}
		}
		return stop(outcome.NotFound, "branch %q does not exist in graph %q", in.Branch, in.Graph)
	case len(live) > 1:
		e := &graph.MultipleLiveError{Graph: in.Graph, Branch: in.Branch}
		for _, inc := range live {
			e.Natives = append(e.Natives, inc.Native)
		}
		return stop(outcome.Conflict, "%v; %s", e, e.RepairHint())
	}
	b := live[0]
	res.Native, res.ETag = b.Native, b.ETag

	w, err := a.Catalog.IncarnationGetByNative(ctx, catalog.IncarnationGetByNativeParams{Graph: in.Graph, Native: b.Native})
	switch {
	case errors.Is(err, catalog.ErrNotFound): // written outside this ledger
	case err != nil:
		return PrepareDeleteBranchResult{}, fmt.Errorf("read witness: %w", err)
	case !w.State.Settled():
		return stop(outcome.Conflict, "the create of %s is still settling (%s, operation %s); wait for it with `graft op wait %s`, then delete",
			b.Native, w.State, w.OpID, w.OpID)
	}
	head, err := graph.ReadHead(ctx, a.Store, in.Graph, b.Ref.Tree)
	switch {
	case isUnreadableObject(err):
		return stop(outcome.Conflict, "read head of %s: %v", b.Native, err)
	case err != nil:
		return PrepareDeleteBranchResult{}, fmt.Errorf("read head: %w", err)
	}
	res.Head = head.ID.String()
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

// RetireBranchInput is the input of RetireBranch.
type RetireBranchInput struct {
	OpID, Graph, Native, ETag string
	// InDoubtSince is when the retire first came back in doubt; zero at first.
	InDoubtSince time.Time
}

// RetireBranch retires the branch's live ref by compare-and-swap
// (graph.RetireRef) into a retired ref that stays at the key as a fence, and
// then records the witness, if the ledger has one, as retired. Outcomes:
// done; changed or not_live (another writer changed the ref first);
// in_doubt (call again to settle: it reads back and re-issues the same
// bytes); refused.
func (a *Activities) RetireBranch(ctx context.Context, in RetireBranchInput) (RetireIncarnationResult, error) {
	_, err := graph.RetireRef(ctx, a.Store, in.Graph, in.Native, in.ETag, in.OpID)
	if res, ok := retireRefused(err); ok {
		return res, nil
	}
	switch {
	case errors.Is(err, storage.ErrAmbiguous):
		return RetireIncarnationResult{State: RetireInDoubt, Message: err.Error()}, nil
	case errors.Is(err, storage.ErrRefused), errors.Is(err, storage.ErrInvalidKey):
		return RetireIncarnationResult{State: RetireRefused, Message: err.Error()}, nil
	case err != nil:
		return RetireIncarnationResult{}, fmt.Errorf("retire %s: %w", in.Native, err)
	}
	if !in.InDoubtSince.IsZero() {
		a.observeWriteSettled(string(catalog.OpDeleteBranch), in.InDoubtSince)
	}
	if _, err := a.retireWitness(ctx, in.Graph, in.Native); err != nil {
		return RetireIncarnationResult{}, err
	}
	return RetireIncarnationResult{State: RetireDone}, nil
}
