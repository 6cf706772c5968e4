package workflows_test

import (
	"errors"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"go.temporal.io/sdk/worker"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/storage"
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

// tag reads tag name straight from the bucket.
func (r *rig) tag(name string) (format.Tag, bool) {
	r.t.Helper()
	e, err := graph.ReadTag(r.ctx, r.inner, r.graph, name)
	if errors.Is(err, graph.ErrTagNotFound) {
		return format.Tag{}, false
	}
	if err != nil {
		r.t.Fatalf("read tag %s: %v", name, err)
	}
	return e.Tag, true
}

func TestRestore_ToCommit_BackupTagThenCommitWithTheCommitsPins(t *testing.T) {
	r := runningRig(t)
	old := r.main
	r.write(&r.main, "t", "t2")
	r.write(&r.main, "u", "u1")
	res, err := r.gc.Restore(r.ctx, client.RestoreRequest{Graph: r.graph, Branch: "main", ToCommit: old.ID.String()})
	if err != nil || res.Outcome != outcome.Done {
		t.Fatalf("restore: %+v, %v; want done", res, err)
	}
	head := r.headOf("main")
	if head.ID.String() != res.Commit || head.Parents[0] != r.main.ID || head.RestoredFrom != old.ID || !maps.Equal(head.Pins, old.Pins) {
		t.Fatalf("head %+v, want a commit on %s with %s's pins, restored from it", head, r.main.ID, old.ID)
	}
	wantBackup := activities.BackupTagName("main", r.main.ID.String())
	if res.BackupTag != wantBackup || res.PreviousHead != r.main.ID.String() {
		t.Fatalf("result %+v, want backup %s of %s", res, wantBackup, r.main.ID)
	}
	if tag, ok := r.tag(wantBackup); !ok || tag.Commit != r.main.ID || tag.State != format.TagLive {
		t.Fatalf("backup tag %+v (found %v), want a live tag of %s", tag, ok, r.main.ID)
	}
	r.wantOperation(res.OpID, catalog.OpRestore, outcome.Done)
	recordHistory(t, r, client.RestoreWorkflowID(r.graph, "main", res.OpID), "", "restore_done")
	checkInvariants(t, r)
}

func TestRestore_ToTag_WithoutBackup(t *testing.T) {
	r := runningRig(t)
	release := r.main
	if _, err := r.gc.CreateTag(r.ctx, client.CreateTagRequest{Graph: r.graph, Name: "release/1", Branch: "main"}); err != nil {
		t.Fatalf("tag: %v", err)
	}
	r.write(&r.main, "t", "t2")
	res, err := r.gc.Restore(r.ctx, client.RestoreRequest{Graph: r.graph, Branch: "main", ToTag: "release/1", NoBackup: true,
		ExpectedHead: r.main.ID.String()})
	if err != nil || res.Outcome != outcome.Done || res.RestoredFrom != release.ID.String() || res.BackupTag != "" {
		t.Fatalf("restore: %+v, %v; want done from %s without a backup", res, err, release.ID)
	}
	if head := r.headOf("main"); !maps.Equal(head.Pins, release.Pins) {
		t.Fatalf("head pins %v, want %v", head.Pins, release.Pins)
	}
	if _, ok := r.tag(activities.BackupTagName("main", r.main.ID.String())); ok {
		t.Fatal("a backup tag was written with the backup turned off")
	}
	checkInvariants(t, r)
}

func TestRestore_TargetReclaimedByCleanup_NotRetainedAndNothingWritten(t *testing.T) {
	r := runningRig(t)
	old := r.main
	r.write(&r.main, "t", "t2")
	// A commit cleanup reclaimed, from a tree that still has later commits: the ledger
	// records its deletion, so the restore says not_retained, not not_found.
	r.cleanup(client.CleanupRequest{KeepNewest: 1, Mode: workflows.CleanupModeSweep, GuardWindow: noGuard()})
	if r.exists(r.commitKey(old)) {
		t.Fatalf("cleanup kept %s", old.ID)
	}
	r.store.ResetCounts()
	res, err := r.gc.Restore(r.ctx, client.RestoreRequest{Graph: r.graph, Branch: "main", ToCommit: old.ID.String()})
	if !errors.Is(err, outcome.ErrNotRetained) || res.Commit != "" {
		t.Fatalf("restore of a reclaimed commit: %+v, %v; want not_retained", res, err)
	}
	r.wantNoPuts("")
	r.wantOperation(res.OpID, catalog.OpRestore, outcome.NotRetained)
	r.wantMainUnmoved()
	checkInvariants(t, r)
}

func TestRestore_CommitPutNeverAnswered_InDoubtThenSettled(t *testing.T) {
	r := runningRig(t)
	old := r.main
	r.write(&r.main, "t", "t2")
	rule := r.treePutsOf(r.main)
	rule.Mode, rule.Times = faults.FailBeforeSend, 6 // every put of the first attempt and of the first re-issue
	r.faultThenSettleSlowly(rule)
	h, err := r.gc.StartRestore(r.ctx, client.RestoreRequest{Graph: r.graph, Branch: "main", ToCommit: old.ID.String()})
	if err != nil {
		t.Fatal(err)
	}
	res, err := h.Wait(r.ctx)
	if !errors.Is(err, outcome.ErrInDoubt) || res.OpID != h.OpID {
		t.Fatalf("wait: %+v, %v; want in_doubt", res, err)
	}
	final, err := h.WaitFinal(r.ctx)
	if err != nil || final.Outcome != outcome.Done || final.SettleAttempts < 1 {
		t.Fatalf("final: %+v, %v; want done after a re-issue", final, err)
	}
	if head := r.headOf("main"); head.ID.String() != final.Commit || head.ID.Seq != r.main.ID.Seq+1 {
		t.Fatalf("head %s, want %s", head.ID, final.Commit)
	}
	r.wantOperation(h.OpID, catalog.OpRestore, outcome.Done)
	recordHistory(t, r, h.WorkflowID, h.RunID, "restore_in_doubt_settled")
	checkInvariants(t, r)
}

// createBranch creates logical from main through the CreateBranch workflow.
func (r *rig) createBranch(logical string) string {
	r.t.Helper()
	res, err := r.gc.CreateBranch(r.ctx, client.CreateBranchRequest{Graph: r.graph, Branch: logical})
	if err != nil {
		r.t.Fatalf("create %s: %v", logical, err)
	}
	return res.Native
}

func TestDeleteBranch_RetiredRefFencesLatePutAndNameCanBeCreatedAgain(t *testing.T) {
	r := runningRig(t)
	native := r.createBranch("feat")
	// The swap's answer is lost: read-back settles it as ours.
	r.store.Add(faults.Rule{Op: faults.OpPut, KeyPrefix: r.refPrefix("feat"), Mode: faults.ApplyLoseAnswer, Times: 1})
	res, err := r.gc.DeleteBranch(r.ctx, client.DeleteBranchRequest{Graph: r.graph, Branch: "feat"})
	if err != nil || res.Outcome != workflows.OutcomeDeleted || res.Native != native {
		t.Fatalf("delete: %+v, %v; want deleted %s", res, err, native)
	}
	ref := r.refs("feat")[native]
	if ref.State != format.RefRetired || ref.RetiredOp != res.OpID {
		t.Fatalf("ref %+v, want retired by %s", ref, res.OpID)
	}
	if inc := r.incarnation(native); inc.State != catalog.IncarnationRetired {
		t.Fatalf("witness %s, want retired", inc.State)
	}
	r.wantOperation(res.OpID, catalog.OpDeleteBranch, workflows.OutcomeDeleted)
	recordHistory(t, r, client.DeleteBranchWorkflowID(r.graph, "feat"), "", "deletebranch_deleted")

	if _, err := r.inner.Put(r.ctx, format.BranchRefKey(r.graph, native), liveRefBytes(t, "feat", ref.Head), storage.PutOptions{IfNoneMatch: true}); !errors.Is(err, storage.ErrPreconditionFailed) {
		t.Fatalf("late put of the live ref: %v, want precondition failed", err)
	}
	again := r.createBranch("feat")
	if again == native || len(r.liveNatives("feat")) != 1 {
		t.Fatalf("re-created as %s (live: %v), want one fresh incarnation", again, r.liveNatives("feat"))
	}
	if _, err := r.gc.DeleteBranch(r.ctx, client.DeleteBranchRequest{Graph: r.graph, Branch: "nope"}); !errors.Is(err, outcome.ErrNotFound) {
		t.Fatalf("delete of an unknown branch: %v, want not_found", err)
	}
	checkInvariants(t, r)
}

func TestDeleteBranch_Main_IsInvalid(t *testing.T) {
	r := runningRig(t)
	res, err := r.gc.DeleteBranch(r.ctx, client.DeleteBranchRequest{Graph: r.graph, Branch: "main", Force: true})
	if !errors.Is(err, outcome.ErrInvalid) || len(r.liveNatives("main")) != 1 {
		t.Fatalf("delete main: %+v, %v; want invalid with main still live", res, err)
	}
}

func TestDeleteBranch_TagPinned_ConflictUnlessForced_TagKeepsTheCommit(t *testing.T) {
	r := runningRig(t)
	r.createBranch("feat")
	feat := r.headOf("feat")
	tagged := r.write(&feat, "t", "t-feat")
	r.write(&feat, "t", "t-later")
	if _, err := r.gc.CreateTag(r.ctx, client.CreateTagRequest{Graph: r.graph, Name: "keep/me", Commit: tagged.ID.String()}); err != nil {
		t.Fatalf("tag: %v", err)
	}
	res, err := r.gc.DeleteBranch(r.ctx, client.DeleteBranchRequest{Graph: r.graph, Branch: "feat"})
	if !errors.Is(err, outcome.ErrConflict) || !strings.Contains(res.Message, "keep/me") || len(r.liveNatives("feat")) != 1 {
		t.Fatalf("delete: %+v, %v; want conflict naming the tag, branch still live", res, err)
	}
	res, err = r.gc.DeleteBranch(r.ctx, client.DeleteBranchRequest{Graph: r.graph, Branch: "feat", Force: true})
	if err != nil || res.Outcome != workflows.OutcomeDeleted || len(res.Tags) != 1 || len(r.liveNatives("feat")) != 0 {
		t.Fatalf("forced delete: %+v, %v; want deleted", res, err)
	}
	// Cleanup reclaims the deleted branch's tree but the tagged commit.
	r.cleanup(client.CleanupRequest{KeepNewest: 1, Mode: workflows.CleanupModeSweep, GuardWindow: noGuard()})
	r.wantKept("tagged commit of a deleted branch", tagged, "t")
	r.wantGone("untagged head of a deleted branch", r.commitKey(feat))
	checkInvariants(t, r)
}

// handWrittenIncarnation writes, as an older tool would, a live incarnation
// of branch forked from main's head: a fork commit and a live ref, with no
// ledger witness. It returns the native name and the ref's bytes.
func (r *rig) handWrittenIncarnation(branch string) (string, []byte) {
	r.t.Helper()
	tree := ulid.Make()
	g := r.graphAPI()
	plan, err := g.PlanFork(r.ctx, graph.ForkSpec{Branch: branch, Tree: tree, Source: r.main.ID.String(),
		Author: "old-tool", Message: "fork", Time: time.Now().UTC(), Op: "old-tool-" + tree.String()})
	if err != nil {
		r.t.Fatalf("plan fork: %v", err)
	}
	if err := g.WriteFork(r.ctx, plan); err != nil {
		r.t.Fatalf("fork commit: %v", err)
	}
	if _, err := r.inner.Put(r.ctx, format.BranchRefKey(r.graph, plan.Ref.Native), plan.RefBody, storage.PutOptions{IfNoneMatch: true}); err != nil {
		r.t.Fatalf("put ref: %v", err)
	}
	return plan.Ref.Native, plan.RefBody
}

func TestRepairBranch_TwoLiveIncarnations_ListRefusesThenRepairKeepsOne(t *testing.T) {
	r := runningRig(t)
	reader := client.NewReader(r.inner)
	keep, _ := r.handWrittenIncarnation("dup")
	retire, retireBytes := r.handWrittenIncarnation("dup")

	_, err := reader.ListBranches(r.ctx, r.graph)
	if !errors.Is(err, outcome.ErrConflict) {
		t.Fatalf("list with two live incarnations: %v, want conflict", err)
	}
	for _, want := range []string{"graft branch repair " + r.graph + " dup --keep", keep, retire} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("refusal %q does not name %q", err, want)
		}
	}
	if _, err := reader.ShowBranch(r.ctx, r.graph, "dup"); !errors.Is(err, outcome.ErrConflict) || !strings.Contains(err.Error(), "graft branch repair") {
		t.Fatalf("show with two live incarnations: %v, want conflict naming the repair", err)
	}

	res, err := r.gc.RepairBranch(r.ctx, client.RepairBranchRequest{Graph: r.graph, Branch: "dup", Keep: keep})
	if err != nil {
		t.Fatalf("repair: %v", err)
	}
	if res.Outcome != outcome.Done || res.Kept != keep || !slices.Equal(res.Retired, []string{retire}) {
		t.Fatalf("repair %+v, want done keeping %s and retiring %s", res, keep, retire)
	}

	recordHistory(t, r, client.RepairBranchWorkflowID(r.graph, "dup"), "", "repairbranch_done")
	branches, err := reader.ListBranches(r.ctx, r.graph)
	if err != nil {
		t.Fatalf("list after repair: %v", err)
	}
	var got []string
	for _, b := range branches {
		got = append(got, b.Branch+"="+b.Native)
		if b.Head == "" || b.Tables != 1 || b.HeadTime.IsZero() {
			t.Fatalf("branch info %+v lacks its head", b)
		}
	}
	if want := []string{"dup=" + keep, "main=" + r.headNative("main")}; !slices.Equal(got, want) {
		t.Fatalf("branches %v, want %v", got, want)
	}
	ref := r.refs("dup")[retire]
	if ref.State != format.RefRetired || ref.RetiredOp != res.OpID {
		t.Fatalf("ref of %s is %+v, want retired by %s", retire, ref, res.OpID)
	}
	// The retired ref is a fence: a late put of the live ref cannot land.
	if _, err := r.inner.Put(r.ctx, format.BranchRefKey(r.graph, retire), retireBytes, storage.PutOptions{IfNoneMatch: true}); !errors.Is(err, storage.ErrPreconditionFailed) {
		t.Fatalf("late put of the retired key: %v, want precondition failed", err)
	}
	// The ledger now names the kept incarnation live; the repair is recorded.
	if inc := r.incarnation(keep); inc.State != catalog.IncarnationLive || inc.OpID != res.OpID {
		t.Fatalf("witness of %s is %+v, want live under the repair", keep, inc)
	}
	if op := r.operation(res.OpID); op.Kind != catalog.OpDeleteBranch || op.State != catalog.OperationDone || op.Outcome != catalog.OutcomeDone {
		t.Fatalf("operation %+v, want delete_branch done/done", op)
	}
}

func TestRepairBranch_KeepNotLive_IsInvalidAndRetiresNothing(t *testing.T) {
	r := runningRig(t)
	a, _ := r.handWrittenIncarnation("dup")
	b, _ := r.handWrittenIncarnation("dup")
	_, err := r.gc.RepairBranch(r.ctx, client.RepairBranchRequest{Graph: r.graph, Branch: "dup", Keep: format.NativeName("dup", ulid.Make())})
	if !errors.Is(err, outcome.ErrInvalid) || !strings.Contains(err.Error(), a) || !strings.Contains(err.Error(), b) {
		t.Fatalf("repair keeping an unknown native: %v, want invalid naming the live ones", err)
	}
	if live := r.liveNatives("dup"); len(live) != 2 {
		t.Fatalf("live refs %v, want both untouched", live)
	}
	// Leave the graph as a repair would: the oracle holds every test to one live ref per name.
	if _, err := r.gc.RepairBranch(r.ctx, client.RepairBranchRequest{Graph: r.graph, Branch: "dup", Keep: a}); err != nil {
		t.Fatalf("repair: %v", err)
	}
}

func TestReader_ShowBranchAndGraph(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	reader := client.NewReader(r.inner)
	d, err := reader.ShowBranch(r.ctx, r.graph, "main")
	if err != nil {
		t.Fatal(err)
	}
	if d.Head != r.main.ID.String() || d.Native != r.headNative("main") || d.Ref.State != "live" || d.Ref.ETag == "" ||
		len(d.Pins) != 1 || d.Pins[0].Table != "t" || d.Pins[0].Version != r.main.Pins["t"].String() ||
		!slices.Equal(d.Parents, []string{r.main.Parents[0].String()}) {
		t.Fatalf("show main: %+v", d)
	}
	if _, err := reader.ShowBranch(r.ctx, r.graph, "nope"); !errors.Is(err, outcome.ErrNotFound) {
		t.Fatalf("show unknown branch: %v, want not_found", err)
	}
	if g, err := reader.Graph(r.ctx, r.graph); err != nil || g.Name != r.graph || g.DefaultBranch != "main" {
		t.Fatalf("graph: %+v, %v", g, err)
	}
	if _, err := reader.Graph(r.ctx, "no-such-graph"); !errors.Is(err, outcome.ErrNotFound) {
		t.Fatalf("unknown graph: %v, want not_found", err)
	}
	if _, err := reader.ListBranches(r.ctx, "no-such-graph"); !errors.Is(err, outcome.ErrNotFound) {
		t.Fatalf("list unknown graph: %v, want not_found", err)
	}
}

func TestCreateTag_RepeatIsIdempotent_OtherCommitConflicts_DeletedNameNeverReused(t *testing.T) {
	r := runningRig(t)
	first, err := r.gc.CreateTag(r.ctx, client.CreateTagRequest{Graph: r.graph, Name: "v1"})
	if err != nil || first.Outcome != outcome.Created || first.Existing || first.Commit != r.main.ID.String() {
		t.Fatalf("create: %+v, %v; want created on main's head", first, err)
	}
	again, err := r.gc.CreateTag(r.ctx, client.CreateTagRequest{Graph: r.graph, Name: "v1", Commit: r.main.ID.String()})
	if err != nil || again.Outcome != outcome.Created || !again.Existing {
		t.Fatalf("same create again: %+v, %v; want created, existing", again, err)
	}
	old := r.main
	r.write(&r.main, "t", "t2")
	other, err := r.gc.CreateTag(r.ctx, client.CreateTagRequest{Graph: r.graph, Name: "v1", Branch: "main"})
	if !errors.Is(err, outcome.ErrConflict) {
		t.Fatalf("create on another commit: %+v, %v; want conflict", other, err)
	}
	r.wantOperation(other.OpID, catalog.OpTag, outcome.Conflict)

	reader := client.NewReader(r.inner)
	if list, err := reader.ListTags(r.ctx, r.graph, false); err != nil || len(list) != 1 || list[0].Commit != old.ID.String() {
		t.Fatalf("list: %+v, %v", list, err)
	}
	if show, err := reader.ShowTag(r.ctx, r.graph, "v1"); err != nil || !show.Retained || len(show.Pins) != 1 || show.Branch != "main" {
		t.Fatalf("show: %+v, %v", show, err)
	}

	del, err := r.gc.DeleteTag(r.ctx, client.DeleteTagRequest{Graph: r.graph, Name: "v1"})
	if err != nil || del.Outcome != workflows.OutcomeDeleted {
		t.Fatalf("delete: %+v, %v; want deleted", del, err)
	}
	recordHistory(t, r, client.DeleteTagWorkflowID(r.graph, "v1"), "", "deletetag_deleted")
	if tag, _ := r.tag("v1"); tag.State != format.TagRetired || tag.RetiredOp != del.OpID {
		t.Fatalf("tag after delete %+v, want retired by %s", tag, del.OpID)
	}
	if _, err := r.gc.DeleteTag(r.ctx, client.DeleteTagRequest{Graph: r.graph, Name: "v1"}); !errors.Is(err, outcome.ErrNotFound) {
		t.Fatalf("second delete: %v, want not_found", err)
	}
	if _, err := r.gc.CreateTag(r.ctx, client.CreateTagRequest{Graph: r.graph, Name: "v1", Commit: old.ID.String()}); !errors.Is(err, outcome.ErrConflict) {
		t.Fatalf("create under a deleted name: %v, want conflict", err)
	}
	if list, err := reader.ListTags(r.ctx, r.graph, false); err != nil || len(list) != 0 {
		t.Fatalf("live tags after delete: %+v, %v", list, err)
	}
	checkInvariants(t, r)
}

func TestCreateTag_TagIsACleanupRoot_UntilDeleted(t *testing.T) {
	r := runningRig(t)
	tagged := r.main
	if _, err := r.gc.CreateTag(r.ctx, client.CreateTagRequest{Graph: r.graph, Name: "release/1", Commit: tagged.ID.String()}); err != nil {
		t.Fatal(err)
	}
	r.write(&r.main, "t", "t2")
	r.write(&r.main, "t", "t3")
	sweep := client.CleanupRequest{KeepNewest: 1, Mode: workflows.CleanupModeSweep, GuardWindow: noGuard()}
	r.cleanup(sweep)
	r.wantKept("tagged commit", tagged, "t")
	checkInvariants(t, r)
	if _, err := r.gc.DeleteTag(r.ctx, client.DeleteTagRequest{Graph: r.graph, Name: "release/1"}); err != nil {
		t.Fatal(err)
	}
	r.cleanup(sweep)
	r.wantGone("commit of a deleted tag", r.commitKey(tagged))
	checkInvariants(t, r)
}

func TestCreateTag_PutNeverAnswered_InDoubtThenSettled(t *testing.T) {
	r := runningRig(t)
	r.faultThenSettleSlowly(faults.Rule{Op: faults.OpPut, KeyPrefix: format.TagsPrefix(r.graph), Mode: faults.FailBeforeSend, Times: 3})
	res, err := r.gc.CreateTag(r.ctx, client.CreateTagRequest{Graph: r.graph, Name: "v1"})
	var oe *outcome.Error
	if !errors.Is(err, outcome.ErrInDoubt) || !errors.As(err, &oe) || oe.OpID == "" {
		t.Fatalf("create: %+v, %v; want in_doubt with an operation id", res, err)
	}
	op, err := r.ops(r.gc).Wait(r.ctx, oe.OpID)
	if err != nil || op.Outcome != outcome.Created {
		t.Fatalf("operation %+v, %v; want created once settled", op, err)
	}
	if tag, ok := r.tag("v1"); !ok || tag.Commit != r.main.ID {
		t.Fatalf("tag %+v (found %v), want one naming %s", tag, ok, r.main.ID)
	}
	r.wantOperation(oe.OpID, catalog.OpTag, outcome.Created)
	recordHistory(t, r, client.CreateTagWorkflowID(r.graph, "v1"), "", "createtag_in_doubt_settled")
}
