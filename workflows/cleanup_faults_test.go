package workflows_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage/faults"
	"github.com/graftworks/graft/workflows"
)

// TestCleanup_LostDeleteAcknowledgements_SweepFinishesWithExactCounts: delete requests
// that are applied but whose answers are lost are re-sent; deleting what is already gone
// succeeds, so the sweep finishes and the counts come out exact.
func TestCleanup_LostDeleteAcknowledgements_SweepFinishesWithExactCounts(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.startWorker()
	junk := r.garbage([]string{"t", "u"}, 120)
	r.store.Add(faults.Rule{Op: faults.OpDeleteBatch, Mode: faults.ApplyLoseAnswer, Times: 3})

	res := r.cleanup(client.CleanupRequest{KeepNewest: 1, Mode: workflows.CleanupModeSweep, GuardWindow: noGuard(),
		Tuning: &workflows.CleanupTuning{BatchSize: 50}})
	if lost := r.store.Count(faults.OpDeleteBatch).Faults[faults.ApplyLoseAnswer]; lost != 3 {
		t.Fatalf("%d delete answers lost, want 3", lost)
	}
	if res.Deleted.Objects != int64(len(junk)) || res.Deleted != res.Condemned {
		t.Fatalf("deleted %+v of condemned %+v (kept %+v), want all %d garbage objects", res.Deleted, res.Condemned, res.Kept, len(junk))
	}
	r.wantGone("garbage", junk...)
	r.wantKept("main's head", r.main, "t")
	checkInvariants(t, r)
}

// TestCleanup_WorkerStoppedMidSweep_NewWorkerFinishes: the worker running a sweep stops
// while a delete is in flight; a new worker picks the activity up from its last heartbeat
// and finishes. Nothing retained is deleted and the counts are exact.
func TestCleanup_WorkerStoppedMidSweep_NewWorkerFinishes(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	junk := r.garbage([]string{"t", "u"}, 300)
	removeDelay := r.store.Add(faults.Rule{Op: faults.OpDeleteBatch, Mode: faults.Delay, Delay: 200 * time.Millisecond})
	first := r.newWorker()

	req := r.sweepInBatches()
	h, err := r.gc.StartCleanup(r.ctx, req)
	if err != nil {
		t.Fatalf("start cleanup: %v", err)
	}
	// A second request for the same graph attaches to the running cleanup.
	if again, err := r.gc.StartCleanup(r.ctx, req); err != nil || again.RunID != h.RunID {
		t.Fatalf("second request started %+v, %v; want it attached to run %s", again, err, h.RunID)
	}
	runID := r.waitSweepUnderWay(h, 100)
	first.stop()
	_, deletedAtStop := r.condemnedSummary(runID)
	if deletedAtStop >= int64(len(junk)) {
		t.Fatalf("the sweep finished (%d deleted) before the worker stopped", deletedAtStop)
	}
	removeDelay()
	r.newWorker()

	res, err := h.Wait(r.ctx)
	if err != nil {
		t.Fatalf("cleanup: %v", err)
	}
	if res.Deleted.Objects != int64(len(junk)) || res.Deleted != res.Condemned {
		t.Fatalf("deleted %+v of condemned %+v, want all %d garbage objects (%d before the stop)", res.Deleted, res.Condemned, len(junk), deletedAtStop)
	}
	r.wantGone("garbage", junk...)
	r.wantKept("main's head", r.main, "t")
	checkInvariants(t, r)
}

// TestCleanup_ManyBatches_ContinuesAsNewAndFinishes: a sweep longer than one execution's
// budget continues as new, carrying its figures, and finishes.
func TestCleanup_ManyBatches_ContinuesAsNewAndFinishes(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.startWorker()
	junk := r.garbage([]string{"t", "u", "w"}, 40)
	res := r.cleanupRecorded(client.CleanupRequest{KeepNewest: 1, Mode: workflows.CleanupModeSweep, GuardWindow: noGuard(),
		Tuning: &workflows.CleanupTuning{BatchSize: 10, BatchesPerActivity: 1, ActivitiesPerRun: 3, Parallelism: 2}}, "cleanup_continued_as_new")
	if res.Sweep.ContinuedAsNew < 2 {
		t.Fatalf("continued as new %d times, want several", res.Sweep.ContinuedAsNew)
	}
	if res.Deleted.Objects != int64(len(junk)) || res.Deleted != res.Condemned || res.Tables != 3 {
		t.Fatalf("deleted %+v of condemned %+v (kept %+v) over %d tables, want all %d garbage objects", res.Deleted, res.Condemned, res.Kept, res.Tables, len(junk))
	}
	r.wantGone("garbage", junk...)
	checkInvariants(t, r)
}

// TestCleanup_CreateFromOldCommitRacingSweep_CreatedIntactOrRefused: a create from a
// commit that the running cleanup condemns, over many seeded interleavings. Each create
// either ends created — and then every version its fork pins exists — or is refused
// (not_retained; not_found when the commit itself was already deleted). Never does a
// created branch name a deleted version.
func TestCleanup_CreateFromOldCommitRacingSweep_CreatedIntactOrRefused(t *testing.T) {
	t.Parallel()
	const seeds = 20
	r := newRig(t)
	r.startWorker()
	versionPrefix := format.TableVersionsPrefix(r.graph, "t")
	tally := map[outcome.Outcome]int{}
	for seed := range seeds {
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		old := r.commitAt("t", fmt.Sprintf("old-%d", seed), time.Now())
		r.commitAt("t", fmt.Sprintf("new-%d", seed), time.Now())
		var removes []func()
		if d := time.Duration(rng.IntN(300)) * time.Millisecond; d > 0 {
			removes = append(removes, r.store.Add(faults.Rule{Op: faults.OpDeleteBatch, Mode: faults.Delay, Delay: d}))
		}
		if d := time.Duration(rng.IntN(300)) * time.Millisecond; d > 0 { // the create's probe of the version
			removes = append(removes, r.store.Add(faults.Rule{Op: faults.OpHead, KeyPrefix: versionPrefix, Mode: faults.Delay, Delay: d}))
		}
		createAfter := time.Duration(rng.IntN(700)) * time.Millisecond

		h, err := r.gc.StartCleanup(r.ctx, client.CleanupRequest{Graph: r.graph, KeepNewest: 1, Mode: workflows.CleanupModeSweep, GuardWindow: noGuard()})
		if err != nil {
			t.Fatalf("seed %d: start cleanup: %v", seed, err)
		}
		time.Sleep(createAfter)
		branch := fmt.Sprintf("race-%d", seed)
		created, err := r.gc.CreateBranch(r.ctx, client.CreateBranchRequest{Graph: r.graph, Branch: branch, FromCommit: old.ID.String()})
		o, _ := outcome.Of(err)
		switch {
		case err == nil && created.Outcome == outcome.Created:
			o = outcome.Created
			head := r.mustHead(branch)
			if head.Pins["t"] != old.Pins["t"] {
				t.Fatalf("seed %d: branch pins %v, want the old commit's version", seed, head.Pins)
			}
			r.wantKept(fmt.Sprintf("seed %d: created branch's head", seed), head, "t")
		case errors.Is(err, outcome.ErrNotRetained):
		default:
			t.Fatalf("seed %d: create from the condemned commit: %+v, %v", seed, created, err)
		}
		tally[o]++
		if _, err := h.Wait(r.ctx); err != nil {
			t.Fatalf("seed %d: cleanup: %v", seed, err)
		}
		for _, remove := range removes {
			remove()
		}
		checkInvariants(t, r)
	}
	t.Logf("outcomes over %d seeds: %v", seeds, tally)
	// A cleanup with nothing in flight reclaims the refused creates' sources; the created
	// branches keep what they pin.
	r.cleanup(client.CleanupRequest{KeepNewest: 1, Mode: workflows.CleanupModeSweep, GuardWindow: noGuard()})
	checkInvariants(t, r)
	ops, err := r.cat.OperationList(r.ctx, catalog.OperationListParams{Graph: r.graph, Kind: catalog.OpCreateBranch})
	if err != nil {
		t.Fatalf("list operations: %v", err)
	}
	for _, op := range ops {
		if op.State != catalog.OperationDone {
			t.Fatalf("create %s is still %s", op.ID, op.State)
		}
	}
}

// TestCleanup_WorkflowTerminatedMidSweep_NextCleanupFinishesItsRun: a cleanup whose
// workflow is terminated mid-sweep leaves its run recorded running, and its condemned
// set keeps refusing pins (a create from a condemned commit is not_retained). The next
// cleanup finds the run orphaned, deletes the rest of its plan, finishes it, and then
// does its own run.
func TestCleanup_WorkflowTerminatedMidSweep_NextCleanupFinishesItsRun(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.startWorker()
	old := r.main
	r.commitAt("t", "v2", time.Now())
	junk := r.garbage([]string{"t", "u"}, 200)
	removeDelay := r.store.Add(faults.Rule{Op: faults.OpDeleteBatch, Mode: faults.Delay, Delay: 200 * time.Millisecond})
	h, err := r.gc.StartCleanup(r.ctx, r.sweepInBatches())
	if err != nil {
		t.Fatalf("start cleanup: %v", err)
	}
	orphan := r.waitSweepUnderWay(h, 50)
	if err := r.tc.TerminateWorkflow(r.ctx, h.WorkflowID, "", "operator terminated the cleanup"); err != nil {
		t.Fatalf("terminate: %v", err)
	}
	removeDelay()
	if run, err := r.cat.CleanupRunGet(r.ctx, catalog.CleanupRunGetParams{ID: orphan}); err != nil || run.State != catalog.CleanupRunning {
		t.Fatalf("orphaned run %+v, %v; want it still running", run, err)
	}
	if _, err := r.gc.CreateBranch(r.ctx, client.CreateBranchRequest{Graph: r.graph, Branch: "from-old", FromCommit: old.ID.String()}); !errors.Is(err, outcome.ErrNotRetained) {
		t.Fatalf("create from a commit the orphaned run condemned: %v, want not_retained", err)
	}

	res := r.cleanupRecorded(client.CleanupRequest{KeepNewest: 1, Mode: workflows.CleanupModeSweep, GuardWindow: noGuard()}, "cleanup_adopted_orphan")
	if len(res.Adopted) != 1 || res.Adopted[0] != orphan {
		t.Fatalf("adopted %v, want [%s]", res.Adopted, orphan)
	}
	run, err := r.cat.CleanupRunGet(r.ctx, catalog.CleanupRunGetParams{ID: orphan})
	if err != nil || run.State != catalog.CleanupDone {
		t.Fatalf("orphaned run %+v, %v; want it finished", run, err)
	}
	if condemned, deleted := r.condemnedSummary(orphan); condemned != deleted || condemned < int64(len(junk)) {
		t.Fatalf("orphaned run condemned %d, deleted %d; want its whole plan deleted", condemned, deleted)
	}
	r.wantGone("garbage", junk...)
	r.wantGone("old commit", r.commitKey(old))
	r.wantKept("main's head", r.main, "t")
	checkInvariants(t, r)
}

// TestCleanup_CancelledMidSweep_RunEndsFailedAfterItsLastDeletion: a cleanup cancelled
// mid-sweep waits for its sweep activities to stop, then records its run failed; no key
// is deleted after that, when the run no longer refuses pins.
func TestCleanup_CancelledMidSweep_RunEndsFailedAfterItsLastDeletion(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.startWorker()
	junk := r.garbage([]string{"t", "u"}, 600)
	r.store.Add(faults.Rule{Op: faults.OpDeleteBatch, Mode: faults.Delay, Delay: 200 * time.Millisecond})
	h, err := r.gc.StartCleanup(r.ctx, r.sweepInBatches())
	if err != nil {
		t.Fatalf("start cleanup: %v", err)
	}
	runID := r.waitSweepUnderWay(h, 50)
	if err := r.tc.CancelWorkflow(r.ctx, h.WorkflowID, ""); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	if _, err := h.Wait(r.ctx); err == nil {
		t.Fatal("a cancelled cleanup returned a result")
	}
	run, err := r.cat.CleanupRunGet(r.ctx, catalog.CleanupRunGetParams{ID: runID})
	if err != nil || run.State != catalog.CleanupFailed {
		t.Fatalf("run %+v, %v; want it failed", run, err)
	}
	deletesAtEnd := r.store.Count(faults.OpDeleteBatch).Attempted
	_, deleted := r.condemnedSummary(runID)
	time.Sleep(time.Second)
	if n := r.store.Count(faults.OpDeleteBatch).Attempted; n != deletesAtEnd {
		t.Fatalf("%d delete requests after the run ended", n-deletesAtEnd)
	}
	if deleted >= int64(len(junk)) {
		t.Fatalf("the sweep finished (%d deleted) before the cancellation", deleted)
	}
	checkInvariants(t, r)
}
