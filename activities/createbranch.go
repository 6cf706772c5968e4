package activities

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/storage"
)

// PrepareCreateInput is the input of PrepareCreate.
type PrepareCreateInput struct {
	OpID, Graph, Branch string
	// At most one source; all empty means the head of main.
	SourceBranch, SourceCommit, SourceTag string
	Author, Message                       string
	// Time is the operation's start, in the fork commit: a re-issue is byte-identical.
	Time time.Time
	// Attempt is 1, or 2 for the retry under a fresh native name.
	Attempt           int
	WorkflowID, RunID string // the workflow's; RunID claims the ledger row
}

// PrepareCreateResult is what PrepareCreate decided. A non-empty Outcome ends the create
// before any storage effect (in_doubt: another operation's create of the name is in doubt).
type PrepareCreateResult struct {
	Outcome    outcome.Outcome
	Message    string
	ExistingOp string // with Outcome in_doubt or conflict: the operation holding the name
	Owned      bool   // the ledger row is this run's: the kernel finishes it

	Native, SourceCommit, ForkID string
	ForkBytes, RefBytes          []byte     // what every put and re-issue sends
	ForkChunks                   []ChunkPut // the chunks the fork commit names that its source's did not
	// RefSpec is the ref put, recorded as the pending write with the witness
	// (WriteInput.PendingRecorded); nil from an older worker's prepare.
	RefSpec *WriteSpec `json:",omitempty"`
	// Recorded is the result this run recorded when it finished the operation, found
	// when the step runs again after that end (docs/operations.md).
	Recorded json.RawMessage `json:",omitempty"`
}

// CloneState is what CloneTree proved about the fork commit.
type CloneState string

const (
	CloneCommitted    CloneState = "committed"     // our bytes are stored
	CloneNotCommitted CloneState = "not_committed" // definitely not stored (another writer's bytes)
	CloneRefused      CloneState = "refused"       // the store definitely refused the put: nothing was stored
	CloneUnknown      CloneState = "unknown"       // still ambiguous after re-issues; may land later
)

// CloneInput is the input of CloneTree.
type CloneInput struct {
	Owner                 Owner
	Graph, Native, ForkID string
	ForkBytes             []byte
	ForkChunks            []ChunkPut // put before the fork commit
}

// CloneResult is the output of CloneTree.
type CloneResult struct {
	State   CloneState
	Message string
}

// ReclaimInput is the input of ReclaimClone.
type ReclaimInput struct {
	Owner                       Owner
	Graph, Native, Fork, Reason string
}

// PrepareCreate validates the request, resolves the source commit, mints the native name and
// encodes the fork commit and the ref (every later put re-sends these bytes) before any ledger
// write, then claims the operation, pins the source, witnesses the intent and probes the source.
func (a *Activities) PrepareCreate(ctx context.Context, in PrepareCreateInput) (PrepareCreateResult, error) {
	end := func(o outcome.Outcome, msg string, args ...any) (PrepareCreateResult, error) {
		return PrepareCreateResult{Outcome: o, Message: fmt.Sprintf(msg, args...)}, nil
	}
	if err := firstError(format.ValidateGraphName(in.Graph), format.ValidateBranchName(in.Branch),
		format.ValidateOp(in.OpID), format.ValidateMessage(in.Message), validAuthor(in.Author)); err != nil {
		return end(outcome.Invalid, "%v", err)
	}
	if len(slices.DeleteFunc([]string{in.SourceBranch, in.SourceCommit, in.SourceTag}, func(s string) bool { return s == "" })) > 1 {
		return end(outcome.Invalid, "give at most one source: a branch, a commit or a tag")
	}
	opParams := opRecord(catalog.OpCreateBranch, in.OpID, in.Graph, in.WorkflowID, in.RunID, map[string]string{
		"branch": in.Branch, "source_branch": in.SourceBranch, "source_commit": in.SourceCommit,
		"source_tag": in.SourceTag, "author": in.Author, "message": in.Message,
	})

	// The commit the branch starts from. probe: check it once pinned, since a branch head is
	// a retention root but an arbitrary commit or tag may be older than cleanup's windows.
	var source graph.Commit
	var o outcome.Outcome
	var msg string
	var err error
	probe := in.SourceCommit != "" || in.SourceTag != ""
	if probe {
		source, o, msg, err = a.resolveCommit(ctx, in.Graph, in.SourceCommit, in.SourceTag)
		if o == outcome.NotFound {
			if _, gerr := graph.ReadGraph(ctx, a.Store, in.Graph); errors.Is(gerr, graph.ErrGraphNotFound) {
				msg = fmt.Sprintf("graph %q does not exist; create it with `graft graph init %s`", in.Graph, in.Graph)
			}
		}
	} else {
		var h graph.Head
		h, o, msg, err = a.readBranchHead(ctx, in.Graph, cmp.Or(in.SourceBranch, graph.DefaultBranch))
		source = h.Commit
	}
	if err != nil {
		return PrepareCreateResult{}, err
	}
	if o != "" {
		return a.recordEarly(ctx, opParams, PrepareCreateResult{Outcome: o, Message: msg})
	}

	tree := nativeULID(in.OpID, in.Attempt, in.Time)
	native := format.NativeName(in.Branch, tree)
	author, message := cmp.Or(in.Author, "graft"), cmp.Or(in.Message, fmt.Sprintf("create branch %s from %s", in.Branch, source.ID))
	// The fork names the source's pins map as it stands; the ref names the fork commit as
	// its head (docs/format.md, "Branch create").
	g, err := a.openGraph(in.Graph)
	if err != nil {
		return end(outcome.Invalid, "%v", err)
	}
	plan, err := g.PlanForkOn(ctx, graph.ForkSpec{Branch: in.Branch, Tree: tree, Source: source.ID.String(),
		Author: author, Message: message, Time: in.Time, Op: in.OpID}, source)
	switch {
	case errors.Is(err, graph.ErrInvalid):
		return end(outcome.Invalid, "fork commit: %v", err)
	case errors.Is(err, graph.ErrCommitNotFound):
		return end(outcome.NotRetained, "source commit %s no longer exists", source.ID)
	case err != nil:
		return PrepareCreateResult{}, fmt.Errorf("plan fork: %w", err)
	}

	if res, err := a.checkNameFree(ctx, in.Graph, in.Branch, native); err != nil || res.Outcome != "" {
		if err != nil {
			return res, err
		}
		return a.recordEarly(ctx, opParams, res)
	}

	// Pin the source commit, then check it still exists: a cleanup that condemned it first
	// refuses the pin; one that finished before deleted referrers before referents
	// (docs/format.md), so a source commit the probe finds has them all.
	pins := keyPins(catalog.ObjectCommit, format.CommitIDKey(in.Graph, source.ID))
	// The ref put the kernel will send, recorded as the pending write with the witness in one
	// commit before the clone is sent (docs/workflows.md).
	refSpec := WriteSpec{Kind: WriteRef, Graph: in.Graph, Body: plan.RefBody, Branch: in.Branch, Landed: outcome.Created, Subject: native}
	// One transaction claims the operation, records its pins and, when no probe must come
	// between them, the witness of the intent.
	var c claimed
	var held *catalog.Incarnation
	witness := func(tx pgx.Tx) error {
		_, err := a.Catalog.IncarnationInsertDisjointTx(ctx, tx, catalog.IncarnationInsertParams{
			Graph: in.Graph, Logical: in.Branch, Native: native, Tree: tree.String(), OpID: in.OpID})
		var exists *catalog.IncarnationExistsError
		if errors.As(err, &exists) {
			if exists.Existing.OpID != in.OpID || exists.Existing.Native != native {
				held = &exists.Existing
				return nil // commit the operation and pins; the kernel's finish records the outcome and releases them
			}
			err = nil // our own witness, from an execution whose result was lost with its worker
		}
		if err != nil {
			return err
		}
		return a.recordPendingTx(ctx, tx, Owner{OpID: in.OpID, Run: in.RunID}, refSpec)
	}
	err = a.Catalog.InTx(ctx, func(tx pgx.Tx) error {
		held = nil
		var err error
		if c, err = a.claim(ctx, tx, opParams); err != nil || !c.owned {
			return err
		}
		if err := a.Catalog.PinsRegisterTx(ctx, tx, catalog.PinsRegisterParams{OpID: in.OpID, Graph: in.Graph, Pins: pins, Owner: in.RunID}); err != nil {
			return err
		}
		if probe {
			return nil
		}
		return witness(tx)
	})
	switch {
	case errors.Is(err, catalog.ErrCondemned):
		res, _ := end(outcome.NotRetained, "source commit %s is condemned by a running cleanup: %v", source.ID, err)
		return a.recordEarly(ctx, opParams, res)
	case err != nil:
		return PrepareCreateResult{}, fmt.Errorf("record operation and pins: %w", err)
	case !c.owned:
		return PrepareCreateResult{Outcome: c.outcome, Message: c.message, Recorded: c.recorded}, nil
	}

	if missing, err := a.probeKeys(ctx, pins[0].Key); err != nil || missing != "" {
		if err != nil {
			return PrepareCreateResult{}, fmt.Errorf("probe source: %w", err)
		}
		return PrepareCreateResult{Owned: true, Outcome: outcome.NotRetained,
			Message: fmt.Sprintf("source commit %s needs %s, which cleanup has reclaimed", source.ID, missing)}, nil
	}
	if probe {
		if err := a.Catalog.InTx(ctx, func(tx pgx.Tx) error {
			if _, err := a.Catalog.OperationLockOwnedTx(ctx, tx, in.OpID, in.RunID); err != nil {
				return err
			}
			return witness(tx)
		}); err != nil {
			return PrepareCreateResult{}, fmt.Errorf("witness intent: %w", err)
		}
	}
	if held != nil {
		r := PrepareCreateResult{Owned: true, ExistingOp: held.OpID}
		switch {
		case held.Logical != in.Branch:
			r.Outcome, r.Message = outcome.Conflict, fmt.Sprintf("branch %q (%s) is %s; live branch names must be prefix-disjoint, so %q cannot exist beside it", held.Logical, held.Native, held.State, in.Branch)
		case held.State == catalog.IncarnationLive:
			r.Outcome, r.Message = outcome.Conflict, fmt.Sprintf("branch %q already exists (%s)", held.Logical, held.Native)
		case held.State == catalog.IncarnationInDoubt:
			r.Outcome, r.Native = outcome.InDoubt, held.Native
			r.Message = fmt.Sprintf("a create of %q is in doubt and settling (operation %s); watch or abandon that operation", held.Logical, held.OpID)
		default:
			r.Outcome, r.Message = outcome.Conflict, fmt.Sprintf("%q is held by %s in state %s (operation %s)", in.Branch, held.Native, held.State, held.OpID)
		}
		return r, nil
	}
	return PrepareCreateResult{
		Owned: true, Native: native, SourceCommit: source.ID.String(), ForkID: plan.Commit.ID.String(),
		ForkBytes: plan.CommitBody, RefBytes: plan.RefBody, ForkChunks: chunkPuts(plan.Chunks), RefSpec: &refSpec,
	}, nil
}

// recordEarly claims a create that ends before any pin or witness, so the ledger has it and
// the kernel's finish records res's outcome; another request's row is left alone.
func (a *Activities) recordEarly(ctx context.Context, p catalog.OperationInsertParams, res PrepareCreateResult) (PrepareCreateResult, error) {
	c, err := a.claim(ctx, nil, p)
	if err != nil || !c.owned {
		return PrepareCreateResult{Outcome: c.outcome, Message: c.message, Recorded: c.recorded}, err
	}
	res.Owned = true
	return res, nil
}

// checkNameFree asks storage, the authority on what is live, whether the name or a
// '/'-prefix relative of it is a live branch: one LIST for the name and its descendants,
// one per ancestor, then a GET of each ref found unless the ledger witnessed it retired
// (docs/format.md, *Known limits*): a retired ref never changes nor is its native reused.
// "unpublished" ones are read: a create reset after its ref landed can settle its witness
// unpublished beside a live ref. A live ref of own, the native this create minted, is this
// operation's (an earlier run reset before its finish): the create goes on.
func (a *Activities) checkNameFree(ctx context.Context, graphName, logical, own string) (PrepareCreateResult, error) {
	prefixes := []string{format.BranchRefsPrefix(graphName) + logical}
	for i := 0; i < len(logical); i++ {
		if logical[i] == '/' {
			prefixes = append(prefixes, format.BranchRefPrefix(graphName, logical[:i]))
		}
	}
	type found struct{ key, native, logical string }
	var refs []found
	for _, prefix := range prefixes {
		err := storage.ListAll(ctx, a.Store, prefix, func(o storage.ObjectInfo) error {
			native, err := format.ParseBranchRefKey(graphName, o.Key)
			if err != nil {
				return nil
			}
			other, _, err := format.ParseNative(native)
			if err != nil || !(other == logical || strings.HasPrefix(other, logical+"/") || strings.HasPrefix(logical, other+"/")) {
				return nil
			}
			refs = append(refs, found{key: o.Key, native: native, logical: other})
			return nil
		})
		if err != nil {
			return PrepareCreateResult{}, fmt.Errorf("check branch name: %w", err)
		}
	}
	if len(refs) == 0 {
		return PrepareCreateResult{}, nil
	}
	natives := mapped(refs, func(r found) string { return r.native })
	witnessed, err := a.Catalog.IncarnationListByNatives(ctx, catalog.IncarnationListByNativesParams{Graph: graphName, Natives: natives})
	if err != nil {
		return PrepareCreateResult{}, fmt.Errorf("check branch name: %w", err)
	}
	witnessed = slices.DeleteFunc(witnessed, func(w catalog.Incarnation) bool { return w.State != catalog.IncarnationRetired })
	retired := setOf(mapped(witnessed, func(w catalog.Incarnation) string { return w.Native }))
	for _, r := range refs {
		if retired[r.native] || r.native == own {
			continue
		}
		obj, err := a.Store.Get(ctx, r.key)
		if errors.Is(err, storage.ErrNotFound) {
			continue
		}
		if err != nil {
			return PrepareCreateResult{}, fmt.Errorf("check branch name: %w", err)
		}
		if ref, err := format.DecodeBranchRef(obj.Body); err == nil && ref.State == format.RefLive {
			msg := fmt.Sprintf("branch %q (%s) is live; live branch names must be prefix-disjoint, so %q cannot exist beside it", r.logical, r.native, logical)
			if r.logical == logical {
				msg = fmt.Sprintf("branch %q already exists (%s)", logical, r.native)
			}
			return PrepareCreateResult{Outcome: outcome.Conflict, Message: msg}, nil
		}
	}
	return PrepareCreateResult{}, nil
}

// CloneTree writes the new tree's fork commit with put-if-absent. It records nothing: the
// prepare's witness already says the tree and its ref may exist.
func (a *Activities) CloneTree(ctx context.Context, in CloneInput) (CloneResult, error) {
	id, err := format.ParseCommitID(in.ForkID)
	if err != nil {
		return CloneResult{State: CloneNotCommitted, Message: err.Error()}, nil
	}
	// The fork's content-addressed chunks, then the commit that names them.
	puts := append(slices.Clone(in.ForkChunks), ChunkPut{Key: format.CommitIDKey(in.Graph, id), Body: in.ForkBytes})
	for i, p := range puts {
		what := "chunk " + p.Key
		if i == len(puts)-1 {
			what = "the fork commit's key"
		}
		put, err := graph.PutIfAbsent(ctx, a.Store, p.Key, p.Body)
		res, log := CloneResult{State: CloneUnknown}, "graft clone answered ambiguously"
		switch {
		case err == nil && put.Outcome == graph.PutTaken:
			return CloneResult{State: CloneNotCommitted, Message: what + " holds other bytes"}, nil
		case err == nil:
			continue
		case errors.Is(err, storage.ErrAmbiguous):
		case errors.Is(err, storage.ErrRefused), errors.Is(err, storage.ErrInvalidKey), errors.Is(err, storage.ErrInvalidArgument):
			res.State, log = CloneRefused, "graft clone refused"
		default:
			return CloneResult{}, fmt.Errorf("put %s: %w", what, err)
		}
		res.Message = err.Error()
		a.logger(ctx).Info(log, "op_id", in.Owner.OpID, "native", in.Native, "key", p.Key, "detail", res.Message)
		return res, nil
	}
	return CloneResult{State: CloneCommitted}, nil
}

// putRef sends the incarnation's ref with put-if-absent; a failed condition, or an
// ambiguous re-issue (a held put may have landed since), is settled by reading the key.
func (a *Activities) putRef(ctx context.Context, in WriteInput) (Verdict, error) {
	key, err := refKey(in.Spec)
	if err != nil {
		return Verdict{State: Invalid, Message: err.Error()}, nil
	}
	_, err = a.Store.Put(ctx, key, in.Spec.Body, storage.PutOptions{IfNoneMatch: true})
	if err == nil {
		return a.refIsOurs(ctx, in)
	}
	v := putVerdict(err)
	switch {
	case v.State == "":
		return a.readRef(ctx, in)
	case v.State == Ambiguous && in.Attempt > 0:
		read, rerr := a.readRef(ctx, in)
		if rerr != nil || !read.State.Definitive() {
			return v, nil
		}
		return read, nil
	}
	return v, nil
}

func refKey(w WriteSpec) (string, error) {
	ref, err := format.DecodeBranchRef(w.Body)
	if err != nil {
		return "", err
	}
	return format.BranchRefKey(w.Graph, ref.Native), nil
}

func (a *Activities) readRef(ctx context.Context, in WriteInput) (Verdict, error) {
	key, err := refKey(in.Spec)
	if err != nil {
		return Verdict{State: Invalid, Message: err.Error()}, nil
	}
	obj, err := a.Store.Get(ctx, key)
	if errors.Is(err, storage.ErrNotFound) {
		return Verdict{State: Ambiguous, Message: "no ref at the key yet"}, nil
	}
	if err != nil {
		return Verdict{}, fmt.Errorf("read ref: %w", err)
	}
	if bytes.Equal(obj.Body, in.Spec.Body) {
		return a.refIsOurs(ctx, in)
	}
	ref, derr := format.DecodeBranchRef(obj.Body)
	if derr == nil && ref.State == format.RefFence {
		return Verdict{State: Fenced, Message: fmt.Sprintf("fenced by operation %s (%s)", ref.Op, ref.Reason)}, nil
	}
	return Verdict{State: Other, Message: fmt.Sprintf("another writer's ref holds the key (%d bytes)", len(obj.Body))}, nil
}

// refIsOurs records that the ref is published: the witness goes live and the operation
// finishes created (settleWitness). A run that no longer owns the row records nothing.
func (a *Activities) refIsOurs(ctx context.Context, in WriteInput) (Verdict, error) {
	ref, err := format.DecodeBranchRef(in.Spec.Body)
	if err != nil {
		return Verdict{State: Invalid, Message: err.Error()}, nil
	}
	settled, err := a.settleWitness(ctx, in.Owner, in.Spec.Graph, ref.Native, catalog.IncarnationLive, in.Result)
	switch {
	case errors.Is(err, catalog.ErrNotOwner), errors.Is(err, catalog.ErrStateConflict):
		return Verdict{State: Landed, Message: "the ref is ours; the ledger row is not this run's to finish"}, nil
	case err != nil:
		return Verdict{}, fmt.Errorf("witness live: %w", err)
	}
	a.observeWitnessSettled(settled)
	if settled.From != catalog.IncarnationLive {
		a.observeFinished("create_branch", string(catalog.OutcomeCreated))
	}
	return Verdict{State: Landed, Recorded: true}, nil
}

// settleWitness settles the witness of native to `to` under o's guard; settled live, the
// create finishes created in the same transaction. Recoverable: lost in a Postgres crash,
// it leaves the witness unsettled beside our ref or a fence, which the reconciler finds.
func (a *Activities) settleWitness(ctx context.Context, o Owner, graphName, native string, to catalog.IncarnationState, result json.RawMessage) (catalog.IncarnationSettleResult, error) {
	var settled catalog.IncarnationSettleResult
	err := a.Catalog.InTxRecoverable(ctx, func(tx pgx.Tx) error {
		if _, err := a.Catalog.OperationLockOwnedTx(ctx, tx, o.OpID, o.Run); err != nil {
			return err
		}
		var err error
		if settled, err = a.Catalog.IncarnationSettleTx(ctx, tx, catalog.IncarnationSettleParams{Graph: graphName, Native: native, To: to}); err != nil || to != catalog.IncarnationLive {
			return err
		}
		_, err = a.Catalog.OperationFinishTx(ctx, tx, catalog.OperationFinishParams{ID: o.OpID, Outcome: catalog.OutcomeCreated, Owner: o.Run, Result: result})
		return err
	})
	return settled, err
}

func (a *Activities) observeWitnessSettled(s catalog.IncarnationSettleResult) {
	if s.From == catalog.IncarnationInDoubt && a.Observer != nil {
		a.Observer.Settled("create_branch", s.Incarnation.UpdatedAt.Sub(s.FromSince))
	}
}

// fenceRef wins the incarnation's ref key with a fence (put-if-absent), so no late put of
// the ref can land; losing to our own ref means the create happened after all.
func (a *Activities) fenceRef(ctx context.Context, in WriteInput) (Verdict, error) {
	ref, err := format.DecodeBranchRef(in.Spec.Body)
	if err != nil {
		return Verdict{State: Invalid, Message: err.Error()}, nil
	}
	fence, err := format.EncodeBranchRef(format.BranchRef{State: format.RefFence, Branch: ref.Branch, Native: ref.Native, Tree: ref.Tree,
		Op: in.Owner.OpID, Reason: fenceReason(in.Reason)})
	if err != nil {
		return Verdict{}, fmt.Errorf("encode fence: %w", err)
	}
	res, err := graph.PutIfAbsent(ctx, a.Store, format.BranchRefKey(in.Spec.Graph, ref.Native), fence)
	switch {
	case err != nil:
		return storeVerdict(err, "put fence")
	case res.Outcome != graph.PutTaken:
		return Verdict{State: Fenced, Message: "fence won"}, nil
	}
	have, derr := format.DecodeBranchRef(res.Existing)
	switch {
	case derr == nil && have.State == format.RefFence:
		return Verdict{State: Fenced, Message: "already fenced by operation " + have.Op}, nil
	case bytes.Equal(res.Existing, in.Spec.Body):
		v, err := a.refIsOurs(ctx, in)
		v.Message = "our ref landed before the fence"
		return v, err
	}
	return Verdict{State: Other, Message: "another writer's ref holds the key"}, nil
}

// fenceReason keeps the fence's reason a short word, as the format asks.
func fenceReason(reason string) string {
	switch {
	case strings.HasPrefix(reason, "abandon"), strings.HasPrefix(reason, "cancel"):
		return "abandon"
	default:
		return "unpublished"
	}
}

// ReclaimClone deletes the fork commit of an incarnation no ref can ever publish, and
// witnesses it unpublished; a fork commit that lands later, or whose delete the store
// refuses, is garbage for cleanup.
func (a *Activities) ReclaimClone(ctx context.Context, in ReclaimInput) error {
	if in.Fork != "" { // "": no fork commit was written
		id, err := format.ParseCommitID(in.Fork)
		if err != nil {
			return fmt.Errorf("reclaim clone: %w", err)
		}
		if err := a.Store.Delete(ctx, format.CommitIDKey(in.Graph, id)); err != nil {
			if storage.CodeOf(err) != storage.CodeRefused {
				return fmt.Errorf("delete fork commit: %w", err)
			}
			a.logger(ctx).Info("graft clone delete refused; left for cleanup", "op_id", in.Owner.OpID, "native", in.Native, "detail", err.Error())
		}
	}
	settled, err := a.settleWitness(ctx, in.Owner, in.Graph, in.Native, catalog.IncarnationUnpublished, nil)
	switch {
	case errors.Is(err, catalog.ErrNotOwner), errors.Is(err, catalog.ErrStateConflict):
		return nil
	case err != nil:
		return fmt.Errorf("witness unpublished: %w", err)
	}
	a.observeWitnessSettled(settled)
	return nil
}
