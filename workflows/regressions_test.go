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

// The kernel's guarantees, each on the real stack:
// Temporal dev server, versitygw behind storage/faults, Postgres. Every test ends with
// the reconciler and the oracle (harness_test.go).

// A step after a storage effect has no total deadline: a ref put stalled past its
// step's StartToClose leaves the create settling, and it ends created — never failed.
func TestKernel_RefPutStalledPastItsStepTimeout_SettlesCreatedNeverFailed(t *testing.T) {
	r := runningRig(t)
	const branch = "stalled"
	r.names = append(r.names, branch)
	r.store.Add(faults.Rule{Op: faults.OpPut, KeyPrefix: r.refPrefix(branch), Body: isLiveRef, Mode: faults.Delay, Delay: 40 * time.Second, Times: 1})
	run := r.startOp(workflows.CreateBranchName, workflows.CreateBranchInput{Graph: r.graph, Branch: branch, OpID: randomName("stall-")})
	var res workflows.CreateBranchResult
	if err := endOf(r, run, &res); err != nil || res.Outcome != outcome.Created {
		t.Fatalf("create with a 40 s stall: %+v, %v; want created", res, err)
	}
	if op := r.operation(res.OpID); op.Outcome != catalog.OutcomeCreated {
		t.Fatalf("ledger %s/%s, want created", op.State, op.Outcome)
	}
	if live := r.liveNatives(branch); len(live) != 1 || live[0] != res.Native {
		t.Fatalf("live refs %v, want %s", live, res.Native)
	}
}

// An after-effect step whose fast path keeps failing continues as
// an ordinary activity, with no total deadline, until it is answered.
func TestKernel_AfterEffectStepKeepsFailing_ContinuesAsOrdinaryActivityUntilAnswered(t *testing.T) {
	r := runningRig(t)
	obj := r.upload("u", "durable")
	// Every read of main's head commit fails for a while: the commit's plan step, after
	// the version was written, returns errors (not verdicts) until it passes.
	r.store.Add(faults.Rule{Op: faults.OpGet, KeyPrefix: format.CommitIDKey(r.graph, r.main.ID), Mode: faults.FailBeforeSend, Times: 6})
	run := r.startOp(workflows.WriteTableName, workflows.WriteTableInput{Graph: r.graph, Branch: "main", Table: "u",
		Objects: []workflows.TableObject{obj}, OpID: randomName("durable-")})
	var res workflows.WriteTableResult
	if err := endOf(r, run, &res); err != nil || res.Outcome != outcome.Done {
		t.Fatalf("write: %+v, %v; want done", res, err)
	}
	r.report("main", res.Commit)
	ordinary := 0
	iter := r.tc.GetWorkflowHistory(r.ctx, run.GetID(), run.GetRunID(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for iter.HasNext() {
		ev, err := iter.Next()
		if err != nil {
			t.Fatal(err)
		}
		if ev.GetEventType() == enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED {
			ordinary++
		}
	}
	if ordinary == 0 {
		t.Fatalf("no step continued as an ordinary activity although its fast path failed 6 times")
	}
}

// Every input is checked before the first ledger write: a message over the limit
// ends invalid with nothing recorded, and the name stays free.
func TestKernel_CreateWithInvalidMessage_InvalidBeforeAnyLedgerWrite(t *testing.T) {
	r := runningRig(t)
	opID := randomName("long-")
	run := r.startOp(workflows.CreateBranchName, workflows.CreateBranchInput{Graph: r.graph, Branch: "b", OpID: opID, Message: strings.Repeat("m", 5000)})
	var res workflows.CreateBranchResult
	if err := endOf(r, run, &res); err != nil || res.Outcome != outcome.Invalid {
		t.Fatalf("create: %+v, %v; want invalid", res, err)
	}
	if incs := r.incarnations("b"); len(incs) != 0 {
		t.Fatalf("witnesses %v written for an invalid create", incs)
	}
	if _, err := r.cat.OperationGet(r.ctx, catalog.OperationGetParams{ID: opID}); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("operation row of an invalid create: %v, want none", err)
	}
	if _, err := r.gc.CreateBranch(r.ctx, client.CreateBranchRequest{Graph: r.graph, Branch: "b"}); err != nil {
		t.Fatalf("the name after the invalid create: %v", err)
	}
}

// An early outcome after the witness settles the request's own witness: the name can
// be created again at once.
func TestKernel_NotRetainedAfterWitness_WitnessSettledNameFree(t *testing.T) {
	r := runningRig(t)
	r.names = append(r.names, "late")
	// The probe of the source head (a branch head: witnessed in the same transaction as
	// the pins) finds it gone.
	remove := r.store.Add(faults.Rule{Op: faults.OpHead, KeyPrefix: format.CommitIDKey(r.graph, r.main.ID), Mode: faults.Refuse, Status: 404, Times: 1})
	_, err := r.gc.CreateBranch(r.ctx, client.CreateBranchRequest{Graph: r.graph, Branch: "late"})
	if !errors.Is(err, outcome.ErrNotRetained) {
		t.Fatalf("create: %v, want not_retained", err)
	}
	remove()
	for _, inc := range r.incarnations("late") {
		if !inc.State.Settled() {
			t.Fatalf("witness %s left %s after not_retained", inc.Native, inc.State)
		}
	}
	if _, err := r.gc.CreateBranch(r.ctx, client.CreateBranchRequest{Graph: r.graph, Branch: "late"}); err != nil {
		t.Fatalf("the name after not_retained: %v", err)
	}
}

// A second, different request with the same op id never touches the first's row: its
// prepare keeps failing, its workflow ends, and the first create still settles created.
func TestKernel_SameOpIDSecondRequestsPrepareKeepsFailing_FirstsRowUntouched(t *testing.T) {
	shortStepBudgets(t) // the second request's prepare fails for its whole budget
	r := newRig(t)
	r.startWorker()
	r.names = append(r.names, "first")
	opID := randomName("shared-")
	held := r.store.Add(faults.Rule{Op: faults.OpPut, KeyPrefix: r.refPrefix("first"), Body: isLiveRef, Mode: faults.Hold})
	first := r.startOp(workflows.CreateBranchName, workflows.CreateBranchInput{Graph: r.graph, Branch: "first", OpID: opID})
	before := r.waitOp(opID, "the first create in doubt", inDoubt)
	// The second request's source branch cannot be read: its prepare fails for its whole budget.
	r.store.Add(faults.Rule{Op: faults.OpList, KeyPrefix: r.refPrefix("gone"), Mode: faults.FailBeforeSend})
	second := r.startOp(workflows.CreateBranchName, workflows.CreateBranchInput{Graph: r.graph, Branch: "second", OpID: opID, Source: workflows.Source{Branch: "gone"}})
	var res2 workflows.CreateBranchResult
	if err := endOf(r, second, &res2); err == nil {
		t.Fatalf("second request: %+v, want its workflow to fail", res2)
	}
	after := r.operation(opID)
	if after.State != catalog.OperationInDoubt || after.OwnerRun != before.OwnerRun || after.OwnerRun != first.GetRunID() || len(r.pinsOf(opID)) == 0 {
		t.Fatalf("first's row after the second request: %+v (pins %v), want it in doubt, owned by the first run, pins held", after, r.pinsOf(opID))
	}
	held()
	for _, h := range r.store.Held() {
		_, _ = h.Release(r.ctx)
	}
	var res1 workflows.CreateBranchResult
	if err := endOf(r, first, &res1); err != nil || res1.Outcome != outcome.Created {
		t.Fatalf("first create: %+v, %v; want created", res1, err)
	}
}

// A store that refuses every write: the create ends refused at once — a definitely
// refused put cannot land and needs no fence — never a fence loop.
func TestKernel_StoreRefusesEveryWrite_CreateRefusedWithoutAFenceLoop(t *testing.T) {
	r := runningRig(t)
	r.names = append(r.names, "denied")
	remove := r.store.Add(faults.Rule{Op: faults.OpPut, Mode: faults.Refuse, Status: 403})
	ctx, cancel := context.WithTimeout(r.ctx, time.Minute)
	defer cancel()
	run := r.startOp(workflows.CreateBranchName, workflows.CreateBranchInput{Graph: r.graph, Branch: "denied", OpID: randomName("denied-")})
	var res workflows.CreateBranchResult
	if err := run.Get(ctx, nil); err == nil {
		t.Fatalf("a create on a store refusing every write completed")
	}
	if err := endOf(r, run, &res); err != nil || res.Outcome != outcome.Refused {
		t.Fatalf("create: %+v, %v; want refused", res, err)
	}
	if n := r.store.CountMatching(faults.Rule{Op: faults.OpPut}).Attempted; n > 4 {
		t.Fatalf("%d puts attempted, want a bounded few (no fence loop)", n)
	}
	remove()
	if _, err := r.gc.CreateBranch(r.ctx, client.CreateBranchRequest{Graph: r.graph, Branch: "denied"}); err != nil {
		t.Fatalf("the name once writes are allowed: %v", err)
	}
}

// A fence the store refuses parks the operation — in doubt, phase parked, visible —
// with a durable backoff, not a hot loop; once allowed, the fence lands.
func TestKernel_FenceRefused_ParkedVisibleThenFenced(t *testing.T) {
	r := runningRig(t)
	r.names = append(r.names, "parked")
	isFence := func(b []byte) bool {
		ref, err := format.DecodeBranchRef(b)
		return err == nil && ref.State == format.RefFence
	}
	holdRef := r.store.Add(faults.Rule{Op: faults.OpPut, KeyPrefix: r.refPrefix("parked"), Body: isLiveRef, Mode: faults.Hold})
	refuseFence := r.store.Add(faults.Rule{Op: faults.OpPut, KeyPrefix: r.refPrefix("parked"), Body: isFence, Mode: faults.Refuse, Status: 403})
	h, err := r.gc.StartCreateBranch(r.ctx, client.CreateBranchRequest{Graph: r.graph, Branch: "parked"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.WaitCreateBranch(r.ctx); !errors.Is(err, outcome.ErrInDoubt) {
		t.Fatalf("create: %v, want in_doubt", err)
	}
	if err := r.gc.AbandonCreate(r.ctx, r.graph, "parked", "test"); err != nil {
		t.Fatal(err)
	}
	var st workflows.OperationStatus
	r.waitFor("the create parked", time.Minute, func() bool {
		var err error
		st, err = r.gc.Status(r.ctx, h.WorkflowID, "")
		return err == nil && st.Phase == "parked"
	})
	op := r.operation(st.OpID)
	if op.State != catalog.OperationInDoubt || op.Phase != "parked" || !strings.Contains(op.Waiting, "fence") || st.Outcome != outcome.InDoubt {
		t.Fatalf("parked create: status %+v, ledger %s/%s %q; want in doubt and parked, visibly", st, op.State, op.Phase, op.Waiting)
	}
	fences := r.store.CountMatching(faults.Rule{Op: faults.OpPut, KeyPrefix: r.refPrefix("parked"), Body: isFence}).Attempted
	time.Sleep(5 * time.Second)
	if n := r.store.CountMatching(faults.Rule{Op: faults.OpPut, KeyPrefix: r.refPrefix("parked"), Body: isFence}).Attempted - fences; n > 3 {
		t.Fatalf("%d fence puts in 5 s while parked: a hot loop", n)
	}
	refuseFence()
	res, err := h.WaitFinal(r.ctx)
	if !errors.Is(err, outcome.ErrUnpublished) || res.Outcome != outcome.Unpublished {
		t.Fatalf("after the fence was allowed: %+v, %v; want unpublished", res, err)
	}
	recordHistory(t, r, h.WorkflowID, h.RunID, "createbranch_parked_then_fenced")
	holdRef()
	wantLateRefused(t, r.ctx, "held ref put after the fence", r.store.Held())
}

// A cancelled operation records its end: a branch delete cancelled while its
// compare-and-swap is in doubt completes the swap (a retire is fenced by completing it),
// records deleted, and the name can be created again.
func TestKernel_DeleteCancelledWithItsSwapInDoubt_RecordsDeletedNameFree(t *testing.T) {
	r := runningRig(t)
	r.names = append(r.names, "doomed")
	created, err := r.gc.CreateBranch(r.ctx, client.CreateBranchRequest{Graph: r.graph, Branch: "doomed"})
	if err != nil {
		t.Fatal(err)
	}
	isRetired := func(b []byte) bool {
		ref, err := format.DecodeBranchRef(b)
		return err == nil && ref.State == format.RefRetired
	}
	hold := r.store.Add(faults.Rule{Op: faults.OpPut, KeyPrefix: r.refPrefix("doomed"), Body: isRetired, Mode: faults.Hold})
	opID := randomName("delete-")
	run := r.startOp(workflows.DeleteBranchName, workflows.DeleteBranchInput{Graph: r.graph, Branch: "doomed", OpID: opID})
	r.waitOp(opID, "the delete in doubt", inDoubt)
	if err := r.tc.CancelWorkflow(r.ctx, run.GetID(), run.GetRunID()); err != nil {
		t.Fatal(err)
	}
	hold()
	// The cancelled run completes the retire with the same swap: whichever lands first
	// retires the ref, and the other meets its precondition.
	for _, hp := range r.store.Held() {
		if _, err := hp.Release(r.ctx); err != nil && !errors.Is(err, storage.ErrPreconditionFailed) {
			t.Fatalf("release a held swap: %v", err)
		}
	}
	if err := run.Get(r.ctx, nil); err == nil {
		t.Fatalf("a cancelled delete completed")
	}
	op := r.waitOp(opID, "the cancelled delete recorded", done)
	if op.Outcome != catalog.OutcomeDeleted || len(r.pinsOf(opID)) != 0 {
		t.Fatalf("cancelled delete recorded %s (pins %v), want deleted", op.Outcome, r.pinsOf(opID))
	}
	recordHistory(t, r, run.GetID(), run.GetRunID(), "deletebranch_cancelled_swap_completed")
	if inc := r.incarnation(created.Native); inc.State != catalog.IncarnationRetired {
		t.Fatalf("witness %s after the delete, want retired", inc.State)
	}
	if _, err := r.gc.CreateBranch(r.ctx, client.CreateBranchRequest{Graph: r.graph, Branch: "doomed"}); err != nil {
		t.Fatalf("the name after the delete: %v", err)
	}
}

// A terminated workflow leaves nothing behind once the reconciler ran: an in-doubt
// create is fenced and reclaimed, its witness and pins settled; the late put fails.
func TestKernel_CreateTerminatedInDoubt_ReconcilerFencesReclaimsAndFinishes(t *testing.T) {
	r := runningRig(t)
	r.names = append(r.names, "orphan")
	hold := r.store.Add(faults.Rule{Op: faults.OpPut, KeyPrefix: r.refPrefix("orphan"), Body: isLiveRef, Mode: faults.Hold})
	opID := randomName("orphan-")
	run := r.startOp(workflows.CreateBranchName, workflows.CreateBranchInput{Graph: r.graph, Branch: "orphan", OpID: opID})
	r.waitOp(opID, "the create in doubt", inDoubt)
	r.terminate(run)
	res := r.reconcile()
	if len(res.Settled) != 1 || res.Settled[0].OpID != opID || res.Settled[0].Outcome != outcome.Unpublished {
		t.Fatalf("reconcile %+v, want %s settled unpublished", res, opID)
	}
	recordHistory(t, r, r.lastReconcile, "", "reconcile_settled_terminated_create")
	op := r.operation(opID)
	if op.State != catalog.OperationDone || op.Outcome != catalog.OutcomeUnpublished || len(r.pinsOf(opID)) != 0 {
		t.Fatalf("ledger %s/%s, pins %v; want done/unpublished, no pins", op.State, op.Outcome, r.pinsOf(opID))
	}
	for _, inc := range r.incarnations("orphan") {
		if inc.State != catalog.IncarnationUnpublished || len(r.treeCommits(inc.Native)) != 0 {
			t.Fatalf("witness %s %s (tree %v), want unpublished and reclaimed", inc.Native, inc.State, r.treeCommits(inc.Native))
		}
		if ref := r.refs("orphan")[inc.Native]; ref.State != format.RefFence {
			t.Fatalf("ref key of %s holds %+v, want a fence", inc.Native, ref)
		}
	}
	hold()
	wantLateRefused(t, r.ctx, "late ref put after the reconciler's fence", r.store.Held())
}

// An effect re-executed after a worker crash recognises its own earlier effect: a
// restore's plan, run again after its commit landed and a write appended on top, finds
// its own commit and never appends the restore's pins again.
func TestKernel_RestorePlanRerunAfterItsCommitLanded_RecognisesItNeverReapplies(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	acts := r.acts()
	target := r.main
	r.commitAt("t", "v2", time.Now())
	owner := activities.Owner{OpID: randomName("restore-"), Run: "run-1"}
	prep, err := acts.PrepareRestore(r.ctx, activities.PrepareRestoreInput{OpID: owner.OpID, Graph: r.graph, Branch: "main",
		ToCommit: target.ID.String(), NoBackup: true, WorkflowID: "wf-" + owner.OpID, RunID: owner.Run})
	if err != nil || prep.Outcome != "" {
		t.Fatalf("prepare: %+v, %v", prep, err)
	}
	plan := func() activities.PlanRestoreResult {
		p, err := acts.PlanRestore(r.ctx, activities.PlanRestoreInput{Owner: owner, Graph: r.graph, Branch: "main", Target: prep.Target, NoBackup: true, Time: prep.Time})
		if err != nil || p.Outcome != "" {
			t.Fatalf("plan: %+v, %v", p, err)
		}
		return p
	}
	first := plan()
	if v, err := acts.Write(r.ctx, activities.WriteInput{Owner: owner, Spec: first.Spec}); err != nil || v.State != activities.Landed {
		t.Fatalf("restore commit: %+v, %v", v, err)
	}
	// The worker dies before its workflow task completes; a write appends on top.
	r.main = r.headOfTree(r.main.ID.Tree)
	after := r.commitAt("t", "v3", time.Now())
	// The replay runs the plan again.
	again := plan()
	if !again.Committed || again.Commit != first.Commit {
		t.Fatalf("re-run plan %+v, want it to find its own commit %s", again, first.Commit)
	}
	if head := r.headOfTree(r.main.ID.Tree); head.ID != after.ID {
		t.Fatalf("head %s, want %s: nothing appended again", head.ID, after.ID)
	}
	if _, err := acts.Finish(r.ctx, activities.FinishInput{Owner: owner, Kind: catalog.OpRestore, Outcome: outcome.Done}); err != nil {
		t.Fatal(err)
	}
}

// A restore's backup tag never names a deleted commit: the head it read is probed
// after its pin; found reclaimed, the restore plans again on the new head.
func TestKernel_RestoreHeadGoneAfterItsPin_ReplansNeverTagsAMissingCommit(t *testing.T) {
	r := runningRig(t)
	target := r.main
	r.commitAt("t", "v2", time.Now())
	headKey := format.CommitIDKey(r.graph, r.main.ID)
	// The probe after the pin finds the head reclaimed (as a cleanup that finished before
	// the pin would have left it), once.
	r.store.Add(faults.Rule{Op: faults.OpHead, KeyPrefix: headKey, Mode: faults.Refuse, Status: 404, Times: 1})
	res, err := r.gc.Restore(r.ctx, client.RestoreRequest{Graph: r.graph, Branch: "main", ToCommit: target.ID.String()})
	if err != nil || res.Outcome != outcome.Done {
		t.Fatalf("restore: %+v, %v", res, err)
	}
	if res.HeadRetries != 1 {
		t.Fatalf("head retries %d, want 1: the probe after the pin must send the restore back to plan", res.HeadRetries)
	}
	r.report("main", res.Commit)
}

// a write whose expected head is stale lands in no gap cleanup left:
// PlanCommit compares the expected head with the real head — conflict, no refilled key,
// nothing lost.
func TestKernel_StaleExpectedHeadAfterCleanupGap_ConflictNoRefill(t *testing.T) {
	r := runningRig(t)
	at := time.Now().Add(-time.Hour)
	var chain []graph.CommitView
	chain = append(chain, r.main) // seq 1
	for i := 0; i < 7; i++ {
		chain = append(chain, r.commitAt("t", "v"+string(rune('a'+i)), at.Add(time.Duration(i)*time.Second)))
	}
	// chain[i] is at seq i+1; a live branch forks from seq 2.
	fork := chain[1]
	r.handBranch("side", fork, at, true)
	r.cleanup(client.CleanupRequest{KeepNewest: 2, Mode: workflows.CleanupModeSweep, GuardWindow: noGuard()})
	gap := format.CommitIDKey(r.graph, format.CommitID{Tree: fork.ID.Tree, Seq: fork.ID.Seq + 1})
	if r.exists(gap) {
		t.Fatalf("the test needs cleanup to have emptied %s", gap)
	}
	head := r.headOfTree(r.main.ID.Tree)
	res, err := r.gc.WriteTable(r.ctx, r.inner, client.WriteTableRequest{Graph: r.graph, Branch: "main", Table: "u",
		Files: writeFiles(t, "late"), ExpectedHead: fork.ID.String()})
	if !errors.Is(err, outcome.ErrConflict) {
		t.Fatalf("write with stale expected head %s: %+v, %v; want conflict", fork.ID, res, err)
	}
	if r.exists(gap) {
		t.Fatalf("%s was refilled", gap)
	}
	if now := r.headOfTree(r.main.ID.Tree); now.ID != head.ID {
		t.Fatalf("head moved to %s, want %s", now.ID, head.ID)
	}
}

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

// A dry run or mark terminated mid-plan does not stay running: it deleted nothing and no
// sweep follows an unfinished plan, so the reconciler aborts it and its operation ends. A
// dry run blocks no other cleanup, so no later cleanup would find it; a mark's operation
// would otherwise stay running until the next cleanup. Orphaned sweeps stay the next
// cleanup's to finish (docs/cleanup.md).
func TestReconcile_TerminatedPlanningCleanup_AbortedNotLeftRunning(t *testing.T) {
	for _, mode := range []workflows.CleanupMode{workflows.CleanupModeDryRun, workflows.CleanupModeMark} {
		t.Run(string(mode), func(t *testing.T) {
			r := runningRig(t)
			stall := r.store.Add(faults.Rule{Op: faults.OpList, KeyPrefix: r.graph + "/", Mode: faults.Delay, Delay: time.Hour})
			id := ulid.Make().String()
			h, err := r.gc.StartCleanup(r.ctx, client.CleanupRequest{Graph: r.graph, KeepNewest: 1, Mode: mode, RunID: id})
			if err != nil {
				t.Fatal(err)
			}
			r.waitFor("the run row", time.Minute, func() bool {
				run, err := r.cat.CleanupRunGet(r.ctx, catalog.CleanupRunGetParams{ID: id})
				return err == nil && run.State == catalog.CleanupRunning
			})
			r.terminate(r.tc.GetWorkflow(r.ctx, h.WorkflowID, h.RunID))
			stall()
			res := r.reconcile()
			if len(res.Settled) != 1 || res.Settled[0].OpID != id {
				t.Fatalf("reconcile %+v, want the %s run %s aborted", res, mode, id)
			}
			run, err := r.cat.CleanupRunGet(r.ctx, catalog.CleanupRunGetParams{ID: id})
			if err != nil || run.State != catalog.CleanupAborted {
				t.Fatalf("run row %+v, %v; want aborted", run, err)
			}
			if op := r.operation(id); op.State != catalog.OperationDone {
				t.Fatalf("operation %s is %s, want done", id, op.State)
			}
		})
	}
}

// A create reset by an operator after it ended — to any of its completed workflow tasks,
// so the new run repeats the steps after that point — ends with the outcome the earlier
// run recorded (created), and leaves storage and the ledger as they were.
func TestCreateBranch_ResetAfterItEnded_NewRunReportsTheRecordedOutcome(t *testing.T) {
	r := runningRig(t)
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
	r := runningRig(t)
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
