package activities

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
)

// planMergeV2 is PlanMerge on a format-2 target (docs/format.md, "Merges"): the heads the
// two refs name, their merge bases (graph.FindBases), the object-level three-way plan
// (graph.PlanMergeV2: a table both sides changed merges when their changes touch different
// objects; only objects changed differently on both sides conflict, and are named), then
// — recorded, its inputs pinned, the source head probed — the merged versions and the
// merge commit on the target's head, written as one publish (the versions, chunks first,
// before the commit; the swap of the target's ref is the head check).
func (a *Activities) planMergeV2(ctx context.Context, in PlanMergeInput, rec catalog.OperationInsertParams, sb, tb graph.Branch,
	stop func(PlanMergeResult, outcome.Outcome, string, ...any) (PlanMergeResult, error)) (PlanMergeResult, error) {
	g, err := a.graphOf(in.Graph)
	if err != nil {
		return stop(PlanMergeResult{}, outcome.Invalid, "%v", err)
	}
	var src, dst graph.Head
	for _, x := range []struct {
		b   graph.Branch
		out *graph.Head
	}{{sb, &src}, {tb, &dst}} {
		h, err := g.HeadOf(ctx, x.b)
		switch {
		case isUnreadableObject(err), errors.Is(err, graph.ErrCommitNotFound):
			return stop(PlanMergeResult{}, outcome.Conflict, "read head of %s: %v", x.b.Native, err)
		case err != nil:
			return PlanMergeResult{}, fmt.Errorf("read head of %s: %w", x.b.Native, err)
		}
		*x.out = h
	}
	source, target := src.Commit, dst.Commit
	res := PlanMergeResult{SourceHead: source.ID.String(), TargetHead: target.ID.String()}
	if target.Op == in.OpID && !in.Preview && len(target.Parents) == 2 {
		// Our merge commit is the target's head already.
		c, err := a.claim(ctx, nil, rec)
		if err != nil || !c.owned {
			return PlanMergeResult{Outcome: c.outcome, Message: c.message}, err
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
	for _, b := range search.Bases {
		res.Bases = append(res.Bases, b.ID.String())
	}

	// The merged versions' bytes carry the operation's time, known once it is recorded;
	// a preview records nothing and plans with the time now.
	at := a.now().UTC()
	var r recorded
	if !in.Preview && search.Relation != graph.RelationUpToDate {
		pins := []catalog.Pin{}
		for _, c := range append([]graph.Commit{source, target}, search.Bases...) {
			pins = append(pins, catalog.Pin{Kind: catalog.ObjectCommit, Key: format.CommitIDKey(in.Graph, c.ID)})
		}
		if r, err = a.recordWithPins(ctx, rec, pins); err != nil {
			return PlanMergeResult{}, err
		}
		res.Owned = r.owned
		if r.outcome != "" {
			res.Outcome, res.Message = r.outcome, r.message
			return res, nil
		}
		at = r.op.CreatedAt.UTC()
	}
	plan, err := g.PlanMergeV2(ctx, source, target, search, graph.MergeSpecV2{
		NewVersionID: func(table string) ulid.ULID {
			// One id per (operation, target head, table): a re-plan on a moved head mints
			// another, so no version key is ever asked to hold two byte strings.
			return nativeULID(in.OpID+"/merge/"+target.ID.String()+"/"+table, 0, at)
		},
		Time: at, Op: mergeVersionOp(in),
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
		mt := MergeTable{Table: line.Table, Action: line.Action, Base: versionString(line.Base), Source: versionString(line.Source),
			Target: versionString(line.Target), BaseAmbiguous: line.BaseAmbiguous, Added: line.Added, Removed: line.Removed,
			Replaced: line.Replaced, ConflictCount: line.ConflictCount, Why: line.Why}
		for _, c := range line.Conflicts {
			mt.Conflicts = append(mt.Conflicts, c.Name)
		}
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
		return stop(res, res.Kind, "%d tables to change on %q from %q", len(plan.Tables)-countKept(plan.Tables), in.Target, in.Source)
	}

	author, message := in.Author, in.Message
	if author == "" {
		author = "graft"
	}
	if message == "" {
		message = fmt.Sprintf("merge %s into %s", in.Source, in.Target)
	}
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
	spec := publishSpec(in.Graph, ap, res.Kind)
	for _, v := range plan.Versions {
		for _, c := range v.Chunks {
			spec.Pre = append(spec.Pre, ChunkPut{Key: c.Key, Body: c.Body})
		}
		spec.Pre = append(spec.Pre, ChunkPut{Key: v.Key, Body: v.Body})
	}
	// Pin what the merge commit newly names — the adopted versions, the merged versions
	// and their chunks, the commit and its chunks — and record the publish as the
	// operation's pending write, in one transaction; then probe the source head (the
	// merge commit names it as a parent, and a cleanup that finished before the pin may
	// have reclaimed it; one present after the pins has what it names, since cleanup
	// deletes referrers before referents).
	var adopted []string
	for _, line := range plan.Tables {
		if line.Action == graph.TableAdopt && !line.Source.IsZero() {
			adopted = append(adopted, format.TableVersionKey(in.Graph, line.Table, line.Source))
		}
	}
	pins := append(keyPins(catalog.ObjectTableVersion, append(adopted, plan.Keys()...)...), keyPins(catalog.ObjectCommit, ap.Keys()...)...)
	if o, msg, err := a.pinAndRecord(ctx, Owner{OpID: in.OpID, Run: in.RunID}, in.Graph, pins, spec); err != nil || o != "" {
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

// mergeVersionOp is the op recorded in a merge's new versions: the merge's operation, or
// for a preview (which writes nothing) a placeholder that validates.
func mergeVersionOp(in PlanMergeInput) string {
	if in.OpID != "" {
		return in.OpID
	}
	return "preview"
}

func countKept(lines []graph.TableMerge) int {
	n := 0
	for _, l := range lines {
		if l.Action == graph.TableKeep {
			n++
		}
	}
	return n
}
