package workflows_test

import (
	"errors"
	"maps"
	"testing"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/storage/faults"
	"github.com/graftworks/graft/workflows"
)

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
