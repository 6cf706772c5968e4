package workflows_test

import (
	"errors"
	"maps"
	"path/filepath"
	"testing"
	"time"

	"go.temporal.io/sdk/worker"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/storage/faults"
	"github.com/graftworks/graft/workflows"
)

// Helpers of the merge, restore, delete and tag tests.

// fork makes branch logical live from commit from (by hand, without a
// witness) and returns its fork commit.
func (r *rig) fork(logical string, from graph.CommitView) graph.CommitView {
	r.t.Helper()
	return r.handBranch(logical, from, time.Now(), true)
}

// write appends to *head's tree a commit writing a one-object version of table.
func (r *rig) write(head *graph.CommitView, table, body string) graph.CommitView {
	r.t.Helper()
	return r.commitOn(head, table, body, time.Now())
}

// writeEntry is write with the version's one entry named name.
func (r *rig) writeEntry(head *graph.CommitView, table, name, body string) graph.CommitView {
	r.t.Helper()
	return r.commitEntryOn(head, table, name, body, time.Now())
}

// merge merges source into main and returns the result and error.
func (r *rig) merge(req client.MergeRequest) (workflows.MergeResult, error) {
	r.t.Helper()
	req.Graph = r.graph
	if req.Target == "" {
		req.Target = "main"
	}
	return r.gc.Merge(r.ctx, req)
}

// pinsHeld returns the pins the ledger holds for the rig's graph.
func (r *rig) pinsHeld() []catalog.PinRecord {
	r.t.Helper()
	pins, err := r.cat.PinsList(r.ctx, catalog.PinsListParams{Graph: r.graph})
	if err != nil {
		r.t.Fatalf("pins: %v", err)
	}
	return pins
}

// wantOperation fails unless the ledger finished operation id with out and holds no pins
// but the late-put pin of its own commit: a commit put that answered ambiguously may still
// be delivered, so its pin outlives the operation (docs/format.md, "Appending a commit").
func (r *rig) wantOperation(id string, kind catalog.OperationKind, out outcome.Outcome) {
	r.t.Helper()
	op := r.operation(id)
	if op.Kind != kind || op.State != catalog.OperationDone || string(op.Outcome) != string(out) {
		r.t.Fatalf("operation %+v, want %s done with %s", op, kind, out)
	}
	var held []catalog.PinRecord
	for _, p := range r.pinsHeld() {
		if p.LatePut && p.OpID == id && p.Kind == catalog.ObjectCommit {
			continue
		}
		held = append(held, p)
	}
	if len(held) != 0 {
		r.t.Fatalf("pins held after %s finished: %+v", id, held)
	}
}

// treePutsOf selects puts into the tree of commit c.
func (r *rig) treePutsOf(c graph.CommitView) faults.Rule {
	return faults.Rule{Op: faults.OpPut, KeyPrefix: format.TreeCommitsPrefix(r.graph, c.ID.Tree)}
}

func actions(res workflows.MergeResult) map[string]string {
	out := map[string]string{}
	for _, t := range res.Tables {
		out[t.Table] = string(t.Action)
	}
	return out
}

func TestMerge_TargetIsAncestor_AdoptedCommitOnTarget(t *testing.T) {
	r := runningRig(t)
	before := r.main
	feat := r.fork("feat", r.main)
	r.write(&feat, "t", "t2")
	r.write(&feat, "u", "u1")
	res, err := r.merge(client.MergeRequest{Source: "feat"})
	if err != nil || res.Outcome != workflows.OutcomeAdopted {
		t.Fatalf("merge: %+v, %v; want adopted", res, err)
	}
	head := r.headOf("main")
	if head.ID.String() != res.Commit || head.ID.Seq != before.ID.Seq+1 || len(head.Parents) != 2 ||
		head.Parents[0] != before.ID || head.Parents[1] != feat.ID || !maps.Equal(head.Pins, feat.Pins) {
		t.Fatalf("head %+v, want a commit on %s with parents %s, %s and the feature's pins", head, before.ID, before.ID, feat.ID)
	}
	if a := actions(res); a["t"] != "adopt" || a["u"] != "adopt" || len(a) != 2 || res.TargetHead != before.ID.String() {
		t.Fatalf("tables %v (result %+v), want t and u adopted", a, res)
	}
	r.wantOperation(res.OpID, catalog.OpMerge, workflows.OutcomeAdopted)
	checkInvariants(t, r)
}

func TestMerge_DisjointTablesChangedOnBothSides_Merged(t *testing.T) {
	r := runningRig(t)
	base := r.main
	feat := r.fork("feat", r.main)
	r.write(&feat, "a", "a1")
	r.write(&r.main, "b", "b1")
	res, err := r.merge(client.MergeRequest{Source: "feat", ExpectedHead: r.main.ID.String()})
	if err != nil || res.Outcome != workflows.OutcomeMerged {
		t.Fatalf("merge: %+v, %v; want merged", res, err)
	}
	if len(res.Bases) != 1 || res.Bases[0] != base.ID.String() || res.Unchanged != 1 {
		t.Fatalf("bases %v, unchanged %d; want base %s and t unchanged", res.Bases, res.Unchanged, base.ID)
	}
	if a := actions(res); a["a"] != "adopt" || a["b"] != "keep" {
		t.Fatalf("tables %v, want a adopted, b kept", a)
	}
	head := r.headOf("main")
	want := map[string]string{"t": r.main.Pins["t"].String(), "a": feat.Pins["a"].String(), "b": r.main.Pins["b"].String()}
	for table, v := range want {
		if head.Pins[table].String() != v {
			t.Fatalf("head pins %v, want %v", head.Pins, want)
		}
	}
	if head.Parents[0] != r.main.ID || head.Parents[1] != feat.ID {
		t.Fatalf("head parents %v", head.Parents)
	}
	if ok, err := r.graphAPI().IsAncestorOf(r.ctx, feat.ID, r.graphCommit(head.ID)); err != nil || !ok {
		t.Fatalf("the merged head %s is not in the merge's lineage: %v, %v", feat.ID, ok, err)
	}
	r.wantOperation(res.OpID, catalog.OpMerge, workflows.OutcomeMerged)
	recordHistory(t, r, client.MergeWorkflowID(r.graph, "main", res.OpID), "", "merge_merged")

	// Merging again finds nothing new; a later change merges from the new base.
	again, err := r.merge(client.MergeRequest{Source: "feat"})
	if err != nil || again.Outcome != workflows.OutcomeAlreadyUpToDate || again.Commit != "" {
		t.Fatalf("second merge: %+v, %v; want already_up_to_date", again, err)
	}
	r.write(&feat, "a", "a2")
	third, err := r.merge(client.MergeRequest{Source: "feat"})
	if err != nil || third.Outcome != workflows.OutcomeMerged || third.Bases[0] != res.SourceHead || actions(third)["a"] != "adopt" {
		t.Fatalf("third merge: %+v, %v; want merged from base %s", third, err, res.SourceHead)
	}
	checkInvariants(t, r)
}

func TestMerge_Conflict_PublishesNothingAndListsEveryConflict(t *testing.T) {
	r := runningRig(t)
	// Both sides put different objects under one name in t and in u: a conflict on that
	// name in each; v only feat changed.
	feat := r.fork("feat", r.main)
	r.writeEntry(&feat, "t", "part-0", "t-feat")
	r.writeEntry(&feat, "u", "part-0", "u-feat")
	r.write(&feat, "v", "v-feat")
	r.writeEntry(&r.main, "t", "part-0", "t-main")
	r.writeEntry(&r.main, "u", "part-0", "u-main")
	r.store.ResetCounts()
	res, err := r.merge(client.MergeRequest{Source: "feat"})
	if !errors.Is(err, outcome.ErrConflict) || res.Outcome != outcome.Conflict || res.Conflicts != 2 || res.Commit != "" {
		t.Fatalf("merge: %+v, %v; want conflict on two tables", res, err)
	}
	for _, line := range res.Tables {
		if (line.Table == "t" || line.Table == "u") && (len(line.Conflicts) != 1 || line.Conflicts[0] != "part-0") {
			t.Fatalf("table %s: conflicts %+v, want the one name both sides changed, part-0", line.Table, line.Conflicts)
		}
	}
	if a := actions(res); a["t"] != "conflict" || a["u"] != "conflict" || a["v"] != "adopt" {
		t.Fatalf("tables %v, want t and u in conflict, v adoptable", a)
	}
	r.wantNoPuts("a conflicting merge")
	r.wantMainUnmoved()
	r.wantOperation(res.OpID, catalog.OpMerge, outcome.Conflict)
	recordHistory(t, r, client.MergeWorkflowID(r.graph, "main", res.OpID), "", "merge_conflict")
	checkInvariants(t, r)
}

func TestMerge_SourceAlreadyInTarget_AlreadyUpToDateWritesNothing(t *testing.T) {
	r := runningRig(t)
	feat := r.fork("feat", r.main)
	r.write(&feat, "u", "u1")
	r.store.ResetCounts()
	// main is an ancestor of feat: merging main into feat has nothing to bring.
	res, err := r.merge(client.MergeRequest{Source: "main", Target: "feat"})
	if err != nil || res.Outcome != workflows.OutcomeAlreadyUpToDate || res.Commit != "" || len(res.Bases) != 1 || res.Bases[0] != res.SourceHead {
		t.Fatalf("merge: %+v, %v; want already_up_to_date, main's head the base", res, err)
	}
	r.wantNoPuts("")
	r.wantOperation(res.OpID, catalog.OpMerge, workflows.OutcomeAlreadyUpToDate)
}

func TestMerge_Preview_ReturnsThePlanAndWritesNothing(t *testing.T) {
	r := runningRig(t)
	feat := r.fork("feat", r.main)
	r.write(&feat, "a", "a1")
	r.write(&r.main, "b", "b1")
	r.store.ResetCounts()
	res, err := r.merge(client.MergeRequest{Source: "feat", Preview: true})
	if err != nil || res.Outcome != workflows.OutcomeMerged || !res.Preview || res.Commit != "" || res.OpID != "" {
		t.Fatalf("preview: %+v, %v; want the plan of a merge, no commit, no operation", res, err)
	}
	if a := actions(res); a["a"] != "adopt" || a["b"] != "keep" {
		t.Fatalf("tables %v", a)
	}
	r.wantNoPuts("a preview")
	r.wantMainUnmoved()
	ops, err := r.ops(nil).List(r.ctx, client.OpsFilter{Graph: r.graph, Kind: "merge"})
	if err != nil || len(ops) != 0 {
		t.Fatalf("ledger merges after a preview: %+v, %v; want none", ops, err)
	}
	if pins := r.pinsHeld(); len(pins) != 0 {
		t.Fatalf("pins after a preview: %+v", pins)
	}
}

// moveDuringPut delays the first commit put into target's tree and, while it
// waits, appends another commit to target, so the merge's put finds the seq taken.
func (r *rig) moveDuringPut(target *graph.CommitView) {
	r.t.Helper()
	rule := r.treePutsOf(*target)
	rule.Mode, rule.Delay, rule.Times = faults.Delay, 2*time.Second, 1
	r.store.Add(rule)
	go func() {
		r.waitFor("the merge's commit put", 20*time.Second, func() bool { return r.store.CountMatching(r.treePutsOf(*target)).Attempted > 0 })
		r.write(target, "z", "moved")
	}()
}

func TestMerge_TargetMovedDuringPut(t *testing.T) {
	t.Run("WithoutExpectedHead_Replanned", func(t *testing.T) {
		r := runningRig(t)
		feat := r.fork("feat", r.main)
		r.write(&feat, "a", "a1")
		r.write(&r.main, "b", "b1")
		target := r.main
		r.moveDuringPut(&target)
		res, err := r.merge(client.MergeRequest{Source: "feat"})
		if err != nil || res.Outcome != workflows.OutcomeMerged || res.HeadRetries != 1 {
			t.Fatalf("merge: %+v, %v; want merged after one re-plan", res, err)
		}
		head := r.headOf("main")
		if head.ID.String() != res.Commit || head.Parents[0] != target.ID || head.Pins["z"] != target.Pins["z"] || head.Pins["a"] != feat.Pins["a"] {
			t.Fatalf("head %+v, want the merge on top of the commit that moved main (%s)", head, target.ID)
		}
		r.wantOperation(res.OpID, catalog.OpMerge, workflows.OutcomeMerged)
		recordHistory(t, r, client.MergeWorkflowID(r.graph, "main", res.OpID), "", "merge_replanned")
		checkInvariants(t, r)
	})
	t.Run("WithExpectedHead_Conflict", func(t *testing.T) {
		r := runningRig(t)
		feat := r.fork("feat", r.main)
		r.write(&feat, "a", "a1")
		r.write(&r.main, "b", "b1")
		target := r.main
		r.moveDuringPut(&target)
		res, err := r.merge(client.MergeRequest{Source: "feat", ExpectedHead: r.main.ID.String()})
		if !errors.Is(err, outcome.ErrConflict) || res.Commit != "" {
			t.Fatalf("merge: %+v, %v; want conflict", res, err)
		}
		if head := r.headOf("main"); head.ID != target.ID {
			t.Fatalf("head %s, want the other writer's %s", head.ID, target.ID)
		}
		r.wantOperation(res.OpID, catalog.OpMerge, outcome.Conflict)
	})
}

func TestMerge_CommitPutFaults_EachEndsDefinitively(t *testing.T) {
	setup := func(t *testing.T) (*rig, graph.CommitView) {
		r := newRig(t)
		r.startWorker()
		feat := r.fork("feat", r.main)
		r.write(&feat, "a", "a1")
		r.write(&r.main, "b", "b1")
		return r, feat
	}
	t.Run("AnswerLost_MergedOnce", func(t *testing.T) {
		t.Parallel()
		r, _ := setup(t)
		rule := r.treePutsOf(r.main)
		rule.Mode, rule.Times = faults.ApplyLoseAnswer, 1
		r.store.Add(rule)
		res, err := r.merge(client.MergeRequest{Source: "feat"})
		if err != nil || res.Outcome != workflows.OutcomeMerged {
			t.Fatalf("merge: %+v, %v; want merged", res, err)
		}
		if n := r.store.CountMatching(r.treePutsOf(r.main)).Sent; n != 1 {
			t.Fatalf("%d commit puts, want 1 (the lost answer settled by read-back)", n)
		}
		if head := r.headOf("main"); head.ID.Seq != r.main.ID.Seq+1 {
			t.Fatalf("head %s, want exactly one commit after %s", head.ID, r.main.ID)
		}
		r.wantOperation(res.OpID, catalog.OpMerge, workflows.OutcomeMerged)
	})
	t.Run("LandsLate_InDoubtThenMerged", func(t *testing.T) {
		t.Parallel()
		r, _ := setup(t)
		rule := r.treePutsOf(r.main)
		rule.Mode = faults.Hold
		remove := r.store.Add(rule)
		h, err := r.gc.StartMerge(r.ctx, client.MergeRequest{Graph: r.graph, Source: "feat", Target: "main"})
		if err != nil {
			t.Fatal(err)
		}
		res, err := h.Wait(r.ctx)
		if !errors.Is(err, outcome.ErrInDoubt) || res.OpID != h.OpID || res.Commit == "" {
			t.Fatalf("wait: %+v, %v; want in_doubt naming the commit", res, err)
		}
		if len(r.pinsHeld()) == 0 {
			t.Fatal("no pins held while the merge is in doubt")
		}
		if _, err := r.store.Held()[0].Release(r.ctx); err != nil { // the first put lands, late
			t.Fatalf("release: %v", err)
		}
		remove()
		final, err := h.WaitFinal(r.ctx)
		if err != nil || final.Outcome != workflows.OutcomeMerged || final.Commit != res.Commit || final.SettleAttempts < 1 {
			t.Fatalf("final: %+v, %v; want merged as %s after a settle", final, err, res.Commit)
		}
		wantLateRefused(t, r.ctx, "late re-issue", r.store.Held()) // the re-issues: each fails its condition
		r.wantOperation(h.OpID, catalog.OpMerge, workflows.OutcomeMerged)
		recordHistory(t, r, h.WorkflowID, h.RunID, "merge_in_doubt_settled")
		checkInvariants(t, r)
	})
	t.Run("Refused_NothingWritten", func(t *testing.T) {
		t.Parallel()
		r, _ := setup(t)
		rule := r.treePutsOf(r.main)
		rule.Mode, rule.Status = faults.Refuse, 403
		r.store.Add(rule)
		res, err := r.merge(client.MergeRequest{Source: "feat"})
		if !errors.Is(err, outcome.ErrRefused) || res.Commit != "" {
			t.Fatalf("merge: %+v, %v; want refused", res, err)
		}
		r.wantMainUnmoved()
		r.wantOperation(res.OpID, catalog.OpMerge, outcome.Refused)
	})
}

// TestMerge_CleanupDuringInDoubtMerge_KeepsTheMergeInputs: a sweep that runs
// while a merge's commit is in doubt keeps the merge base, which nothing but
// the merge's pins holds.
func TestMerge_CleanupDuringInDoubtMerge_KeepsTheMergeInputs(t *testing.T) {
	r := runningRig(t)
	base := r.main
	feat := r.fork("feat", r.main)
	r.write(&feat, "a", "a1")
	r.write(&r.main, "b", "b1")
	rule := r.treePutsOf(r.main)
	rule.Mode = faults.Hold
	remove := r.store.Add(rule)
	h, err := r.gc.StartMerge(r.ctx, client.MergeRequest{Graph: r.graph, Source: "feat", Target: "main"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Wait(r.ctx); !errors.Is(err, outcome.ErrInDoubt) {
		t.Fatalf("wait: %v, want in_doubt", err)
	}
	res := r.cleanup(client.CleanupRequest{KeepNewest: 1, Mode: workflows.CleanupModeSweep, GuardWindow: noGuard()})
	r.wantKept("merge base", base, "t")
	if res.Kept.Pin == 0 {
		t.Fatalf("cleanup kept %+v, want keys kept by the merge's pins", res.Kept)
	}
	remove()
	for _, held := range r.store.Held() {
		held.Drop()
	}
	final, err := h.WaitFinal(r.ctx)
	if err != nil || final.Outcome != workflows.OutcomeMerged {
		t.Fatalf("final: %+v, %v; want merged", final, err)
	}
	r.wantOperation(h.OpID, catalog.OpMerge, workflows.OutcomeMerged)
	checkInvariants(t, r)
}

// TestMergeRestoreDeleteTag_ReplayRecordedHistories replays histories
// recorded from real runs of Merge, Restore, DeleteBranch, CreateTag and
// DeleteTag against today's workflow code: a change that would break a run
// in flight fails here.
func TestMergeRestoreDeleteTag_ReplayRecordedHistories(t *testing.T) {
	for _, pattern := range []string{"merge_*.json", "restore_*.json", "deletebranch_*.json", "createtag_*.json", "deletetag_*.json"} {
		files, err := filepath.Glob(filepath.Join("testdata", pattern))
		if err != nil {
			t.Fatal(err)
		}
		if len(files) == 0 {
			t.Fatalf("no recorded history matches testdata/%s (record with %s=1)", pattern, recordEnv)
		}
		for _, f := range files {
			t.Run(filepath.Base(f), func(t *testing.T) {
				replayer := worker.NewWorkflowReplayer()
				workflows.Register(replayer)
				if err := replayer.ReplayWorkflowHistoryFromJSONFile(quietLogger(), f); err != nil {
					t.Fatalf("replay %s: %v", f, err)
				}
			})
		}
	}
}
