package workflows_test

import (
	"errors"
	"testing"
	"time"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/workflows"
)

// A cleanup whose workflow was terminated, and whose worker died, after its begin step
// recorded the operation and before it inserted the run (soak, localfs seed 9001508: an
// operator's terminate and a kill -9 of the only worker 26 ms apart) left the operation
// running for good: the reconciler left every cleanup row to the next cleanup, and the
// next cleanup finds orphaned runs, not operations without one. The reconciler now
// finishes such an operation failed — it read and deleted nothing — and the run can never
// be inserted under it after; the next cleanup runs as if it had not been.
func TestReconcile_CleanupClosedBeforeItsRunBegan_FinishedFailedNextCleanupRuns(t *testing.T) {
	t.Parallel()
	r := newRig2(t)
	first := r.newWorker()

	// Hold the graph's ledger lock, which the run's insert takes after the operation is
	// recorded.
	unlock := r.holdGraphLock()
	runID := catalog.NewID()
	h, err := r.gc.StartCleanup(r.ctx, client.CleanupRequest{Graph: r.graph, RunID: runID, KeepNewest: 1,
		Mode: workflows.CleanupModeSweep, GuardWindow: noGuard()})
	if err != nil {
		t.Fatalf("start cleanup: %v", err)
	}
	r.waitFor("the operation recorded, its run's insert waiting on the graph lock", time.Minute, func() bool {
		_, err := r.cat.OperationGet(r.ctx, catalog.OperationGetParams{ID: runID})
		return err == nil && r.graphLockAwaited()
	})
	if err := r.tc.TerminateWorkflow(r.ctx, h.WorkflowID, h.RunID, "operator terminates it"); err != nil {
		t.Fatalf("terminate: %v", err)
	}
	first.stop() // the worker dies with the begin step inside the run's insert
	unlock()
	if _, err := r.cat.CleanupRunGet(r.ctx, catalog.CleanupRunGetParams{ID: runID}); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("run %s: %v; the test needs the run never inserted", runID, err)
	}
	if op := r.operation(runID); op.State == catalog.OperationDone {
		t.Fatalf("operation %+v; the test needs it left unfinished", op)
	}

	r.newWorker()
	res := r.reconcile()
	if len(res.Settled) != 1 || res.Settled[0].OpID != runID {
		t.Fatalf("reconcile %+v, want %s settled", res, runID)
	}
	op := r.operation(runID)
	if op.State != catalog.OperationDone || op.Outcome != catalog.OutcomeFailed || op.Error == "" {
		t.Fatalf("operation after the reconciler: %+v; want done, failed, with the reason", op)
	}
	again, err := r.gc.Cleanup(r.ctx, client.CleanupRequest{Graph: r.graph, RunID: runID, KeepNewest: 1,
		Mode: workflows.CleanupModeSweep, GuardWindow: noGuard()})
	if !errors.Is(err, outcome.ErrConflict) {
		t.Fatalf("the same run id again: %+v, %v; want conflict (a run id names one run)", again, err)
	}
	next, err := r.gc.Cleanup(r.ctx, client.CleanupRequest{Graph: r.graph, KeepNewest: 1, Mode: workflows.CleanupModeSweep, GuardWindow: noGuard()})
	if err != nil || next.Outcome != outcome.Done || len(next.Adopted) != 0 {
		t.Fatalf("the next cleanup: %+v, %v; want done, nothing to adopt", next, err)
	}
	checkInvariants(t, r.rig)
}
