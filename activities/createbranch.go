package activities

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/storage"
)

// PrepareCreate validates the request, resolves the source commit, pins it
// against cleanup, mints the native name and witnesses the intent — all before
// any storage effect. It computes the fork commit's and the ref's bytes once;
// every later put re-sends exactly those bytes.
func (a *Activities) PrepareCreate(ctx context.Context, in PrepareCreateInput) (PrepareCreateResult, error) {
	end := func(o outcome.Outcome, msg string, args ...any) (PrepareCreateResult, error) {
		return PrepareCreateResult{Outcome: o, Message: fmt.Sprintf(msg, args...)}, nil
	}
	if err := format.ValidateGraphName(in.Graph); err != nil {
		return end(outcome.Invalid, "%v", err)
	}
	if err := format.ValidateBranchName(in.Branch); err != nil {
		return end(outcome.Invalid, "%v", err)
	}
	sources := 0
	for _, s := range []string{in.SourceBranch, in.SourceCommit, in.SourceTag} {
		if s != "" {
			sources++
		}
	}
	if sources > 1 {
		return end(outcome.Invalid, "give at most one source: a branch, a commit or a tag")
	}
	inputs, _ := json.Marshal(map[string]string{
		"branch": in.Branch, "source_branch": in.SourceBranch, "source_commit": in.SourceCommit,
		"source_tag": in.SourceTag, "author": in.Author, "message": in.Message,
	})
	opParams := catalog.OperationInsertParams{
		ID: in.OpID, Kind: catalog.OpCreateBranch, Graph: in.Graph, Inputs: inputs,
		WorkflowID: in.WorkflowID, RunID: in.RunID,
	}

	source, probe, res, err := a.resolveSource(ctx, in)
	if err == nil && res.Outcome == outcome.NotFound {
		// Only now read the graph record: a missing graph deserves its own
		// message, and the success path saves the request.
		if _, gerr := graph.ReadGraph(ctx, a.Store, in.Graph); errors.Is(gerr, graph.ErrGraphNotFound) {
			res.Message = fmt.Sprintf("graph %q does not exist; create it with `graft graph init %s`", in.Graph, in.Graph)
		}
	}
	if err != nil {
		return res, err
	}
	if res.Outcome != "" {
		return res, a.recordOperation(ctx, opParams)
	}

	if res, err := a.checkNameFree(ctx, in.Graph, in.Branch); err != nil || res.Outcome != "" {
		if err == nil {
			err = a.recordOperation(ctx, opParams)
		}
		return res, err
	}

	tree := nativeULID(in.OpID, in.Attempt, in.Time)
	native := format.NativeName(in.Branch, tree)
	// Pin what the fork commit will name, then check it still exists: a
	// cleanup that condemned it first refuses the pin (not_retained); one
	// that marks later sees the pin and keeps it; one that finished before
	// the pin deleted the commit before its versions, which the probe sees.
	pins := []catalog.Pin{{Kind: catalog.ObjectCommit, Key: format.CommitIDKey(in.Graph, source.ID)}}
	for table, v := range source.Pins {
		pins = append(pins, catalog.Pin{Kind: catalog.ObjectTableVersion, Key: format.TableVersionKey(in.Graph, table, v)})
	}
	// One ledger transaction records the operation, its pins and — when no
	// probe must come between them — the witness of the intent.
	var done *catalog.Operation
	var held *catalog.Incarnation
	witness := func(tx pgx.Tx) error {
		_, err := a.Catalog.IncarnationInsertDisjointTx(ctx, tx, catalog.IncarnationInsertParams{
			Graph: in.Graph, Logical: in.Branch, Native: native, Tree: tree.String(), OpID: in.OpID})
		var exists *catalog.IncarnationExistsError
		if errors.As(err, &exists) {
			if exists.Existing.OpID == in.OpID && exists.Existing.Native == native {
				return nil // our own witness, from an execution whose result was lost with its worker
			}
			held = &exists.Existing
			return nil // commit the operation and pins; FinishCreate records the outcome and releases them
		}
		return err
	}
	err = a.Catalog.InTx(ctx, func(tx pgx.Tx) error {
		op, err := a.Catalog.OperationInsertTx(ctx, tx, opParams)
		if err != nil {
			return err
		}
		if op.State == catalog.OperationDone && in.Attempt == 1 {
			done = &op
			return nil
		}
		if err := a.Catalog.PinsRegisterTx(ctx, tx, catalog.PinsRegisterParams{OpID: in.OpID, Graph: in.Graph, Pins: pins}); err != nil {
			return err
		}
		if probe {
			return nil
		}
		return witness(tx)
	})
	switch {
	case errors.Is(err, catalog.ErrDuplicate):
		return PrepareCreateResult{Outcome: outcome.Conflict, Foreign: true,
			Message: fmt.Sprintf("operation id %q was already used for a different request", in.OpID)}, nil
	case errors.Is(err, catalog.ErrCondemned):
		res, _ := end(outcome.NotRetained, "source commit %s is condemned by a running cleanup: %v", source.ID, err)
		return res, a.recordOperation(ctx, opParams)
	case err != nil:
		return PrepareCreateResult{}, fmt.Errorf("record operation and pins: %w", err)
	case done != nil:
		// A repeated request with the idempotency key of a finished create.
		return end(outcome.Outcome(done.Outcome), "operation %s already finished: %s", in.OpID, done.Error)
	}

	probeKeys := []string{format.CommitIDKey(in.Graph, source.ID)}
	if probe {
		for table, v := range source.Pins {
			probeKeys = append(probeKeys, format.TableVersionKey(in.Graph, table, v))
		}
	}
	for _, key := range probeKeys {
		if _, err := a.Store.Head(ctx, key); err != nil {
			if errors.Is(err, storage.ErrNotFound) {
				return end(outcome.NotRetained, "source commit %s needs %s, which cleanup has reclaimed", source.ID, key)
			}
			return PrepareCreateResult{}, fmt.Errorf("probe source: %w", err)
		}
	}
	if probe {
		if err := a.Catalog.InTx(ctx, witness); err != nil {
			return PrepareCreateResult{}, fmt.Errorf("witness intent: %w", err)
		}
	}
	if held != nil {
		switch {
		case held.Logical != in.Branch:
			return PrepareCreateResult{Outcome: outcome.Conflict, ExistingOp: held.OpID,
				Message: fmt.Sprintf("branch %q (%s) is %s; live branch names must be prefix-disjoint, so %q cannot exist beside it", held.Logical, held.Native, held.State, in.Branch)}, nil
		case held.State == catalog.IncarnationLive:
			return PrepareCreateResult{Outcome: outcome.Conflict, ExistingOp: held.OpID,
				Message: fmt.Sprintf("branch %q already exists (%s)", held.Logical, held.Native)}, nil
		case held.State == catalog.IncarnationInDoubt:
			return PrepareCreateResult{Outcome: outcome.InDoubt, ExistingOp: held.OpID, Native: held.Native,
				Message: fmt.Sprintf("a create of %q is in doubt and settling (operation %s); watch or abandon that operation", held.Logical, held.OpID)}, nil
		default:
			return PrepareCreateResult{Outcome: outcome.Conflict, ExistingOp: held.OpID,
				Message: fmt.Sprintf("%q is held by %s in state %s (operation %s)", in.Branch, held.Native, held.State, held.OpID)}, nil
		}
	}

	author := in.Author
	if author == "" {
		author = "graft"
	}
	message := in.Message
	if message == "" {
		message = fmt.Sprintf("create branch %s from %s", in.Branch, source.ID)
	}
	fork := format.Commit{
		ID:      format.CommitID{Tree: tree, Seq: 0},
		Branch:  in.Branch,
		Parents: []format.CommitID{source.ID},
		Pins:    source.Pins,
		Lineage: format.Lineage(tree, source),
		Author:  author,
		Message: message,
		Time:    in.Time,
		Op:      in.OpID,
	}
	forkBytes, err := format.EncodeCommit(fork)
	if err != nil {
		return end(outcome.Invalid, "%v", err)
	}
	refBytes, err := format.EncodeBranchRef(format.BranchRef{State: format.RefLive, Branch: in.Branch, Native: native, Tree: tree, Op: in.OpID})
	if err != nil {
		return end(outcome.Invalid, "%v", err)
	}
	return PrepareCreateResult{
		Native: native, SourceCommit: source.ID.String(), ForkID: fork.ID.String(),
		ForkBytes: forkBytes, RefBytes: refBytes,
	}, nil
}

// checkNameFree asks storage — the authority on what is live — whether the
// name or a '/'-prefix relative of it is a live branch: one LIST covering the
// name and its descendants, one per ancestor, and a GET only for refs found
// (a new name usually has none). The ledger's own check, under its lock,
// covers creates racing each other; this one covers refs the ledger never saw.
func (a *Activities) checkNameFree(ctx context.Context, graphName, logical string) (PrepareCreateResult, error) {
	prefixes := []string{format.BranchRefsPrefix(graphName) + logical}
	for i := 0; i < len(logical); i++ {
		if logical[i] == '/' {
			prefixes = append(prefixes, format.BranchRefPrefix(graphName, logical[:i]))
		}
	}
	for _, prefix := range prefixes {
		var found error
		err := storage.ListAll(ctx, a.Store, prefix, func(o storage.ObjectInfo) error {
			native, err := format.ParseBranchRefKey(graphName, o.Key)
			if err != nil {
				return nil
			}
			other, _, err := format.ParseNative(native)
			if err != nil || !(other == logical || strings.HasPrefix(other, logical+"/") || strings.HasPrefix(logical, other+"/")) {
				return nil
			}
			obj, err := a.Store.Get(ctx, o.Key)
			if errors.Is(err, storage.ErrNotFound) {
				return nil
			}
			if err != nil {
				return err
			}
			if ref, err := format.DecodeBranchRef(obj.Body); err == nil && ref.State == format.RefLive {
				if other == logical {
					found = fmt.Errorf("branch %q already exists (%s)", logical, native)
				} else {
					found = fmt.Errorf("branch %q (%s) is live; live branch names must be prefix-disjoint, so %q cannot exist beside it", other, native, logical)
				}
				return errStopList
			}
			return nil
		})
		if found != nil {
			return PrepareCreateResult{Outcome: outcome.Conflict, Message: found.Error()}, nil
		}
		if err != nil {
			return PrepareCreateResult{}, fmt.Errorf("check branch name: %w", err)
		}
	}
	return PrepareCreateResult{}, nil
}

var errStopList = errors.New("stop listing")

// recordOperation records an operation that ends before any pin or witness,
// so the ledger's audit log has it when FinishCreate sets its outcome.
func (a *Activities) recordOperation(ctx context.Context, p catalog.OperationInsertParams) error {
	if _, err := a.Catalog.OperationInsert(ctx, p); err != nil && !errors.Is(err, catalog.ErrDuplicate) {
		return fmt.Errorf("record operation: %w", err)
	}
	return nil
}

// resolveSource reads the commit a new branch starts from. probe reports
// whether its pinned versions must be checked: a branch head is a retention
// root and needs no check; an arbitrary commit or tag may be older than
// cleanup's windows.
func (a *Activities) resolveSource(ctx context.Context, in PrepareCreateInput) (format.Commit, bool, PrepareCreateResult, error) {
	end := func(o outcome.Outcome, f string, args ...any) (format.Commit, bool, PrepareCreateResult, error) {
		return format.Commit{}, false, PrepareCreateResult{Outcome: o, Message: fmt.Sprintf(f, args...)}, nil
	}
	switch {
	case in.SourceCommit != "":
		if _, err := format.ParseCommitID(in.SourceCommit); err != nil {
			return end(outcome.Invalid, "source commit: %v", err)
		}
		c, err := graph.ReadCommit(ctx, a.Store, in.Graph, in.SourceCommit)
		if errors.Is(err, graph.ErrCommitNotFound) {
			id, _ := format.ParseCommitID(in.SourceCommit)
			run, reclaimed, lerr := a.Catalog.KeyReclaimed(ctx, catalog.KeyReclaimedParams{Graph: in.Graph, Key: format.CommitIDKey(in.Graph, id)})
			if lerr != nil {
				return format.Commit{}, false, PrepareCreateResult{}, fmt.Errorf("look up reclaimed commit: %w", lerr)
			}
			if reclaimed {
				return end(outcome.NotRetained, "commit %s was reclaimed by cleanup run %s", in.SourceCommit, run)
			}
			return end(outcome.NotFound, "commit %s does not exist", in.SourceCommit)
		}
		if err != nil {
			return fail(err, "read source commit")
		}
		return c, true, PrepareCreateResult{}, nil
	case in.SourceTag != "":
		if err := format.ValidateTagName(in.SourceTag); err != nil {
			return end(outcome.Invalid, "source tag: %v", err)
		}
		obj, err := a.Store.Get(ctx, format.TagKey(in.Graph, in.SourceTag))
		if errors.Is(err, storage.ErrNotFound) {
			return end(outcome.NotFound, "tag %q does not exist", in.SourceTag)
		}
		if err != nil {
			return fail(err, "read source tag")
		}
		tag, err := format.DecodeTag(obj.Body)
		if err != nil {
			return fail(err, "decode source tag")
		}
		if tag.State != format.TagLive {
			return end(outcome.NotFound, "tag %q was deleted", in.SourceTag)
		}
		c, err := graph.ReadCommit(ctx, a.Store, in.Graph, tag.Commit.String())
		if errors.Is(err, graph.ErrCommitNotFound) {
			return end(outcome.NotRetained, "tag %q names commit %s, which no longer exists", in.SourceTag, tag.Commit)
		}
		if err != nil {
			return fail(err, "read tagged commit")
		}
		return c, true, PrepareCreateResult{}, nil
	default:
		name := in.SourceBranch
		if name == "" {
			name = "main"
		}
		b, err := graph.ResolveBranch(ctx, a.Store, in.Graph, name)
		if errors.Is(err, graph.ErrBranchNotFound) {
			return end(outcome.NotFound, "source branch %q does not exist", name)
		}
		if errors.Is(err, graph.ErrMultipleLive) {
			return end(outcome.Conflict, "source branch %q has several live incarnations; run `graft branch repair %s %s --keep NATIVE`", name, in.Graph, name)
		}
		if err != nil {
			return fail(err, "resolve source branch")
		}
		c, err := graph.ReadHead(ctx, a.Store, in.Graph, b.Tree)
		if err != nil {
			return fail(err, "read source head")
		}
		return c, false, PrepareCreateResult{}, nil
	}
}

func fail(err error, what string) (format.Commit, bool, PrepareCreateResult, error) {
	if errors.Is(err, format.ErrMalformed) || errors.Is(err, format.ErrUnsupportedFormat) || errors.Is(err, format.ErrTooLarge) {
		return format.Commit{}, false, PrepareCreateResult{Outcome: outcome.Invalid, Message: fmt.Sprintf("%s: %v", what, err)}, nil
	}
	return format.Commit{}, false, PrepareCreateResult{}, fmt.Errorf("%s: %w", what, err)
}

// CloneTree writes the new tree's fork commit with put-if-absent, settling an
// ambiguous answer by read-back and byte-identical re-issue, then witnesses
// "cloned" — before the ref put that could make the tree reachable.
func (a *Activities) CloneTree(ctx context.Context, in CloneInput) (CloneResult, error) {
	id, err := format.ParseCommitID(in.ForkID)
	if err != nil {
		return CloneResult{State: CloneNotCommitted, Message: err.Error()}, nil
	}
	res, err := graph.PutIfAbsent(ctx, a.Store, format.CommitIDKey(in.Graph, id), in.ForkBytes)
	switch {
	case err == nil && res.Outcome == graph.PutTaken:
		return CloneResult{State: CloneNotCommitted, Message: "the fork commit's key holds other bytes"}, nil
	case err == nil:
	case errors.Is(err, storage.ErrAmbiguous):
		return CloneResult{State: CloneUnknown, Message: err.Error()}, nil
	case errors.Is(err, storage.ErrRefused), errors.Is(err, storage.ErrPreconditionFailed),
		errors.Is(err, storage.ErrInvalidKey), errors.Is(err, storage.ErrInvalidArgument):
		return CloneResult{State: CloneNotCommitted, Message: err.Error()}, nil
	default:
		return CloneResult{}, fmt.Errorf("put fork commit: %w", err)
	}
	if _, err := a.Catalog.IncarnationSetState(ctx, catalog.IncarnationSetStateParams{
		Graph: in.Graph, Native: in.Native, From: catalog.IncarnationIntent, To: catalog.IncarnationCloned,
	}); err != nil {
		return CloneResult{}, fmt.Errorf("witness cloned: %w", err)
	}
	return CloneResult{State: CloneCommitted}, nil
}

// PutRef sends the incarnation's ref with put-if-absent, once; the workflow
// decides what to do with an ambiguous answer. A failed condition is settled
// here by reading the key: our bytes (a lost acknowledgement), a fence, or
// another writer's bytes.
func (a *Activities) PutRef(ctx context.Context, in RefInput) (RefResult, error) {
	key := format.BranchRefKey(in.Graph, in.Native)
	_, err := a.Store.Put(ctx, key, in.RefBytes, storage.PutOptions{IfNoneMatch: true})
	if in.Phase == "settle" && storage.CodeOf(err) == storage.CodeAmbiguous {
		// Settling: the key may hold our bytes from any earlier put (a held
		// one that landed since); a read answers without waiting.
		read, rerr := a.ReadRef(ctx, in)
		if rerr != nil || read.State == RefAbsent {
			return RefResult{State: RefAmbiguous, Message: err.Error()}, nil
		}
		return read, nil
	}
	switch storage.CodeOf(err) {
	case storage.CodeUnknown:
		if err != nil {
			return RefResult{State: RefAmbiguous, Message: err.Error()}, nil
		}
		return a.refIsOurs(ctx, in)
	case storage.CodePreconditionFailed:
		return a.ReadRef(ctx, in)
	case storage.CodeRefused, storage.CodeInvalidKey, storage.CodeInvalidArgument:
		return RefResult{State: RefRefused, Message: err.Error()}, nil
	default:
		return RefResult{State: RefAmbiguous, Message: err.Error()}, nil
	}
}

// ReadRef reads the incarnation's ref key and says whose bytes it holds.
func (a *Activities) ReadRef(ctx context.Context, in RefInput) (RefResult, error) {
	obj, err := a.Store.Get(ctx, format.BranchRefKey(in.Graph, in.Native))
	if errors.Is(err, storage.ErrNotFound) {
		return RefResult{State: RefAbsent}, nil
	}
	if err != nil {
		return RefResult{}, fmt.Errorf("read ref: %w", err)
	}
	if bytes.Equal(obj.Body, in.RefBytes) {
		return a.refIsOurs(ctx, in)
	}
	ref, derr := format.DecodeBranchRef(obj.Body)
	if derr == nil && ref.State == format.RefFence {
		return RefResult{State: RefFence, Message: fmt.Sprintf("fenced by operation %s (%s)", ref.Op, ref.Reason)}, nil
	}
	return RefResult{State: RefOther, Message: fmt.Sprintf("%d bytes of another writer", len(obj.Body))}, nil
}

// refIsOurs records that the ref is published: in one ledger transaction the
// witness goes live and the operation finishes as created, releasing its pins.
func (a *Activities) refIsOurs(ctx context.Context, in RefInput) (RefResult, error) {
	var settled catalog.IncarnationSettleResult
	err := a.Catalog.InTx(ctx, func(tx pgx.Tx) error {
		var err error
		settled, err = a.Catalog.IncarnationSettleTx(ctx, tx, catalog.IncarnationSettleParams{Graph: in.Graph, Native: in.Native, To: catalog.IncarnationLive})
		if err != nil {
			return err
		}
		_, err = a.Catalog.OperationFinishTx(ctx, tx, catalog.OperationFinishParams{ID: in.OpID, Outcome: catalog.OutcomeCreated})
		return err
	})
	if err != nil {
		return RefResult{}, fmt.Errorf("witness live: %w", err)
	}
	a.observeWitnessSettled(settled)
	if settled.From != catalog.IncarnationLive {
		a.observeFinished("create_branch", string(catalog.OutcomeCreated))
	}
	return RefResult{State: RefOurs, Finished: true}, nil
}

// settleWitness moves the witness from whatever unsettled state it is in to to.
func (a *Activities) settleWitness(ctx context.Context, graphName, native string, to catalog.IncarnationState) error {
	settled, err := a.Catalog.IncarnationSettle(ctx, catalog.IncarnationSettleParams{Graph: graphName, Native: native, To: to})
	if err != nil {
		return fmt.Errorf("witness %s: %w", to, err)
	}
	a.observeWitnessSettled(settled)
	return nil
}

// observeSettled tells the Observer an in-doubt incarnation was settled.
func (a *Activities) observeWitnessSettled(s catalog.IncarnationSettleResult) {
	if s.From == catalog.IncarnationInDoubt && a.Observer != nil {
		a.Observer.InDoubt(-1)
		a.Observer.Settled("create_branch", s.Incarnation.UpdatedAt.Sub(s.FromSince))
	}
}

// MarkInDoubt witnesses that the ref put may still land: the incarnation and
// its operation are in doubt until settled.
func (a *Activities) MarkInDoubt(ctx context.Context, in MarkInDoubtInput) error {
	inc, err := a.Catalog.IncarnationSetState(ctx, catalog.IncarnationSetStateParams{
		Graph: in.Graph, Native: in.Native, From: catalog.IncarnationCloned, To: catalog.IncarnationInDoubt,
	})
	if err != nil {
		return fmt.Errorf("witness in_doubt: %w", err)
	}
	if _, err := a.Catalog.OperationSetState(ctx, catalog.OperationSetStateParams{
		ID: in.OpID, From: catalog.OperationRunning, To: catalog.OperationInDoubt,
	}); err != nil {
		return fmt.Errorf("operation in_doubt: %w", err)
	}
	if a.Observer != nil && inc.State == catalog.IncarnationInDoubt {
		a.Observer.InDoubt(+1)
	}
	return nil
}

// FenceRef wins the incarnation's ref key with a fence (put-if-absent), so no
// late put of the ref can ever land. Losing to our own ref means the create
// happened after all.
func (a *Activities) FenceRef(ctx context.Context, in FenceInput) (RefResult, error) {
	logical, tree, err := format.ParseNative(in.Native)
	if err != nil {
		return RefResult{}, fmt.Errorf("fence ref: %w", err)
	}
	fence, err := format.EncodeBranchRef(format.BranchRef{State: format.RefFence, Branch: logical, Native: in.Native, Tree: tree, Op: in.OpID, Reason: fenceReason(in.Reason)})
	if err != nil {
		return RefResult{}, fmt.Errorf("encode fence: %w", err)
	}
	res, err := graph.PutIfAbsent(ctx, a.Store, format.BranchRefKey(in.Graph, in.Native), fence)
	if err != nil {
		if errors.Is(err, storage.ErrAmbiguous) || errors.Is(err, storage.ErrRefused) {
			return RefResult{State: RefAmbiguous, Message: err.Error()}, nil
		}
		return RefResult{}, fmt.Errorf("put fence: %w", err)
	}
	if res.Outcome != graph.PutTaken {
		return RefResult{State: RefFence, Message: "fence won"}, nil
	}
	ref, derr := format.DecodeBranchRef(res.Existing)
	switch {
	case derr == nil && ref.State == format.RefFence:
		return RefResult{State: RefFence, Message: "already fenced by operation " + ref.Op}, nil
	case derr == nil && ref.State == format.RefLive && ref.Op == in.OpID && ref.Native == in.Native:
		res, err := a.refIsOurs(ctx, RefInput{OpID: in.OpID, Graph: in.Graph, Native: in.Native})
		res.Message = "our ref landed before the fence"
		return res, err
	}
	return RefResult{State: RefOther, Message: "another writer's ref holds the key"}, nil
}

// fenceReason keeps the fence's reason a short word, as the format asks.
func fenceReason(reason string) string {
	switch {
	case len(reason) >= 9 && reason[:9] == "abandoned":
		return "abandon"
	default:
		return "unpublished"
	}
}

// ReclaimClone deletes the fork commit of an incarnation whose ref key a fence
// holds, and witnesses it unpublished. A fork commit that lands later (its put
// was ambiguous) is garbage for the next cleanup: the fence makes it unreachable.
func (a *Activities) ReclaimClone(ctx context.Context, in ReclaimInput) error {
	id, err := format.ParseCommitID(in.Fork)
	if err != nil {
		return fmt.Errorf("reclaim clone: %w", err)
	}
	if err := a.Store.Delete(ctx, format.CommitIDKey(in.Graph, id)); err != nil {
		return fmt.Errorf("delete fork commit: %w", err)
	}
	return a.settleWitness(ctx, in.Graph, in.Native, catalog.IncarnationUnpublished)
}

// FinishCreate records the operation's outcome and releases its pins. A
// create that failed before any effect leaves no open witness behind.
func (a *Activities) FinishCreate(ctx context.Context, in FinishInput) error {
	out := catalog.Outcome(in.Outcome)
	if in.Outcome == "" {
		out = catalog.OutcomeFailed
		// A witness still in intent names an incarnation whose clone was never
		// sent (the clone step had not started): settle it so the name is free.
		// The workflow may not know its native name if prepare's answer was
		// lost, so look the operation's witnesses up.
		incs, err := a.Catalog.IncarnationListByLogical(ctx, catalog.IncarnationListByLogicalParams{Graph: in.Graph, Logical: in.Branch})
		if err != nil && !errors.Is(err, catalog.ErrInvalid) {
			return fmt.Errorf("read witnesses: %w", err)
		}
		for _, inc := range incs {
			if inc.OpID == in.OpID && inc.State == catalog.IncarnationIntent {
				if err := a.settleWitness(ctx, in.Graph, inc.Native, catalog.IncarnationUnpublished); err != nil {
					return err
				}
			}
		}
	}
	if _, err := a.Catalog.OperationFinish(ctx, catalog.OperationFinishParams{ID: in.OpID, Outcome: out, Error: in.Message}); err != nil {
		if errors.Is(err, catalog.ErrNotFound) { // failed before the operation was recorded
			return nil
		}
		return fmt.Errorf("finish operation: %w", err)
	}
	a.observeFinished("create_branch", string(out))
	return nil
}
