package activities

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/workflows/contract"
	"github.com/oklog/ulid/v2"
)

// ReconcileInput is the input of Reconcile.
type ReconcileInput struct {
	// Run is the reconciler's run id: the rows it takes over are owned by "reconcile/{Run}".
	Run string
	// Graph restricts the pass to one graph. Defaults to "" (every graph).
	Graph string
	// OpID restricts the pass to one operation. Defaults to "" (every one).
	OpID string
	// Limit bounds the unfinished operations read per page. Defaults to 100.
	Limit int
}

// Reconcile settles each unfinished operation whose workflow closed without recording its
// end as that workflow would have: it takes the row over (a compare-and-swap of its owner,
// so a late activity of the closed run never writes after it), fences the pending write (a
// fence finding it landed gives the success outcome; one that wins, unpublished, and a
// create's clone is reclaimed), and finishes the operation. A refused fence parks the
// operation in doubt for the next pass. An orphaned sweep is the next cleanup's to finish
// (reconcileCleanup).
func (a *Activities) Reconcile(ctx context.Context, in ReconcileInput) (contract.ReconcileResult, error) {
	if a.Workflows == nil {
		return contract.ReconcileResult{}, errors.New("reconcile: the worker has no Temporal client to ask whether workflows closed")
	}
	res := contract.ReconcileResult{Settled: []contract.ReconciledOp{}}
	limit := cmp.Or(max(in.Limit, 0), 100)
	var ops []catalog.Operation
	for after := (catalog.Operation{}); ; after = ops[len(ops)-1] {
		page, err := a.Catalog.OperationListUnfinished(ctx, catalog.OperationListUnfinishedParams{Graph: in.Graph, Limit: limit, After: after})
		if err != nil {
			return contract.ReconcileResult{}, err
		}
		ops = append(ops, page...)
		if len(page) < limit {
			break
		}
	}
	for _, op := range ops {
		if in.OpID != "" && op.ID != in.OpID {
			continue
		}
		if op.Kind == catalog.OpCleanup {
			r, err := a.reconcileCleanup(ctx, op)
			if err != nil {
				return res, fmt.Errorf("reconcile %s: %w", op.ID, err)
			}
			if r.OpID != "" {
				res.Examined++
				res.Settled = append(res.Settled, r)
			}
			continue
		}
		res.Examined++
		if op.WorkflowID == "" {
			continue // recorded by hand or by an older worker: nothing says which workflow runs it
		}
		closed, err := a.Workflows.WorkflowClosed(ctx, op.WorkflowID)
		if err != nil {
			return res, fmt.Errorf("reconcile %s: ask whether workflow %s closed: %w", op.ID, op.WorkflowID, err)
		}
		if !closed {
			res.Open++
			continue
		}
		r, err := a.reconcileOne(ctx, op, Owner{OpID: op.ID, Run: "reconcile/" + in.Run})
		if err != nil {
			return res, fmt.Errorf("reconcile %s: %w", op.ID, err)
		}
		if r.OpID != "" {
			res.Settled = append(res.Settled, r)
		}
	}
	return res, nil
}

// reconcileCleanup settles the cleanup rows of workflows that ended. An orphaned dry run or
// mark deleted nothing and no sweep follows an unfinished plan, so it is aborted; an
// orphaned sweep is left to the next cleanup, which deletes the rest of its plan
// (docs/cleanup.md). An operation whose workflow ended before it inserted its run read and
// deleted nothing: it is finished failed (catalog.CleanupOperationAbandon).
func (a *Activities) reconcileCleanup(ctx context.Context, op catalog.Operation) (contract.ReconciledOp, error) {
	run, err := a.Catalog.CleanupRunGet(ctx, catalog.CleanupRunGetParams{ID: op.ID})
	unbegun := errors.Is(err, catalog.ErrNotFound)
	switch {
	case unbegun:
		run = catalog.CleanupRun{ID: op.ID, Graph: op.Graph}
	case err != nil:
		return contract.ReconciledOp{}, err
	case run.Mode == catalog.CleanupSweep || run.State != catalog.CleanupRunning:
		return contract.ReconciledOp{}, nil
	}
	orphan, err := a.orphanedRun(ctx, run)
	if err != nil || orphan == nil {
		return contract.ReconciledOp{}, err
	}
	msg := fmt.Sprintf("aborted by the reconciler: its workflow %s ended without finishing it", orphan.WorkflowID)
	if unbegun {
		msg = fmt.Sprintf("its workflow %s ended before the run began; nothing was read or deleted", orphan.WorkflowID)
		done, err := a.Catalog.CleanupOperationAbandon(ctx, catalog.CleanupOperationAbandonParams{OpID: op.ID, Message: msg})
		if err != nil || !done {
			return contract.ReconciledOp{}, err
		}
		a.observeFinished(string(op.Kind), string(catalog.OutcomeFailed))
	} else if err := a.CleanupFinish(ctx, CleanupFinishInput{RunID: run.ID, Graph: run.Graph, Aborted: true,
		Message: msg}); err != nil {
		return contract.ReconciledOp{}, err
	}
	return contract.ReconciledOp{OpID: op.ID, Kind: string(op.Kind), Message: msg}, nil
}

// reconcileOne settles one operation whose workflow closed.
func (a *Activities) reconcileOne(ctx context.Context, op catalog.Operation, owner Owner) (contract.ReconciledOp, error) {
	log := a.logger(ctx)
	if _, err := a.Catalog.OperationTakeOver(ctx, catalog.OperationTakeOverParams{ID: op.ID, From: op.OwnerRun, To: owner.Run}); err != nil {
		if errors.Is(err, catalog.ErrNotOwner) || errors.Is(err, catalog.ErrStateConflict) {
			return contract.ReconciledOp{}, nil // claimed or finished meanwhile
		}
		return contract.ReconciledOp{}, err
	}
	log.Info("graft reconcile: taking over an operation whose workflow closed", "op_id", op.ID, "kind", string(op.Kind),
		"workflow_id", op.WorkflowID, "previous_owner", op.OwnerRun)
	r := contract.ReconciledOp{OpID: op.ID, Kind: string(op.Kind)}
	fin := FinishInput{Owner: owner, Kind: op.Kind, Graph: op.Graph}

	spec, hasPending := pendingSpec(op)
	var incs []catalog.Incarnation
	if op.Kind == catalog.OpCreateBranch {
		var err error
		if incs, err = a.Catalog.IncarnationListByOp(ctx, catalog.IncarnationListByOpParams{OpID: op.ID}); err != nil {
			return r, err
		}
		if !hasPending {
			// The ref was never sent (the kernel records it first), but fence every
			// unsettled incarnation's ref key all the same: unpublished leaves a fence.
			for _, inc := range incs {
				if !inc.State.Settled() {
					if spec, hasPending = a.liveRefSpec(ctx, op, inc); hasPending {
						break
					}
				}
			}
		}
	}

	switch {
	case hasPending:
		v, err := a.Fence(ctx, WriteInput{Owner: owner, Spec: spec, Reason: "abandoned: its workflow closed"})
		if err != nil {
			return r, err
		}
		switch v.State {
		case Refused, Ambiguous:
			r.Parked, r.Message = true, "fence of the "+spec.Describe()+" did not land: "+v.Message
			if err := a.Progress(ctx, ProgressInput{Owner: owner, Phase: "parked", Waiting: r.Message, InDoubt: true}); err != nil {
				return r, err
			}
			log.Info("graft reconcile: parked", "op_id", op.ID, "detail", r.Message)
			return r, nil
		case Landed:
			if key, ok := commitKeyOf(spec); ok {
				// The closed run's puts of the commit may still be in flight, and the
				// commit is on its branch now: a late one must never refill its key.
				if err := a.holdForLatePut(ctx, owner, key); err != nil {
					return r, err
				}
			}
			r.Outcome = spec.Landed
			if r.Outcome == "" {
				r.Outcome, r.Message = outcome.Unpublished, "its workflow closed after the "+spec.Describe()+", before the operation's last write"
			}
			if v.Recorded {
				return r, nil // a create's ref: finished with the witness
			}
			if spec.Kind == WriteRef {
				if ref, err := format.DecodeBranchRef(spec.Body); err == nil {
					fin.Native = ref.Native
				}
			}
		case Invalid:
			r.Outcome, r.Message = outcome.Invalid, v.Message
		default: // Fenced, Other: it never lands
			r.Outcome, r.Message = outcome.Unpublished, "its workflow closed; the "+spec.Describe()+" is fenced and never lands"
			if v.State == Other {
				r.Outcome, r.Message = outcome.Conflict, "its workflow closed; "+v.Message
			}
			if spec.Kind == WriteRef {
				if err := a.reclaimClones(ctx, owner, op, incs); err != nil {
					return r, err
				}
			}
		}
	case op.Kind == catalog.OpInitGraph:
		// An init's one step is idempotent: run it to its end, as its workflow would.
		var in struct {
			Author string `json:"author"`
		}
		_ = json.Unmarshal(op.Inputs, &in)
		init, err := a.InitGraph(ctx, InitGraphInput{OpID: op.ID, Graph: op.Graph, Author: in.Author, WorkflowID: op.WorkflowID, RunID: owner.Run})
		if err != nil {
			return r, err
		}
		r.Outcome, r.Message = init.Outcome, init.Message
	default:
		r.Outcome, r.Message = "", "its workflow closed before any storage write was sent"
	}
	if op.Kind == catalog.OpDeleteBranch && r.Outcome != outcome.Deleted && hasPending && spec.Landed == "" {
		r.Outcome, r.Message = outcome.Conflict, "the repair's workflow closed before it finished; run the repair again"
	}
	fin.Outcome, fin.Message = r.Outcome, r.Message
	if _, err := a.Finish(ctx, fin); err != nil {
		return r, err
	}
	log.Info("graft reconcile: settled", "op_id", op.ID, "outcome", string(r.Outcome), "detail", r.Message)
	return r, nil
}

func pendingSpec(op catalog.Operation) (WriteSpec, bool) {
	if len(op.Pending) == 0 {
		return WriteSpec{}, false
	}
	var spec WriteSpec
	if err := json.Unmarshal(op.Pending, &spec); err != nil || spec.Kind == "" {
		return WriteSpec{}, false
	}
	return spec, true
}

// liveRefSpec is the live ref put of an incarnation whose create recorded no pending write:
// the ref naming its tree's fork commit (none without a commit: the ref follows the clone).
func (a *Activities) liveRefSpec(ctx context.Context, op catalog.Operation, inc catalog.Incarnation) (WriteSpec, bool) {
	logical, tree, err := format.ParseNative(inc.Native)
	if err != nil {
		return WriteSpec{}, false
	}
	fork, err := a.forkOf(ctx, op.Graph, tree)
	if err != nil || fork.IsZero() {
		return WriteSpec{}, false
	}
	body, err := format.EncodeBranchRef(format.BranchRef{State: format.RefLive, Branch: logical, Native: inc.Native, Tree: tree,
		Head: fork, Op: op.ID})
	if err != nil {
		return WriteSpec{}, false
	}
	return WriteSpec{Kind: WriteRef, Graph: op.Graph, Body: body, Branch: logical, Landed: outcome.Created, Subject: inc.Native}, true
}

// forkOf is the last commit id listed in tree (zero when none is): a clone's fork commit,
// in a tree whose ref never landed.
func (a *Activities) forkOf(ctx context.Context, graphName string, tree ulid.ULID) (format.CommitID, error) {
	var fork format.CommitID
	err := storage.ListAll(ctx, a.Store, format.TreeCommitsPrefix(graphName, tree), func(o storage.ObjectInfo) error {
		if id, err := format.ParseCommitKey(graphName, o.Key); err == nil {
			fork = id
		}
		return nil
	})
	return fork, err
}

// reclaimClones deletes the fork commit of every unsettled incarnation of a create whose
// ref key is fenced, and witnesses it unpublished.
func (a *Activities) reclaimClones(ctx context.Context, owner Owner, op catalog.Operation, incs []catalog.Incarnation) error {
	for _, inc := range incs {
		if inc.State.Settled() {
			continue
		}
		_, tree, err := format.ParseNative(inc.Native)
		if err != nil {
			continue
		}
		fork, err := a.forkOf(ctx, op.Graph, tree)
		if err != nil {
			return fmt.Errorf("list clone %s: %w", inc.Native, err)
		}
		var forkID string
		if !fork.IsZero() {
			forkID = fork.String()
		}
		if err := a.ReclaimClone(ctx, ReclaimInput{Owner: owner, Graph: op.Graph, Native: inc.Native, Fork: forkID, Reason: "its workflow closed"}); err != nil {
			return err
		}
	}
	return nil
}
