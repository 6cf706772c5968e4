package activities

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/bounded"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/workflows/contract"
)

// The successful outcomes of merges and deletes (package outcome); the CLI exits 0 on them.
const (
	OutcomeMerged          = outcome.Merged
	OutcomeAdopted         = outcome.Adopted
	OutcomeAlreadyUpToDate = outcome.AlreadyUpToDate
	OutcomeDeleted         = outcome.Deleted
)

// PlanMergeInput is the input of PlanMerge.
type PlanMergeInput struct {
	OpID, Graph string
	// Source and Target are logical branch names; the merge appends to Target.
	Source, Target string
	// ExpectedHead, when set, is the commit the target's head must be.
	ExpectedHead string
	// Preview plans without recording, pinning or writing anything.
	Preview           bool
	Author, Message   string
	WorkflowID, RunID string // the workflow's; RunID claims the ledger row
	// Cleared, when set, are the heads whose plan every check and approval of a protected
	// target cleared: a plan of the same heads commits; a plan of others waits again.
	Cleared *ClearedHeads `json:",omitempty"`
}

// ClearedHeads are the source and target heads a protected merge's checks and approvals
// cleared.
type ClearedHeads struct{ SourceHead, TargetHead string }

// PlanMergeResult is the plan of a merge and, when it writes, the exact bytes of its commit.
type PlanMergeResult struct {
	// Outcome, when set, ends the merge without a write; for a preview it is the outcome
	// the merge would have.
	Outcome outcome.Outcome
	Message string
	// PendingRecorded: Spec is recorded as the pending write, with the pins of what it names.
	PendingRecorded        bool `json:",omitempty"`
	Owned                  bool // the ledger row is this run's: the kernel finishes it
	Relation               graph.Relation
	SourceHead, TargetHead string
	Bases                  []string
	Tables                 []contract.MergeTable // every table the merge does not leave unchanged
	Unchanged, Conflicts   int
	BaseReads              int             // the merge-base candidates read
	Kind                   outcome.Outcome // the outcome once the commit is stored: merged or adopted
	Committed              bool            // this operation's merge commit is stored already
	// Commit is the merge commit's id; Spec the write of its exact bytes.
	Commit string
	Spec   WriteSpec
	// Gate, when set, is the rule of the protected target the plan must clear before it
	// commits: nothing is recorded but the operation and the pins of its inputs. For a
	// preview it says the merge would wait. Locator is where the ledger has the graph.
	Gate    *contract.MergeRule `json:",omitempty"`
	Locator string              `json:",omitempty"`
	// Recorded is the result this run recorded when it finished the operation, found
	// when the step runs again after that end (docs/operations.md).
	Recorded json.RawMessage `json:",omitempty"`
}

// PlanMerge reads the source and target heads and plans the merge (docs/format.md,
// "Merges"): their merge bases, the object-level three-way plan, then, recorded, pinned and
// the source head probed, the merged versions and the merge commit on the target's head as
// one publish. It writes nothing to storage; a conflict, or nothing to adopt, ends it.
func (a *Activities) PlanMerge(ctx context.Context, in PlanMergeInput) (PlanMergeResult, error) {
	end := func(o outcome.Outcome, f string, args ...any) (PlanMergeResult, error) {
		return PlanMergeResult{Outcome: o, Message: fmt.Sprintf(f, args...)}, nil
	}
	var opErr error
	if !in.Preview {
		opErr = format.ValidateOp(in.OpID)
	}
	if err := firstError(format.ValidateGraphName(in.Graph), format.ValidateBranchName(in.Source),
		format.ValidateBranchName(in.Target), format.ValidateMessage(in.Message), opErr,
		validAuthor(in.Author)); err != nil {
		return end(outcome.Invalid, "%v", err)
	}
	if in.Source == in.Target {
		return end(outcome.Invalid, "cannot merge %q into itself", in.Source)
	}
	if in.ExpectedHead != "" {
		if _, err := format.ParseCommitID(in.ExpectedHead); err != nil {
			return end(outcome.Invalid, "expected head: %v", err)
		}
	}
	rec := opRecord(catalog.OpMerge, in.OpID, in.Graph, in.WorkflowID, in.RunID, map[string]string{
		"source": in.Source, "target": in.Target, "expected_head": in.ExpectedHead, "author": in.Author, "message": in.Message,
	})
	// stop ends the merge with an outcome, claiming the operation first (unless previewing).
	stop := func(res PlanMergeResult, o outcome.Outcome, f string, args ...any) (PlanMergeResult, error) {
		res.Outcome, res.Message = o, fmt.Sprintf(f, args...)
		if in.Preview {
			return res, nil
		}
		c, err := a.claim(ctx, nil, rec)
		if err != nil || !c.owned {
			return PlanMergeResult{Outcome: c.outcome, Message: c.message, Recorded: c.recorded}, err
		}
		res.Owned = true
		return res, nil
	}
	owner := Owner{OpID: in.OpID, Run: in.RunID}
	if !in.Preview {
		// A merge commit this operation sent already is recognised before anything is planned.
		if own, ok, err := a.ownPendingCommit(ctx, owner, in.Graph); err != nil || ok {
			if own.ended {
				return PlanMergeResult{Outcome: own.out, Message: own.msg, Recorded: own.recorded}, nil
			}
			return PlanMergeResult{Owned: ok, Committed: own.landed, Commit: own.id, Spec: own.spec, Kind: own.spec.Landed,
				TargetHead: own.parent}, err
		}
	}

	// The source's and the target's heads, read at once.
	heads, outs, msgs := make([]graph.Head, 2), make([]outcome.Outcome, 2), make([]string, 2)
	err := bounded.EachErr(2, 2, func(i int) (err error) {
		heads[i], outs[i], msgs[i], err = a.readBranchHead(ctx, in.Graph, []string{in.Source, in.Target}[i])
		return err
	})
	if err != nil {
		return PlanMergeResult{}, err
	}
	for i, out := range outs {
		if out != "" {
			return stop(PlanMergeResult{}, out, "%s", msgs[i])
		}
	}
	src, dst := heads[0], heads[1]
	g, err := a.openGraph(in.Graph)
	if err != nil {
		return stop(PlanMergeResult{}, outcome.Invalid, "%v", err)
	}
	g.KeepCommits() // the plan reads the fork point and the heads more than once
	g.Keep(src.Commit, dst.Commit)
	source, target := src.Commit, dst.Commit
	res := PlanMergeResult{SourceHead: source.ID.String(), TargetHead: target.ID.String()}
	if target.Op == in.OpID && !in.Preview && len(target.Parents) == 2 {
		// Our merge commit is the target's head already.
		c, err := a.claim(ctx, nil, rec)
		if err != nil || !c.owned {
			return PlanMergeResult{Outcome: c.outcome, Message: c.message, Recorded: c.recorded}, err
		}
		res.Committed, res.Commit, res.Owned = true, target.ID.String(), true
		res.SourceHead, res.TargetHead = target.MergedParent().String(), target.FirstParent().String()
		res.Kind = OutcomeMerged
		if merged, err := g.Commit(ctx, target.MergedParent()); err == nil {
			if ok, err := g.IsAncestorOf(ctx, target.FirstParent(), merged); err == nil && ok {
				res.Kind = OutcomeAdopted
			}
		}
		return res, nil
	}
	if in.ExpectedHead != "" && target.ID.String() != in.ExpectedHead {
		return stop(res, outcome.Conflict, "the head of %q is %s, not the expected %s", in.Target, target.ID, in.ExpectedHead)
	}
	search, err := g.FindBases(ctx, source, target)
	switch {
	case errors.Is(err, graph.ErrCommitNotFound):
		return stop(res, outcome.NotRetained, "the merge base of %s and %s was reclaimed by cleanup (%v); "+
			"merge it by hand, or keep fork points with a tag", source.ID, target.ID, err)
	case isUnreadableObject(err), errors.Is(err, graph.ErrCorrupt):
		return stop(res, outcome.Conflict, "read merge base: %v", err)
	case err != nil:
		return PlanMergeResult{}, fmt.Errorf("find merge bases: %w", err)
	}
	res.Relation, res.BaseReads = search.Relation, search.Reads
	res.Bases = mapped(search.Bases, func(b graph.Commit) string { return b.ID.String() })

	// The merged versions' bytes carry the operation's time; a preview plans with now.
	at := a.now().UTC()
	var r claimed
	var gate *contract.MergeRule // the target's protection, if any
	var locator string
	if search.Relation != graph.RelationUpToDate {
		if gate, locator, err = a.mergeGate(ctx, in.Graph, in.Target); err != nil {
			return PlanMergeResult{}, err
		}
	}
	if !in.Preview && search.Relation != graph.RelationUpToDate {
		keys := mapped(append([]graph.Commit{source, target}, search.Bases...), func(c graph.Commit) string {
			return format.CommitIDKey(in.Graph, c.ID)
		})
		// Unless the merge may wait, recoverable: it goes on to pinAndRecord before its
		// write, or to a finish that is not recoverable (an outcome that writes nothing);
		// both commit synchronously, so a Postgres crash loses this claim only with all
		// after it, and the step runs again. A merge that may wait for checks and
		// approvals keeps its claim durable while it waits.
		if r, err = a.recordWithPins(ctx, rec, keyPins(catalog.ObjectCommit, keys...), gate == nil); err != nil {
			return PlanMergeResult{}, err
		}
		res.Owned = r.owned
		if r.outcome != "" {
			res.Outcome, res.Message, res.Recorded = r.outcome, r.message, r.recorded
			return res, nil
		}
		at = r.op.CreatedAt.UTC()
	}
	plan, err := g.PlanMerge(ctx, source, target, search, graph.MergeSpec{
		NewVersionID: func(table string) ulid.ULID {
			// One id per (operation, target head, table): a re-plan on a moved head mints
			// another, so no version key is ever asked to hold two byte strings.
			return nativeULID(in.OpID+"/merge/"+target.ID.String()+"/"+table, 0, at)
		},
		// A preview writes nothing, but its versions' op must validate.
		Time: at, Op: cmp.Or(in.OpID, "preview"),
	})
	switch {
	case errors.Is(err, graph.ErrVersionNotFound), errors.Is(err, graph.ErrCommitNotFound):
		return stop(res, outcome.NotRetained, "a version the merge reads was reclaimed by cleanup: %v", err)
	case errors.Is(err, graph.ErrInvalid):
		return stop(res, outcome.Invalid, "%v", err)
	case isUnreadableObject(err), errors.Is(err, graph.ErrCorrupt):
		return stop(res, outcome.Conflict, "plan merge: %v", err)
	case err != nil:
		return PlanMergeResult{}, fmt.Errorf("plan merge: %w", err)
	}
	var objectConflicts []string
	for _, line := range plan.Tables {
		mt := contract.MergeTable{Table: line.Table, Action: contract.MergeAction(line.Action), Base: versionString(line.Base), Source: versionString(line.Source),
			Target: versionString(line.Target), BaseAmbiguous: line.BaseAmbiguous, Added: line.Added, Removed: line.Removed,
			Replaced: line.Replaced, ConflictCount: line.ConflictCount, Why: line.Why,
			Conflicts: mapped(line.Conflicts, func(c graph.ObjectConflict) string { return c.Name })}
		if len(mt.Conflicts) > 0 {
			objectConflicts = append(objectConflicts, fmt.Sprintf("%s: %s", line.Table, strings.Join(mt.Conflicts, ", ")))
		}
		res.Tables = append(res.Tables, mt)
	}
	res.Unchanged, res.Conflicts = int(plan.Unchanged), plan.Conflicts
	res.Kind = OutcomeMerged
	if plan.Relation == graph.RelationAdoptable {
		res.Kind = OutcomeAdopted
	}
	if plan.Conflicts == 0 && plan.Writes() {
		res.Gate, res.Locator = gate, locator
		if res.Gate != nil && !in.Preview && (in.Cleared == nil || *in.Cleared != ClearedHeads{res.SourceHead, res.TargetHead}) {
			return res, nil // the workflow waits for the checks and approvals of this plan
		}
	}
	switch {
	case plan.Conflicts > 0:
		msg := fmt.Sprintf("%d of %d tables changed on both %q and %q in ways that conflict; nothing was merged", plan.Conflicts, len(plan.Tables), in.Source, in.Target)
		if len(objectConflicts) > 0 {
			msg += "; objects changed differently on both sides: " + strings.Join(objectConflicts, "; ")
		}
		return stop(res, outcome.Conflict, "%s", msg)
	case !plan.Writes():
		return stop(res, OutcomeAlreadyUpToDate, "%q has nothing %q lacks", in.Source, in.Target)
	case in.Preview:
		changed := slices.DeleteFunc(slices.Clone(plan.Tables),
			func(l graph.TableMerge) bool { return l.Action == graph.TableKeep })
		msg := fmt.Sprintf("%d tables to change on %q from %q", len(changed), in.Target, in.Source)
		if res.Gate != nil {
			msg += fmt.Sprintf("; %q is protected: the merge would wait for %s", in.Target, contract.MergeWait{Rule: *res.Gate}.Summary())
		}
		return stop(res, res.Kind, "%s", msg)
	}

	author, message := cmp.Or(in.Author, "graft"), cmp.Or(in.Message, fmt.Sprintf("merge %s into %s", in.Source, in.Target))
	ap, err := g.PlanAppendOn(ctx, dst, plan.Spec(dst, source, author, message, at, in.OpID))
	var stale *graph.StaleHeadError
	switch {
	case errors.As(err, &stale):
		res.Outcome, res.Message = outcome.Conflict, err.Error()
		return res, nil
	case errors.Is(err, graph.ErrInvalid):
		res.Outcome, res.Message = outcome.Invalid, fmt.Sprintf("merge commit: %v", err)
		return res, nil
	case errors.Is(err, graph.ErrCommitNotFound):
		res.Outcome, res.Message = outcome.NotRetained, fmt.Sprintf("merge commit: %v", err)
		return res, nil
	case err != nil:
		return PlanMergeResult{}, fmt.Errorf("plan merge commit: %w", err)
	}
	commitKeys := ap.Keys() // every key the merge commit newly names is pinned, put or not
	// A pins chunk the source head's pins hold already (the leaf of the tables it changed,
	// when the merge takes them as they are) is not put again: like the adopted versions,
	// it is kept by the source head's pin and the probe below.
	ap.Chunks = slices.DeleteFunc(ap.Chunks, func(ch graph.Chunk) bool {
		held, err := g.HasPinsChunk(ctx, source, ch)
		return err == nil && held
	})
	spec := publishSpec(in.Graph, ap, res.Kind)
	for _, v := range plan.Versions {
		spec.Pre = append(append(spec.Pre, chunkPuts(v.Chunks)...), ChunkPut{Key: v.Key, Body: v.Body})
	}
	// Pin what the merge commit newly names and record the publish, in one transaction; then
	// probe the source head, which a cleanup finished before the pin may have reclaimed (one
	// present after has what it names: cleanup deletes referrers before referents).
	var adopted []string
	for _, line := range plan.Tables {
		if line.Action == graph.TableAdopt && !line.Source.IsZero() {
			adopted = append(adopted, format.TableVersionKey(in.Graph, line.Table, line.Source))
		}
	}
	pins := append(keyPins(catalog.ObjectTableVersion, append(adopted, plan.Keys()...)...), keyPins(catalog.ObjectCommit, commitKeys...)...)
	if o, msg, err := a.pinAndRecord(ctx, owner, in.Graph, pins, &spec); err != nil || o != "" {
		res.Outcome, res.Message = o, msg
		return res, err
	}
	if missing, err := a.probeKeys(ctx, format.CommitIDKey(in.Graph, source.ID)); err != nil || missing != "" {
		if err != nil {
			return PlanMergeResult{}, err
		}
		res.Outcome, res.Message = outcome.NotRetained, fmt.Sprintf("source head %s was reclaimed by cleanup while merging; run the merge again", source.ID)
		return res, nil
	}
	res.PendingRecorded = true
	res.Commit, res.Spec = ap.Commit.ID.String(), spec
	return res, nil
}

// readBranchHead resolves a logical branch and reads its head, or says which outcome ends
// the operation (not_found names a missing graph).
func (a *Activities) readBranchHead(ctx context.Context, graphName, name string) (graph.Head, outcome.Outcome, string, error) {
	b, out, msg, err := a.resolveWriteBranch(ctx, graphName, name)
	if err != nil || out != "" {
		if out == outcome.NotFound {
			if _, gerr := graph.ReadGraph(ctx, a.Store, graphName); errors.Is(gerr, graph.ErrGraphNotFound) {
				msg = fmt.Sprintf("graph %q does not exist; create it with `graft graph init %s`", graphName, graphName)
			}
		}
		return graph.Head{}, out, msg, err
	}
	g, err := a.openGraph(graphName)
	if err != nil {
		return graph.Head{}, outcome.Invalid, err.Error(), nil
	}
	h, err := g.HeadOf(ctx, b)
	switch {
	case isUnreadableObject(err), errors.Is(err, graph.ErrCommitNotFound):
		return graph.Head{}, outcome.Conflict, fmt.Sprintf("read head of %s: %v", b.Native, err), nil
	case err != nil:
		return graph.Head{}, "", "", fmt.Errorf("read head of %s: %w", b.Native, err)
	}
	return h, "", "", nil
}

func versionString(v ulid.ULID) string {
	if v.IsZero() {
		return ""
	}
	return v.String()
}

// recordWithPins claims the operation for p.Owner and registers its pins in one
// transaction; a pin a running cleanup condemned ends it not_retained, claimed on its own.
// recoverable commits it without waiting for the WAL flush (catalog.InTxRecoverable): for
// a caller whose every way on passes a synchronous commit before anything is written or
// reported, which flushes this one too.
func (a *Activities) recordWithPins(ctx context.Context, p catalog.OperationInsertParams, pins []catalog.Pin, recoverable bool) (claimed, error) {
	var c claimed
	inTx := a.Catalog.InTx
	if recoverable {
		inTx = a.Catalog.InTxRecoverable
	}
	err := inTx(ctx, func(tx pgx.Tx) error {
		var err error
		if c, err = a.claim(ctx, tx, p); err != nil || !c.owned {
			return err
		}
		return a.Catalog.PinsRegisterTx(ctx, tx, catalog.PinsRegisterParams{OpID: p.ID, Graph: p.Graph, Pins: pins, Owner: p.Owner})
	})
	switch {
	case errors.Is(err, catalog.ErrCondemned):
		condemned := err
		if c, err = a.claim(ctx, nil, p); err != nil || !c.owned {
			return claimed{outcome: c.outcome, message: c.message, recorded: c.recorded}, err
		}
		return claimed{op: c.op, owned: true, outcome: outcome.NotRetained, message: fmt.Sprintf("condemned by a running cleanup: %v", condemned)}, nil
	case err != nil:
		return claimed{}, fmt.Errorf("record operation and pins: %w", err)
	}
	return c, nil
}

// claimCommit claims an operation that reads commit id: with o set, one that ends with o
// before any pin; otherwise with the commit pinned (recordWithPins), then probed (found
// after the pin, it has all it reaches). note ends the message of a commit reclaimed.
func (a *Activities) claimCommit(ctx context.Context, rec catalog.OperationInsertParams, id format.CommitID, o outcome.Outcome, msg, note string) (claimed, error) {
	key := format.CommitIDKey(rec.Graph, id)
	if o != "" {
		c, err := a.claim(ctx, nil, rec)
		if c.owned {
			c.outcome, c.message = o, msg
		}
		return c, err
	}
	c, err := a.recordWithPins(ctx, rec, keyPins(catalog.ObjectCommit, key), false)
	if err != nil || c.outcome != "" {
		return c, err
	}
	missing, err := a.probeKeys(ctx, key)
	if err != nil {
		return claimed{}, err
	}
	if missing != "" {
		c.outcome, c.message = outcome.NotRetained, fmt.Sprintf("commit %s needs %s, which cleanup has reclaimed%s", id, missing, note)
	}
	return c, nil
}

// headAll HEADs keys, objectProbeConcurrency at a time.
func (a *Activities) headAll(ctx context.Context, keys []string) ([]storage.ObjectInfo, []error) {
	infos := make([]storage.ObjectInfo, len(keys))
	errs := make([]error, len(keys))
	bounded.Each(len(keys), objectProbeConcurrency, func(i int) { infos[i], errs[i] = a.Store.Head(ctx, keys[i]) })
	return infos, errs
}

// probeKeys HEADs keys after their pins are registered and returns the first missing, or "".
func (a *Activities) probeKeys(ctx context.Context, keys ...string) (string, error) {
	_, errs := a.headAll(ctx, keys)
	for i, err := range errs {
		switch {
		case errors.Is(err, storage.ErrNotFound):
			return keys[i], nil
		case err != nil:
			return "", fmt.Errorf("probe %s: %w", keys[i], err)
		}
	}
	return "", nil
}
