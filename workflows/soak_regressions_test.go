package workflows_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	enumspb "go.temporal.io/api/enums/v1"
	sdkclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/storage/faults"
	"github.com/graftworks/graft/workflows"
)

// Regressions the soak (cmd/internal/soak, docs/testing.md) found, one test each.

// A cleanup run id names one run: a dry run and a sweep (either order), or a mark and a
// sweep, under one id never adopt each other, and a run that ended is never run again
// (its mark would run under a finished run). Another request under the id is a conflict
// at once — it used to retry its begin step forever — and the same request again attaches
// to the first run and reports its result; neither changes anything, and the ledger keeps
// the first run's mode and outcome.
func TestCleanup_DryRunAndSweepUnderOneRunID_NeverAdoptEachOther(t *testing.T) {
	t.Parallel()
	for _, order := range [][2]workflows.CleanupMode{
		{workflows.CleanupModeDryRun, workflows.CleanupModeSweep},
		{workflows.CleanupModeSweep, workflows.CleanupModeDryRun},
		{workflows.CleanupModeMark, workflows.CleanupModeSweep},
		{workflows.CleanupModeSweep, workflows.CleanupModeSweep},
		{workflows.CleanupModeDryRun, workflows.CleanupModeDryRun},
	} {
		t.Run(string(order[0])+"_then_"+string(order[1]), func(t *testing.T) {
			t.Parallel() // before the deadline: a parallel subtest waits for its parent first
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			r := newRig(t)
			r.startWorker()
			r.commitAt("t", "v2", time.Now())
			id := ulid.Make().String()
			first := r.cleanup(client.CleanupRequest{KeepNewest: 1, Mode: order[0], GuardWindow: noGuard(), RunID: id})
			if first.Outcome != outcome.Done || first.Mode != order[0] {
				t.Fatalf("first cleanup %+v", first)
			}
			before := r.bucket()
			res, err := r.gc.Cleanup(ctx, client.CleanupRequest{Graph: r.graph, KeepNewest: 1, Mode: order[1], GuardWindow: noGuard(), RunID: id})
			if order[0] == order[1] {
				if err != nil || res.Outcome != outcome.Done || res.RunID != first.RunID || res.Mode != order[0] || res.Deleted != first.Deleted {
					t.Fatalf("the same cleanup again under its run id: %+v, %v; want the first run's result %+v", res, err, first)
				}
			} else if got, _ := outcome.Of(err); got != outcome.Conflict {
				t.Fatalf("another cleanup under the same run id: %+v, %v; want conflict", res, err)
			}
			if after := r.bucket(); len(after) != len(before) {
				t.Fatalf("the second cleanup changed the bucket: %d keys before, %d after", len(before), len(after))
			}
			run, err := r.cat.CleanupRunGet(r.ctx, catalog.CleanupRunGetParams{ID: id})
			if err != nil || string(run.Mode) != string(order[0]) || run.State != catalog.CleanupDone {
				t.Fatalf("run row %+v, %v; want the first run's mode, done", run, err)
			}
			if op := r.operation(id); op.Outcome != catalog.OutcomeDone {
				t.Fatalf("operation %s ended %s; want the first run's done", id, op.Outcome)
			}
		})
	}
}

// The reconciler's pass heartbeats: a worker killed (kill -9) while the pass waits on a
// stalled fence is noticed after one heartbeat timeout, and another worker runs the pass
// to its end — it used to wait out the pass's whole ten-minute timeout first.
func TestReconcile_WorkerKilledMidPass_AnotherWorkerFinishesThePass(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	first := r.newWorker()
	r.names = append(r.names, "orphan")
	r.store.Add(faults.Rule{Op: faults.OpPut, KeyPrefix: r.refPrefix("orphan"), Body: isLiveRef, Mode: faults.Hold})
	opID := randomName("orphan-")
	create := r.startOp(workflows.CreateBranchName, workflows.CreateBranchInput{Graph: r.graph, Branch: "orphan", OpID: opID})
	r.waitOp(opID, "the create in doubt", inDoubt)
	r.terminate(create)
	first.stop()

	// The pass runs on a worker whose writes under the ref prefix stall: its fence waits.
	child := r.childWorker(t, r.refPrefix("orphan"))
	run, err := r.tc.ExecuteWorkflow(r.ctx, sdkclient.StartWorkflowOptions{ID: randomName("reconcile-"), TaskQueue: r.taskQueue},
		workflows.ReconcileName, workflows.ReconcileInput{Graph: r.graph})
	if err != nil {
		t.Fatal(err)
	}
	r.waitFor("the pass to take the operation over", 2*time.Minute, func() bool {
		return strings.HasPrefix(r.operation(opID).OwnerRun, "reconcile/")
	})
	child.Process.Kill() // kill -9, mid-fence
	child.Wait()
	r.newWorker()

	ctx, cancel := context.WithTimeout(r.ctx, 2*time.Minute)
	defer cancel()
	var res workflows.ReconcileResult
	if err := run.Get(ctx, &res); err != nil {
		t.Fatalf("reconcile pass after its worker was killed: %v", err)
	}
	if len(res.Settled) != 1 || res.Settled[0].OpID != opID || res.Settled[0].Outcome != outcome.Unpublished {
		t.Fatalf("reconcile %+v, want %s settled unpublished", res, opID)
	}
	it := r.tc.GetWorkflowHistory(r.ctx, run.GetID(), run.GetRunID(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	attempts := 0
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if a := ev.GetActivityTaskStartedEventAttributes(); a != nil {
			attempts = int(a.GetAttempt())
		}
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil && a.GetHeartbeatTimeout().AsDuration() <= 0 {
			t.Fatalf("the pass is scheduled without a heartbeat timeout: %v", a)
		}
	}
	if attempts != 2 {
		t.Fatalf("the pass took %d attempts, want 2: the killed worker's, then the next worker's", attempts)
	}
}

// A dry-run cleanup terminated mid-plan does not stay running: a dry run blocks no other
// cleanup, so no later cleanup finds it as an orphan; the reconciler aborts it (it
// deleted nothing) and its operation ends. Mark and sweep orphans stay the next
// cleanup's to finish (docs/cleanup.md).
func TestReconcile_TerminatedDryRunCleanup_AbortedNotLeftRunning(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.startWorker()
	stall := r.store.Add(faults.Rule{Op: faults.OpList, KeyPrefix: r.graph + "/", Mode: faults.Delay, Delay: time.Hour})
	id := ulid.Make().String()
	h, err := r.gc.StartCleanup(r.ctx, client.CleanupRequest{Graph: r.graph, KeepNewest: 1, Mode: workflows.CleanupModeDryRun, RunID: id})
	if err != nil {
		t.Fatal(err)
	}
	r.waitFor("the dry run's run row", time.Minute, func() bool {
		run, err := r.cat.CleanupRunGet(r.ctx, catalog.CleanupRunGetParams{ID: id})
		return err == nil && run.State == catalog.CleanupRunning
	})
	r.terminate(r.tc.GetWorkflow(r.ctx, h.WorkflowID, h.RunID))
	stall()
	res := r.reconcile()
	if len(res.Settled) != 1 || res.Settled[0].OpID != id {
		t.Fatalf("reconcile %+v, want the dry run %s aborted", res, id)
	}
	run, err := r.cat.CleanupRunGet(r.ctx, catalog.CleanupRunGetParams{ID: id})
	if err != nil || run.State != catalog.CleanupAborted {
		t.Fatalf("run row %+v, %v; want aborted", run, err)
	}
	if op := r.operation(id); op.State != catalog.OperationDone {
		t.Fatalf("operation %s is %s, want done", id, op.State)
	}
}

// A create reset by an operator after it ended — to any of its completed workflow tasks,
// so the new run repeats the steps after that point — ends with the outcome the earlier
// run recorded (created), and leaves storage and the ledger as they were.
func TestCreateBranch_ResetAfterItEnded_NewRunReportsTheRecordedOutcome(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.startWorker()
	r.names = append(r.names, "reset/me")
	opID := randomName("reset-")
	run := r.startOp(workflows.CreateBranchName, workflows.CreateBranchInput{Graph: r.graph, Branch: "reset/me", OpID: opID})
	var first workflows.CreateBranchResult
	if err := endOf(r, run, &first); err != nil || first.Outcome != outcome.Created {
		t.Fatalf("create: %+v, %v", first, err)
	}
	points := workflowTasksCompleted(t, r, run.GetID(), run.GetRunID())
	for i, at := range points {
		runID := resetTo(t, r, run.GetID(), run.GetRunID(), at, "operator")
		ctx, cancel := context.WithTimeout(r.ctx, 2*time.Minute)
		var again workflows.CreateBranchResult
		err := endOfCtx(ctx, r, r.tc.GetWorkflow(r.ctx, run.GetID(), runID), &again)
		cancel()
		if err != nil || again.Outcome != outcome.Created {
			t.Fatalf("reset %d of %d (to event %d): the new run ended %+v, %v; want created, as recorded", i+1, len(points), at, again, err)
		}
		if live := r.liveNatives("reset/me"); len(live) != 1 || live[0] != first.Native {
			t.Fatalf("after reset %d: live refs %v, want [%s]", i+1, live, first.Native)
		}
		if op := r.operation(opID); op.State != catalog.OperationDone || op.Outcome != catalog.OutcomeCreated {
			t.Fatalf("after reset %d: ledger %s/%s, want done/created", i+1, op.State, op.Outcome)
		}
	}
}

// A sweep cleanup reset by an operator after its run ended — to each of its workflow
// tasks — never marks again under the ended run: every reset execution ends definitively
// (completed, or failed with an outcome), and the run's record stays as the earlier
// execution left it. A reset past the begin step used to retry its refused condemn step
// until it gave up and fail without an outcome.
func TestCleanup_ResetAfterItsRunEnded_EndsDefinitivelyRecordKept(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.startWorker()
	r.commitAt("t", "v2", time.Now())
	resetCleanupAtEveryTask(t, r, workflows.CleanupModeSweep)
}

// The same for a mark with keys to condemn (soak, localfs seed 303358): the
// mark's refused condemn step is typed as the run having ended — it used to lose its
// type in the step's wrapping, retry, and fail without an outcome.
func TestCleanup_MarkResetAfterItsRunEnded_EndsDefinitivelyRecordKept(t *testing.T) {
	t.Parallel()
	r := newRig2(t)
	r.startWorker()
	r.commit("main", "t", "v2", time.Now()) // main's first version of t is garbage now
	resetCleanupAtEveryTask(t, r.rig, workflows.CleanupModeMark)
}

// resetCleanupAtEveryTask runs a cleanup to done, then resets it to each of its
// workflow tasks in turn: every reset execution must end definitively and leave the
// run's and the operation's records as the first execution left them.
func resetCleanupAtEveryTask(t *testing.T, r *rig, mode workflows.CleanupMode) {
	t.Helper()
	id := ulid.Make().String()
	h, err := r.gc.StartCleanup(r.ctx, client.CleanupRequest{Graph: r.graph, KeepNewest: 1, Mode: mode, GuardWindow: noGuard(), RunID: id})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := h.Wait(r.ctx); err != nil || res.Outcome != outcome.Done || res.Condemned.Versions == 0 {
		t.Fatalf("cleanup: %+v, %v; want done, with a version condemned", res, err)
	}
	points := workflowTasksCompleted(t, r, h.WorkflowID, h.RunID)
	for i, at := range points {
		resetRun := resetTo(t, r, h.WorkflowID, h.RunID, at, "operator")
		ctx, cancel := context.WithTimeout(r.ctx, 2*time.Minute)
		var res workflows.CleanupResult
		err := r.tc.GetWorkflow(ctx, h.WorkflowID, resetRun).Get(ctx, &res)
		cancel()
		var app *temporal.ApplicationError
		if err != nil && !(errors.As(err, &app) && outcome.Outcome(app.Type()).Valid()) {
			t.Fatalf("reset %d of %d (to event %d) ended without a definitive outcome: %v", i+1, len(points), at, err)
		}
		run, err := r.cat.CleanupRunGet(r.ctx, catalog.CleanupRunGetParams{ID: id})
		if err != nil || run.State != catalog.CleanupDone {
			t.Fatalf("after reset %d: run row %+v, %v; want done, as the first execution left it", i+1, run, err)
		}
		if op := r.operation(id); op.State != catalog.OperationDone || op.Outcome != catalog.OutcomeDone {
			t.Fatalf("after reset %d: operation %s/%s, want done/done", i+1, op.State, op.Outcome)
		}
	}
}
