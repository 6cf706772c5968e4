package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/storage"
)

// The outcomes of merges and deletes, from the ledger's vocabulary. Each is
// a success: the CLI exits 0 on them.
const (
	// OutcomeMerged: a merge commit with a merge base other than the target
	// head was appended to the target.
	OutcomeMerged = outcome.Merged
	// OutcomeAdopted: the target head was an ancestor of the source head; a
	// commit on the target took the source's tables.
	OutcomeAdopted = outcome.Adopted
	// OutcomeAlreadyUpToDate: merging would change nothing; nothing was written.
	OutcomeAlreadyUpToDate = outcome.AlreadyUpToDate
	// OutcomeDeleted: a branch or tag was retired.
	OutcomeDeleted = outcome.Deleted
)

// MergeTable is one table's line in a merge plan. Versions are ULIDs; an
// empty one means that side does not pin the table.
type MergeTable struct {
	Table  string            `json:"table"`
	Action graph.TableAction `json:"action"`
	Base   string            `json:"base,omitempty"`
	Source string            `json:"source,omitempty"`
	Target string            `json:"target,omitempty"`
	// BaseAmbiguous: several merge bases pin different versions of the table.
	BaseAmbiguous bool `json:"base_ambiguous,omitempty"`
}

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
	WorkflowID, RunID string
}

// PlanMergeResult is the plan of a merge and, when it writes, the exact
// bytes of its commit.
type PlanMergeResult struct {
	// Outcome, when set, ends the merge without a write: conflict,
	// already_up_to_date, not_found, not_retained, invalid — or, for a
	// preview, the outcome the merge would have (merged, adopted, ...).
	Outcome outcome.Outcome
	Message string
	// Recorded: the operation is in the ledger as this request.
	Recorded bool
	// Foreign: the operation id belongs to another request; its ledger row
	// is not this merge's to finish.
	Foreign    bool
	Relation   graph.Relation
	SourceHead string
	TargetHead string
	Bases      []string
	// Tables lists every table the merge does not leave unchanged.
	Tables    []MergeTable
	Unchanged int
	Conflicts int
	// BaseReads counts the merge-base candidates read.
	BaseReads int
	// Kind is the outcome once Body is stored: merged or adopted.
	Kind outcome.Outcome
	// Committed: the target's head already is this operation's merge commit
	// (an earlier attempt landed).
	Committed bool
	// Commit is the merge commit's id, Body its exact bytes.
	Commit string
	Body   []byte
}

// PlanMerge reads the source and target heads, finds their merge base from
// the heads' lineages (graph.FindMergeBases: a fixed number of reads
// whatever the history length), and classifies every table. A conflict, or
// nothing to adopt, ends the merge with nothing written. Otherwise it
// records the operation and pins the base, source and target commits (and
// so, for cleanup, every version they pin) and the adopted versions — one
// ledger transaction — then probes that the source head still exists, and
// computes the merge commit on the target (first parent the target head,
// merged parent the source head). It writes nothing to storage, so the
// workflow holds the planned bytes before any put is sent.
func (a *Activities) PlanMerge(ctx context.Context, in PlanMergeInput) (PlanMergeResult, error) {
	end := func(o outcome.Outcome, f string, args ...any) (PlanMergeResult, error) {
		return PlanMergeResult{Outcome: o, Message: fmt.Sprintf(f, args...)}, nil
	}
	for _, check := range []error{format.ValidateGraphName(in.Graph), format.ValidateBranchName(in.Source),
		format.ValidateBranchName(in.Target), format.ValidateMessage(in.Message)} {
		if check != nil {
			return end(outcome.Invalid, "%v", check)
		}
	}
	if !in.Preview {
		if err := format.ValidateOp(in.OpID); err != nil {
			return end(outcome.Invalid, "%v", err)
		}
	}
	if in.Author != "" {
		if err := format.ValidateAuthor(in.Author); err != nil {
			return end(outcome.Invalid, "%v", err)
		}
	}
	if in.Source == in.Target {
		return end(outcome.Invalid, "cannot merge %q into itself", in.Source)
	}
	if in.ExpectedHead != "" {
		if _, err := format.ParseCommitID(in.ExpectedHead); err != nil {
			return end(outcome.Invalid, "expected head: %v", err)
		}
	}
	inputs, _ := json.Marshal(map[string]string{
		"source": in.Source, "target": in.Target, "expected_head": in.ExpectedHead, "author": in.Author, "message": in.Message,
	})
	rec := catalog.OperationInsertParams{ID: in.OpID, Kind: catalog.OpMerge, Graph: in.Graph, Inputs: inputs,
		WorkflowID: in.WorkflowID, RunID: in.RunID}
	// stop ends the merge with an outcome, recording the operation first
	// (unless previewing) so its outcome can be finished in the ledger.
	stop := func(res PlanMergeResult, o outcome.Outcome, f string, args ...any) (PlanMergeResult, error) {
		res.Outcome, res.Message = o, fmt.Sprintf(f, args...)
		if in.Preview {
			return res, nil
		}
		op, err := a.Catalog.OperationInsert(ctx, rec)
		if errors.Is(err, catalog.ErrDuplicate) {
			return PlanMergeResult{Outcome: outcome.Conflict, Foreign: true,
				Message: fmt.Sprintf("operation id %q was already used for a different request", in.OpID)}, nil
		}
		if err != nil {
			return PlanMergeResult{}, fmt.Errorf("record operation: %w", err)
		}
		res.Recorded = true
		if op.State == catalog.OperationDone {
			res.Outcome, res.Message = outcome.Outcome(op.Outcome), fmt.Sprintf("operation %s already finished: %s", in.OpID, op.Error)
		}
		return res, nil
	}

	heads, out, msg, err := a.readMergeHeads(ctx, in.Graph, in.Source, in.Target)
	if err != nil {
		return PlanMergeResult{}, err
	}
	if out != "" {
		return stop(PlanMergeResult{}, out, "%s", msg)
	}
	source, target := heads[0].head, heads[1].head
	res := PlanMergeResult{SourceHead: source.ID.String(), TargetHead: target.ID.String()}
	if target.Op == in.OpID && !in.Preview && len(target.Parents) == 2 {
		return a.mergeCommitted(ctx, in, target, res)
	}
	if in.ExpectedHead != "" && target.ID.String() != in.ExpectedHead {
		return stop(res, outcome.Conflict, "the head of %q is %s, not the expected %s", in.Target, target.ID, in.ExpectedHead)
	}

	bases, err := graph.FindMergeBases(ctx, source, target, graph.StoreCommitReader(a.Store, in.Graph))
	switch {
	case errors.Is(err, graph.ErrCommitNotFound):
		return stop(res, outcome.NotRetained, "the merge base of %s and %s was reclaimed by cleanup (%v); "+
			"merge it by hand, or keep fork points with a tag", source.ID, target.ID, err)
	case isUnreadableObject(err):
		return stop(res, outcome.Conflict, "read merge base: %v", err)
	case err != nil:
		return PlanMergeResult{}, fmt.Errorf("find merge base: %w", err)
	}
	plan := graph.PlanMerge(source, target, bases)
	res.Relation, res.BaseReads = plan.Relation, bases.Reads
	for _, b := range plan.Bases {
		res.Bases = append(res.Bases, b.String())
	}
	for _, line := range plan.Tables {
		if line.Action == graph.TableUnchanged {
			continue
		}
		res.Tables = append(res.Tables, MergeTable{Table: line.Table, Action: line.Action, Base: versionString(line.Base),
			Source: versionString(line.Source), Target: versionString(line.Target), BaseAmbiguous: line.BaseAmbiguous})
	}
	res.Unchanged, res.Conflicts = plan.Unchanged, plan.Conflicts
	res.Kind = OutcomeMerged
	if plan.Relation == graph.RelationAdoptable {
		res.Kind = OutcomeAdopted
	}
	switch {
	case plan.Conflicts > 0:
		return stop(res, outcome.Conflict, "%d of %d tables changed on both %q and %q since their merge base; nothing was merged",
			plan.Conflicts, len(plan.Tables), in.Source, in.Target)
	case !plan.Writes():
		return stop(res, OutcomeAlreadyUpToDate, "%q has nothing %q lacks", in.Source, in.Target)
	case in.Preview:
		return stop(res, res.Kind, "%d tables to adopt from %q, %d kept from %q", plan.Adopted, in.Source, plan.Kept, in.Target)
	}

	// Pin the merge's inputs — the base, source and target commits, which
	// cleanup keeps with every version they pin, and the versions the merge
	// commit newly names (the adopted ones) — then probe the source head: the
	// merge commit names it as a parent, and a cleanup that finished before
	// the pin may have reclaimed it (the source moved on). The target head is
	// the put's own check. Pinning every version of each commit one by one
	// would only add ledger rows: a pinned commit keeps its versions.
	var pins []catalog.Pin
	for _, c := range append([]format.Commit{source, target}, bases.Bases...) {
		pins = append(pins, catalog.Pin{Kind: catalog.ObjectCommit, Key: format.CommitIDKey(in.Graph, c.ID)})
	}
	for _, line := range plan.Tables {
		if line.Action == graph.TableAdopt && !line.Source.IsZero() {
			pins = append(pins, catalog.Pin{Kind: catalog.ObjectTableVersion, Key: format.TableVersionKey(in.Graph, line.Table, line.Source)})
		}
	}
	r, err := a.recordWithPins(ctx, rec, pins)
	if err != nil {
		return PlanMergeResult{}, err
	}
	res.Recorded, res.Foreign = !r.foreign, r.foreign
	if r.outcome != "" {
		res.Outcome, res.Message = r.outcome, r.message
		return res, nil
	}
	if missing, err := a.probeKeys(ctx, format.CommitIDKey(in.Graph, source.ID)); err != nil || missing != "" {
		if err != nil {
			return PlanMergeResult{}, err
		}
		res.Outcome, res.Message = outcome.NotRetained, fmt.Sprintf("source head %s was reclaimed by cleanup while merging; run the merge again", source.ID)
		return res, nil
	}

	author := in.Author
	if author == "" {
		author = "graft"
	}
	message := in.Message
	if message == "" {
		message = fmt.Sprintf("merge %s into %s", in.Source, in.Target)
	}
	c := format.Commit{
		ID:      format.CommitID{Tree: target.ID.Tree, Seq: target.ID.Seq + 1},
		Branch:  in.Target,
		Parents: []format.CommitID{target.ID, source.ID},
		Pins:    plan.Pins,
		Lineage: format.Lineage(target.ID.Tree, target, source),
		Author:  author,
		Message: message,
		Time:    r.op.CreatedAt.UTC(),
		Op:      in.OpID,
	}
	body, err := format.EncodeCommit(c)
	if err != nil {
		res.Outcome, res.Message = outcome.Invalid, fmt.Sprintf("merge commit: %v", err)
		return res, nil
	}
	res.Commit, res.Body = c.ID.String(), body
	return res, nil
}

// readMergeHeads resolves the source and the target and reads their heads,
// both at once: per branch one LIST and one GET of its refs, then one LIST
// and one GET of its head.
func (a *Activities) readMergeHeads(ctx context.Context, graphName string, names ...string) ([]branchHead, outcome.Outcome, string, error) {
	heads := make([]branchHead, len(names))
	outs := make([]outcome.Outcome, len(names))
	msgs := make([]string, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Go(func() { heads[i], outs[i], msgs[i], errs[i] = a.readBranchHead(ctx, graphName, name) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, "", "", err
	}
	for i := range names {
		if outs[i] != "" {
			return nil, outs[i], msgs[i], nil
		}
	}
	return heads, "", "", nil
}

// branchHead is a branch's live incarnation and its head commit.
type branchHead struct {
	branch graph.Branch
	head   format.Commit
}

// readBranchHead resolves a logical branch and reads its head, or says
// which outcome ends the operation (not_found names a missing graph).
func (a *Activities) readBranchHead(ctx context.Context, graphName, name string) (branchHead, outcome.Outcome, string, error) {
	b, out, msg, err := a.resolveWriteBranch(ctx, graphName, name)
	if err != nil || out != "" {
		if out == outcome.NotFound {
			if _, gerr := graph.ReadGraph(ctx, a.Store, graphName); errors.Is(gerr, graph.ErrGraphNotFound) {
				msg = fmt.Sprintf("graph %q does not exist; create it with `graft graph init %s`", graphName, graphName)
			}
		}
		return branchHead{}, out, msg, err
	}
	head, err := graph.ReadHead(ctx, a.Store, graphName, b.Tree)
	switch {
	case isUnreadableObject(err):
		return branchHead{}, outcome.Conflict, fmt.Sprintf("read head of %s: %v", b.Native, err), nil
	case err != nil:
		return branchHead{}, "", "", fmt.Errorf("read head of %s: %w", b.Native, err)
	}
	return branchHead{branch: b, head: head}, "", "", nil
}

// mergeCommitted reports a merge whose commit is already the target's head
// (an earlier attempt landed and its answer was lost with its worker).
func (a *Activities) mergeCommitted(ctx context.Context, in PlanMergeInput, head format.Commit, res PlanMergeResult) (PlanMergeResult, error) {
	merged, err := graph.ReadCommit(ctx, a.Store, in.Graph, head.Parents[1].String())
	if err != nil {
		return PlanMergeResult{}, fmt.Errorf("read merged parent: %w", err)
	}
	res.Committed, res.Commit, res.Recorded = true, head.ID.String(), true
	res.SourceHead, res.TargetHead = merged.ID.String(), head.Parents[0].String()
	res.Kind = OutcomeMerged
	if graph.IsAncestor(head.Parents[0], merged) {
		res.Kind = OutcomeAdopted
	}
	return res, nil
}

func versionString(v ulid.ULID) string {
	if v.IsZero() {
		return ""
	}
	return v.String()
}

// commitPins are the pins that keep commits and every version they pin.
func commitPins(graphName string, commits ...format.Commit) []catalog.Pin {
	var pins []catalog.Pin
	seen := map[string]bool{}
	add := func(kind catalog.ObjectKind, key string) {
		if !seen[key] {
			seen[key] = true
			pins = append(pins, catalog.Pin{Kind: kind, Key: key})
		}
	}
	for _, c := range commits {
		add(catalog.ObjectCommit, format.CommitIDKey(graphName, c.ID))
		for table, v := range c.Pins {
			add(catalog.ObjectTableVersion, format.TableVersionKey(graphName, table, v))
		}
	}
	return pins
}

// recorded is how recordWithPins left the ledger.
type recorded struct {
	op catalog.Operation
	// outcome, when set, ends the operation: not_retained (a pin was
	// refused), conflict with foreign (the id belongs to another request),
	// or the outcome of an operation that already finished.
	outcome outcome.Outcome
	message string
	foreign bool
}

// recordWithPins records the operation and registers its pins in one ledger
// transaction. A pin a running cleanup has condemned refuses the whole
// transaction; the operation is then recorded on its own and ends
// not_retained.
func (a *Activities) recordWithPins(ctx context.Context, p catalog.OperationInsertParams, pins []catalog.Pin) (recorded, error) {
	var r recorded
	err := a.Catalog.InTx(ctx, func(tx pgx.Tx) error {
		var err error
		if r.op, err = a.Catalog.OperationInsertTx(ctx, tx, p); err != nil || r.op.State == catalog.OperationDone {
			return err
		}
		return a.Catalog.PinsRegisterTx(ctx, tx, catalog.PinsRegisterParams{OpID: p.ID, Graph: p.Graph, Pins: pins})
	})
	switch {
	case errors.Is(err, catalog.ErrDuplicate):
		r.outcome, r.foreign = outcome.Conflict, true
		r.message = fmt.Sprintf("operation id %q was already used for a different request", p.ID)
		return r, nil
	case errors.Is(err, catalog.ErrCondemned):
		if r.op, err = a.Catalog.OperationInsert(ctx, p); err != nil {
			return r, fmt.Errorf("record operation: %w", err)
		}
		r.outcome, r.message = outcome.NotRetained, fmt.Sprintf("condemned by a running cleanup: %v", err)
		return r, nil
	case err != nil:
		return r, fmt.Errorf("record operation and pins: %w", err)
	case r.op.State == catalog.OperationDone:
		r.outcome, r.message = outcome.Outcome(r.op.Outcome), fmt.Sprintf("operation %s already finished: %s", p.ID, r.op.Error)
	}
	return r, nil
}

// probeKeys HEADs keys in parallel after their pins are registered, and
// returns the first that is missing (reclaimed), or "".
func (a *Activities) probeKeys(ctx context.Context, keys ...string) (string, error) {
	errs := make([]error, len(keys))
	sem := make(chan struct{}, objectProbeConcurrency)
	var wg sync.WaitGroup
	for i, key := range keys {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			_, errs[i] = a.Store.Head(ctx, key)
		})
	}
	wg.Wait()
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

// PutPlannedCommitInput is the input of PutPlannedCommit.
type PutPlannedCommitInput struct {
	OpID, Graph string
	// Kind is the operation's kind, for metrics.
	Kind catalog.OperationKind
	// Body is the planned commit's exact bytes; every put sends exactly these.
	Body []byte
	// InDoubtSince is when the put first came back in doubt; zero on the first put.
	InDoubtSince time.Time
}

// PutPlannedCommit appends a commit a merge or a restore planned: a
// put-if-absent at seq+1 of the target tree — the head check — settled by
// reading back (graph.SettleAppend): ours → committed, another commit →
// stale (ours never lands), still unknown → in_doubt, to be settled by
// calling it again with the same bytes.
func (a *Activities) PutPlannedCommit(ctx context.Context, in PutPlannedCommitInput) (PutCommitResult, error) {
	return a.putCommitBytes(ctx, in.Graph, in.Body, string(in.Kind), in.InDoubtSince)
}

// putCommitBytes is the append step WriteTable, Merge and Restore share: it
// puts a planned commit's exact bytes and classifies what the settled answer
// proves. inDoubtSince, when set, is reported to the observer once the put is
// definitive.
func (a *Activities) putCommitBytes(ctx context.Context, graphName string, body []byte, kind string, inDoubtSince time.Time) (PutCommitResult, error) {
	c, err := format.DecodeCommit(body)
	if err != nil {
		return PutCommitResult{State: CommitInvalid, Message: err.Error()}, nil
	}
	_, err = graph.SettleAppend(ctx, a.Store, graphName, c)
	var res PutCommitResult
	switch {
	case err == nil:
		res = PutCommitResult{State: CommitStored}
	case errors.Is(err, graph.ErrStaleHead), errors.Is(err, graph.ErrKeyTaken):
		res = PutCommitResult{State: CommitStale, Message: err.Error()}
	case errors.Is(err, storage.ErrAmbiguous):
		return PutCommitResult{State: CommitInDoubt, Message: err.Error()}, nil
	case errors.Is(err, storage.ErrRefused), errors.Is(err, storage.ErrInvalidKey):
		return PutCommitResult{State: CommitRefused, Message: err.Error()}, nil
	case errors.Is(err, graph.ErrInvalid):
		return PutCommitResult{State: CommitInvalid, Message: err.Error()}, nil
	default:
		return PutCommitResult{}, fmt.Errorf("put commit: %w", err)
	}
	if !inDoubtSince.IsZero() {
		a.observeWriteSettled(kind, inDoubtSince)
	}
	return res, nil
}
