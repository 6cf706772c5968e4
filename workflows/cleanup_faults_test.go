package workflows_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	sdkclient "go.temporal.io/sdk/client"

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
	r := runningRig(t)
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
	// Each batch of 25 deletes takes half a second, so the sweep needs several seconds:
	// on a loaded machine the test may see the first 100 deletes seconds late, and at a
	// fifth of a second per batch the sweep had once finished by then.
	removeDelay := r.store.Add(faults.Rule{Op: faults.OpDeleteBatch, Mode: faults.Delay, Delay: 500 * time.Millisecond})
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
	r := runningRig(t)
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
	r := runningRig(t)
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
	r := runningRig(t)
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

// TestCleanup_OneDeleteRefusedForGood_RunFinishesReportingIt_LaterRunsAndPinsProceed:
// the store refuses, every time, to delete one condemned object (a 403, as an
// object lock answers). The sweep deletes everything else, reports that key, and the
// run ends done — it does not retry for ever, holding the graph. A create (which pins)
// proceeds, and the next cleanup starts, condemns the key again and reports it again.
func TestCleanup_OneDeleteRefusedForGood_RunFinishesReportingIt_LaterRunsAndPinsProceed(t *testing.T) {
	r := runningRig(t)
	junk := r.garbage([]string{"t", "u"}, 60)
	locked := junk[17]
	refuse := func(op faults.Op) faults.Rule {
		return faults.Rule{Op: op, Mode: faults.Refuse, Status: 403, Match: func(_ faults.Op, key string) bool { return key == locked }}
	}
	r.store.Add(refuse(faults.OpDeleteBatch))
	r.store.Add(refuse(faults.OpDelete))

	ctx, cancel := context.WithTimeout(r.ctx, 2*time.Minute)
	defer cancel()
	req := client.CleanupRequest{Graph: r.graph, KeepNewest: 1, Mode: workflows.CleanupModeSweep, GuardWindow: noGuard(),
		Tuning: &workflows.CleanupTuning{BatchSize: 25}}
	res, err := r.gc.Cleanup(ctx, req)
	if err != nil {
		t.Fatalf("cleanup with one locked key: %v (result %+v)", err, res)
	}
	if res.Outcome != outcome.Done || res.Refused != 1 || len(res.RefusedKeys) != 1 || res.RefusedKeys[0].Key != locked ||
		!strings.Contains(res.RefusedKeys[0].Reason, "403") {
		t.Fatalf("result %+v, want done with exactly %s refused (403)", res, locked)
	}
	if res.Deleted.Objects != int64(len(junk))-1 || res.Condemned.Objects != int64(len(junk)) {
		t.Fatalf("deleted %+v of condemned %+v, want all %d garbage objects but the locked one", res.Deleted, res.Condemned, len(junk))
	}
	run, err := r.cat.CleanupRunGet(r.ctx, catalog.CleanupRunGetParams{ID: res.RunID})
	if err != nil || run.State != catalog.CleanupDone {
		t.Fatalf("run %+v, %v; want it done", run, err)
	}
	if !strings.Contains(string(run.Report), locked) {
		t.Fatalf("the run's stored report does not name the refused key: %s", run.Report)
	}
	var rest []string
	for _, k := range junk {
		if k != locked {
			rest = append(rest, k)
		}
	}
	r.wantGone("garbage", rest...)
	if !r.exists(locked) {
		t.Fatalf("the locked key %s is gone", locked)
	}

	// Pins proceed: a create pins its source and is not refused by a run still "active".
	if res, err := r.gc.CreateBranch(ctx, client.CreateBranchRequest{Graph: r.graph, Branch: "after-locked"}); err != nil || res.Outcome != outcome.Created {
		t.Fatalf("create after the cleanup: %+v, %v", res, err)
	}
	// The next run starts (no conflict with the first), and reports the key again.
	again, err := r.gc.Cleanup(ctx, req)
	if err != nil || again.RunID == res.RunID || again.Refused != 1 || again.RefusedKeys[0].Key != locked || len(again.Adopted) != 0 {
		t.Fatalf("second cleanup: %+v, %v; want a new run reporting %s refused again", again, err, locked)
	}
	checkInvariants(t, r)
}

// workflowTasksCompleted lists, in order, the event ids an operator can reset a workflow
// to: one per completed workflow task.
func workflowTasksCompleted(t *testing.T, r *rig, workflowID, runID string) []int64 {
	t.Helper()
	var points []int64
	it := r.tc.GetWorkflowHistory(r.ctx, workflowID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if ev.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED {
			points = append(points, ev.GetEventId())
		}
	}
	if len(points) == 0 {
		t.Fatalf("no workflow task completed in %s", workflowID)
	}
	return points
}

// resetTo resets an execution, as an operator would, to the workflow task completed at
// event at, and returns the new execution's run id.
func resetTo(t *testing.T, r *rig, workflowID, runID string, at int64, reason string) string {
	t.Helper()
	reset, err := r.tc.ResetWorkflowExecution(r.ctx, &workflowservice.ResetWorkflowExecutionRequest{
		Namespace: "default", WorkflowExecution: &commonpb.WorkflowExecution{WorkflowId: workflowID, RunId: runID},
		Reason: reason, WorkflowTaskFinishEventId: at, RequestId: ulid.Make().String(),
	})
	if err != nil {
		t.Fatalf("reset %s to event %d: %v", workflowID, at, err)
	}
	return reset.GetRunId()
}

// TestCleanup_ResetByOperator_TheNewExecutionDrivesItsRun_NoOtherRunAdoptsIt: an
// operator resets a sweeping cleanup. The terminated execution is not an orphan: the
// reset's execution drives the same run. Another cleanup of the graph meanwhile is a
// conflict naming that run — it does not adopt it — and the reset execution finishes
// the run with everything deleted.
func TestCleanup_ResetByOperator_TheNewExecutionDrivesItsRun_NoOtherRunAdoptsIt(t *testing.T) {
	r := runningRig(t)
	junk := r.garbage([]string{"t", "u"}, 200)
	removeDelay := r.store.Add(faults.Rule{Op: faults.OpDeleteBatch, Mode: faults.Delay, Delay: 300 * time.Millisecond})
	h, err := r.gc.StartCleanup(r.ctx, r.sweepInBatches())
	if err != nil {
		t.Fatalf("start cleanup: %v", err)
	}
	runID := h.OpID
	if runID == "" {
		t.Fatal("the handle does not name the ledger run")
	}
	r.waitFor("a sweep under way", time.Minute, func() bool {
		_, deleted := r.condemnedSummary(runID)
		return deleted >= 25
	})
	resetRun := resetTo(t, r, h.WorkflowID, h.RunID, workflowTasksCompleted(t, r, h.WorkflowID, h.RunID)[0], "operator reset")
	if desc, err := r.tc.DescribeWorkflowExecution(r.ctx, h.WorkflowID, h.RunID); err != nil ||
		desc.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED {
		t.Fatalf("the reset execution: %v, %v; want it terminated", desc.GetWorkflowExecutionInfo().GetStatus(), err)
	}

	// Another cleanup of the graph, as a schedule would start it (its own workflow id).
	other, err := r.tc.ExecuteWorkflow(r.ctx, sdkclient.StartWorkflowOptions{ID: client.CleanupWorkflowID(r.graph) + "/scheduled",
		TaskQueue: r.taskQueue}, workflows.CleanupName,
		workflows.CleanupInput{Graph: r.graph, KeepNewest: 1, Mode: workflows.CleanupModeSweep, GuardWindow: noGuard()})
	if err != nil {
		t.Fatalf("start the other cleanup: %v", err)
	}
	second, err := r.gc.AttachCleanup(r.ctx, other.GetID(), other.GetRunID()).Wait(r.ctx)
	if !errors.Is(err, outcome.ErrConflict) {
		t.Fatalf("the other cleanup: %+v, %v; want a conflict", second, err)
	}
	if second.Outcome != outcome.Conflict || second.ActiveRunID != runID || len(second.Adopted) != 0 {
		t.Fatalf("the other cleanup %+v; want a conflict naming run %s, nothing adopted", second, runID)
	}
	removeDelay()

	res, err := r.gc.AttachCleanup(r.ctx, h.WorkflowID, resetRun).Wait(r.ctx)
	if err != nil || res.RunID != runID || res.Outcome != outcome.Done {
		t.Fatalf("the reset execution's result %+v, %v; want run %s done", res, err, runID)
	}
	if condemned, deleted := r.condemnedSummary(runID); condemned != deleted || deleted < int64(len(junk)) {
		t.Fatalf("run %s condemned %d, deleted %d; want its whole plan deleted", runID, condemned, deleted)
	}
	r.wantGone("garbage", junk...)
	checkInvariants(t, r)
}

// TestCleanup_CancelledInsideItsFinish_RunDoesNotStayRunning: a cleanup is
// cancelled while its finish step waits on the ledger. The finish still records the
// run's end: the run is done, not left running (which would block every later run of
// the graph and keep refusing pins).
func TestCleanup_CancelledInsideItsFinish_RunDoesNotStayRunning(t *testing.T) {
	r := runningRig(t)
	r.garbage([]string{"t"}, 30)
	removeDelay := r.store.Add(faults.Rule{Op: faults.OpDeleteBatch, Mode: faults.Delay, Delay: 300 * time.Millisecond})
	h, err := r.gc.StartCleanup(r.ctx, client.CleanupRequest{Graph: r.graph, KeepNewest: 1, Mode: workflows.CleanupModeSweep,
		GuardWindow: noGuard(), Tuning: &workflows.CleanupTuning{BatchSize: 5}})
	if err != nil {
		t.Fatalf("start cleanup: %v", err)
	}
	r.waitFor("a sweep under way", time.Minute, func() bool {
		_, deleted := r.condemnedSummary(h.OpID)
		return deleted > 0
	})

	// Hold the graph's ledger lock, which the finish step takes to end the run.
	unlock := r.holdGraphLock()
	removeDelay()
	r.waitFor("the finish step waiting on the graph lock", time.Minute, r.graphLockAwaited)
	if err := r.tc.CancelWorkflow(r.ctx, h.WorkflowID, ""); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	// Long enough for the workflow to see the cancellation while the step waits (its
	// task is heartbeated every few seconds).
	r.waitFor("the cancellation recorded", time.Minute, func() bool { return cancelRequested(r, h.WorkflowID) })
	time.Sleep(12 * time.Second)
	unlock()

	// The finish step ends the run, then its operation, in two ledger transactions.
	r.waitFor("the run and its operation ended", time.Minute, func() bool {
		run, err := r.cat.CleanupRunGet(r.ctx, catalog.CleanupRunGetParams{ID: h.OpID})
		return err == nil && run.State != catalog.CleanupRunning && r.operation(h.OpID).State == catalog.OperationDone
	})
	run, _ := r.cat.CleanupRunGet(r.ctx, catalog.CleanupRunGetParams{ID: h.OpID})
	op := r.operation(h.OpID)
	if run.State != catalog.CleanupDone || op.State != catalog.OperationDone {
		t.Fatalf("run %s is %s and its operation %s; want both done", h.OpID, run.State, op.State)
	}
	// The graph is free: once the cancelled workflow has closed (its ledger rows end
	// just before it does), the next run begins.
	_ = r.tc.GetWorkflow(r.ctx, h.WorkflowID, "").Get(r.ctx, nil)
	if res, err := r.gc.Cleanup(r.ctx, client.CleanupRequest{Graph: r.graph, KeepNewest: 1, Mode: workflows.CleanupModeDryRun, GuardWindow: noGuard()}); err != nil || len(res.Adopted) != 0 {
		t.Fatalf("next cleanup: %+v, %v", res, err)
	}
	checkInvariants(t, r)
}

// cancelRequested reports whether the workflow's history has its cancel request.
func cancelRequested(r *rig, workflowID string) bool {
	it := r.tc.GetWorkflowHistory(r.ctx, workflowID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return false
		}
		if ev.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED {
			return true
		}
	}
	return false
}
