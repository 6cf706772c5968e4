package workflows_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	sdkclient "go.temporal.io/sdk/client"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/storage/faults"
	"github.com/graftworks/graft/workflows"
)

// TestCleanup_OneDeleteRefusedForGood_RunFinishesReportingIt_LaterRunsAndPinsProceed:
// the store refuses, every time, to delete one condemned object (a 403, as an
// object lock answers). The sweep deletes everything else, reports that key, and the
// run ends done — it does not retry for ever, holding the graph. A create (which pins)
// proceeds, and the next cleanup starts, condemns the key again and reports it again.
func TestCleanup_OneDeleteRefusedForGood_RunFinishesReportingIt_LaterRunsAndPinsProceed(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.startWorker()
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
	t.Parallel()
	r := newRig(t)
	r.startWorker()
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
	t.Parallel()
	r := newRig(t)
	r.startWorker()
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
