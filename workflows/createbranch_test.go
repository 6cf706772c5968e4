package workflows_test

import (
	"context"
	"errors"
	"maps"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage/faults"
	"github.com/graftworks/graft/workflows"
)

// TestCreateBranchFaultMatrix drives CreateBranch through every way its ref
// put (and clone) can fail, on the real stack: Temporal dev server, versitygw
// behind graft's fault wrapper, and Postgres. Each case asserts the outcome,
// the ledger, what is in the bucket afterwards, and how many ref puts were sent.
func TestCreateBranchFaultMatrix(t *testing.T) {
	const branch = "feature/x"

	// assertCreated checks the end state of a create that succeeded with res.
	assertCreated := func(t *testing.T, r *rig, res workflows.CreateBranchResult) {
		t.Helper()
		if res.Outcome != outcome.Created {
			t.Fatalf("outcome %q (%s), want created", res.Outcome, res.Message)
		}
		if live := r.liveNatives(branch); !slices.Equal(live, []string{res.Native}) {
			t.Fatalf("live refs %v, want exactly [%s]", live, res.Native)
		}
		if commits := r.treeCommits(res.Native); len(commits) != 1 {
			t.Fatalf("tree of %s holds %v, want its fork commit", res.Native, commits)
		}
		if inc := r.incarnation(res.Native); inc.State != catalog.IncarnationLive {
			t.Fatalf("witness of %s is %s, want live", res.Native, inc.State)
		}
		if op := r.operation(res.OpID); op.State != catalog.OperationDone || op.Outcome != catalog.OutcomeCreated {
			t.Fatalf("operation %s is %s/%s, want done/created", res.OpID, op.State, op.Outcome)
		}
	}
	// assertUnpublished checks that native can never be live and left no tree behind.
	assertUnpublished := func(t *testing.T, r *rig, native string) {
		t.Helper()
		if ref, ok := r.refs(branch)[native]; !ok || ref.State != format.RefFence {
			t.Fatalf("ref key of %s holds %+v (present %v), want a fence", native, ref, ok)
		}
		if commits := r.treeCommits(native); len(commits) != 0 {
			t.Fatalf("tree of unpublished %s still holds %v", native, commits)
		}
		if inc := r.incarnation(native); inc.State != catalog.IncarnationUnpublished {
			t.Fatalf("witness of %s is %s, want unpublished", native, inc.State)
		}
	}
	// liveRefRule meets the live ref puts of branch with mode, times times (0: every time).
	liveRefRule := func(r *rig, mode faults.Mode, times int) faults.Rule {
		return faults.Rule{Op: faults.OpPut, KeyPrefix: r.refPrefix(branch), Body: isLiveRef, Mode: mode, Times: times}
	}
	startCreate := func(t *testing.T, r *rig) *client.Handle {
		t.Helper()
		h, err := r.gc.StartCreateBranch(r.ctx, client.CreateBranchRequest{Graph: r.graph, Branch: branch})
		if err != nil {
			t.Fatalf("start: %v", err)
		}
		return h
	}

	t.Run("1_RefAppliedAnswerLost_IsCreated", func(t *testing.T) {
		r := runningRig(t)
		r.store.Add(liveRefRule(r, faults.ApplyLoseAnswer, 1))
		h := startCreate(t, r)
		res, err := h.WaitFinal(r.ctx)
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		assertCreated(t, r, res)
		recordHistory(t, r, h.WorkflowID, h.RunID, "createbranch_lost_ack")
		if n := r.liveRefPuts(branch); n != 1 {
			t.Fatalf("%d ref puts sent, want 1 (the lost acknowledgement is proven by read-back)", n)
		}
		if res.SettleAttempts != 0 || res.Incarnations != 1 {
			t.Fatalf("settle attempts %d, incarnations %d; want 0 and 1", res.SettleAttempts, res.Incarnations)
		}
	})

	t.Run("2_RefLandsDuringReread_IsCreated", func(t *testing.T) {
		r := runningRig(t)
		r.store.Add(liveRefRule(r, faults.Hold, 1))
		h := startCreate(t, r)
		wctx, cancel := context.WithTimeout(r.ctx, time.Minute)
		defer cancel()
		if err := r.store.WaitHeld(wctx, 1); err != nil {
			t.Fatal(err)
		}
		// Land the held put after the first read-back found nothing.
		r.waitFor("a ref read-back", 30*time.Second, func() bool {
			return r.store.CountMatching(faults.Rule{Op: faults.OpGet, KeyPrefix: r.refPrefix(branch)}).Sent >= 1
		})
		if _, err := r.store.Held()[0].Release(r.ctx); err != nil {
			t.Fatalf("release held ref put: %v", err)
		}
		res, err := h.WaitFinal(r.ctx)
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		assertCreated(t, r, res)
		if n := r.liveRefPuts(branch); n != 1 {
			t.Fatalf("%d ref puts sent, want 1", n)
		}
		if res.SettleAttempts != 0 {
			t.Fatalf("settled with %d re-issues; the read-back should have decided", res.SettleAttempts)
		}
	})

	t.Run("3_RefLost_InDoubtThenSettledByReissue_IsCreated", func(t *testing.T) {
		r := runningRig(t)
		r.faultThenSettleSlowly(liveRefRule(r, faults.FailBeforeSend, 1))
		h := startCreate(t, r)
		_, err := h.WaitCreateBranch(r.ctx)
		var oe *outcome.Error
		if !errors.Is(err, outcome.ErrInDoubt) || !errors.As(err, &oe) || oe.OpID == "" {
			t.Fatalf("caller got %v, want in_doubt with an operation id", err)
		}
		res, err := h.WaitFinal(r.ctx)
		if err != nil {
			t.Fatalf("settle: %v", err)
		}
		assertCreated(t, r, res)
		recordHistory(t, r, h.WorkflowID, h.RunID, "createbranch_in_doubt_settled")
		if res.OpID != oe.OpID {
			t.Fatalf("in_doubt named operation %s, the result %s", oe.OpID, res.OpID)
		}
		if res.SettleAttempts < 1 {
			t.Fatalf("created without a settle re-issue")
		}
		tally := r.store.CountMatching(faults.Rule{Op: faults.OpPut, KeyPrefix: r.refPrefix(branch), Body: isLiveRef})
		if tally.Attempted != 2 || tally.Sent != 1 {
			t.Fatalf("ref puts %+v, want 2 attempted and 1 sent (the lost one never reached the store)", tally)
		}
	})

	t.Run("4_RefHeld_OperatorAbandons_FenceWins_HeldPutFails", func(t *testing.T) {
		r := runningRig(t)
		r.store.Add(liveRefRule(r, faults.Hold, 0)) // every live-ref put, first and re-issues
		h := startCreate(t, r)
		if _, err := h.WaitCreateBranch(r.ctx); !errors.Is(err, outcome.ErrInDoubt) {
			t.Fatalf("caller got %v, want in_doubt", err)
		}
		if err := r.gc.AbandonCreate(r.ctx, r.graph, branch, "test operator"); err != nil {
			t.Fatalf("abandon: %v", err)
		}
		res, err := h.WaitFinal(r.ctx)
		if !errors.Is(err, outcome.ErrUnpublished) || res.Outcome != outcome.Unpublished {
			t.Fatalf("after abandon: %+v, %v; want unpublished", res, err)
		}
		recordHistory(t, r, h.WorkflowID, h.RunID, "createbranch_abandoned")
		held := r.store.Held()
		if len(held) == 0 {
			t.Fatalf("no ref put was held")
		}
		wantLateRefused(t, r.ctx, "late ref put after the fence", held)
		assertUnpublished(t, r, res.Native)
		if live := r.liveNatives(branch); len(live) != 0 {
			t.Fatalf("live refs %v after abandon, want none", live)
		}
		if op := r.operation(res.OpID); op.Outcome != catalog.OutcomeUnpublished {
			t.Fatalf("operation outcome %s, want unpublished", op.Outcome)
		}
		if n := r.liveRefPuts(branch); n != len(held) {
			t.Fatalf("%d live ref puts sent, %d held", n, len(held))
		}
	})

	t.Run("5_RefHeldReleasedAfterSettleStarted_IsCreatedOnce", func(t *testing.T) {
		r := runningRig(t)
		r.store.Add(liveRefRule(r, faults.Hold, 1))
		lost := liveRefRule(r, faults.FailBeforeSend, 0) // every re-issue is lost
		lost.Skip = 1
		r.store.Add(lost)
		h := startCreate(t, r)
		if _, err := h.WaitCreateBranch(r.ctx); !errors.Is(err, outcome.ErrInDoubt) {
			t.Fatalf("caller got %v, want in_doubt", err)
		}
		r.waitFor("a settle re-issue", 30*time.Second, func() bool {
			return r.store.CountMatching(faults.Rule{Op: faults.OpPut, KeyPrefix: r.refPrefix(branch), Body: isLiveRef}).Attempted >= 2
		})
		if _, err := r.store.Held()[0].Release(r.ctx); err != nil {
			t.Fatalf("release held ref put: %v", err)
		}
		res, err := h.WaitFinal(r.ctx)
		if err != nil {
			t.Fatalf("settle: %v", err)
		}
		assertCreated(t, r, res)
		if n := r.liveRefPuts(branch); n != 1 {
			t.Fatalf("%d live ref puts reached the store, want 1 (the held one)", n)
		}
	})

	t.Run("6_RefRefused_NoFenceNeeded_ReclaimedThenRetriedUnderFreshName", func(t *testing.T) {
		r := runningRig(t)
		rule := liveRefRule(r, faults.Refuse, 1)
		rule.Status = 403
		r.store.Add(rule)
		res, err := r.gc.CreateBranch(r.ctx, client.CreateBranchRequest{Graph: r.graph, Branch: branch})
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		assertCreated(t, r, res)
		if res.Incarnations != 2 {
			t.Fatalf("%d incarnations tried, want 2 (one retry)", res.Incarnations)
		}
		var first string
		for native := range r.refs(branch) {
			if native != res.Native {
				first = native
			}
		}
		if first != "" {
			t.Fatalf("the refused incarnation's ref key holds %+v: a definitely refused put needs no fence", r.refs(branch)[first])
		}
		var refused catalog.Incarnation
		for _, inc := range r.incarnations(branch) {
			if inc.Native != res.Native {
				refused = inc
			}
		}
		if refused.State != catalog.IncarnationUnpublished || len(r.treeCommits(refused.Native)) != 0 {
			t.Fatalf("refused incarnation %+v (tree %v), want unpublished with its clone reclaimed", refused, r.treeCommits(refused.Native))
		}
		if n := r.liveRefPuts(branch); n != 2 {
			t.Fatalf("%d live ref puts sent, want 2 (refused, then the retry)", n)
		}
	})

	t.Run("7_ClonePutsLost_RefNeverSent_Unpublished", func(t *testing.T) {
		r := runningRig(t)
		r.store.Add(faults.Rule{Op: faults.OpPut, KeyPrefix: r.graph + "/trees/", Mode: faults.FailBeforeSend})
		res, err := r.gc.CreateBranch(r.ctx, client.CreateBranchRequest{Graph: r.graph, Branch: branch})
		if !errors.Is(err, outcome.ErrUnpublished) {
			t.Fatalf("create: %+v, %v; want unpublished", res, err)
		}
		if tally := r.store.CountMatching(faults.Rule{Op: faults.OpPut, KeyPrefix: r.refPrefix(branch), Body: isLiveRef}); tally.Attempted != 0 {
			t.Fatalf("ref puts %+v, want none: the clone never committed", tally)
		}
		refs := r.refs(branch)
		if len(refs) != res.Incarnations {
			t.Fatalf("refs %v for %d incarnations", refs, res.Incarnations)
		}
		for native := range refs {
			assertUnpublished(t, r, native)
		}
		if op := r.operation(res.OpID); op.Outcome != catalog.OutcomeUnpublished {
			t.Fatalf("operation outcome %s, want unpublished", op.Outcome)
		}
	})

	t.Run("8_WorkerKilledBetweenCloneAndRef_NewWorkerFinishes", func(t *testing.T) {
		t.Parallel()
		r := newRig(t)
		child := exec.Command(os.Args[0], "-test.run=^$")
		child.Env = append(os.Environ(), childWorkerEnv+"=1",
			"GRAFT_CHILD_S3_ENDPOINT="+r.s3cfg.Endpoint, "GRAFT_CHILD_S3_BUCKET="+r.s3cfg.Bucket,
			"GRAFT_CHILD_S3_ACCESS="+r.s3cfg.AccessKeyID, "GRAFT_CHILD_S3_SECRET="+r.s3cfg.SecretAccessKey,
			"GRAFT_CHILD_REF_PREFIX="+r.refPrefix(branch), "GRAFT_CHILD_DB_SCHEMA="+r.cat.Schema(),
			"GRAFT_CHILD_TEMPORAL="+testenvTemporal(t), "GRAFT_CHILD_TASK_QUEUE="+r.taskQueue)
		child.Stdout, child.Stderr = os.Stderr, os.Stderr
		if err := child.Start(); err != nil {
			t.Fatalf("start child worker: %v", err)
		}
		killed := false
		t.Cleanup(func() {
			if !killed {
				child.Process.Kill()
				child.Wait()
			}
		})
		h := startCreate(t, r)
		r.waitFor("the clone to be stored, its witness and ref put recorded", time.Minute, func() bool {
			incs := r.incarnations(branch)
			return len(incs) == 1 && incs[0].State == catalog.IncarnationIntent &&
				len(r.treeCommits(incs[0].Native)) == 1 && len(r.operation(incs[0].OpID).Pending) > 0
		})
		time.Sleep(200 * time.Millisecond) // the child is now stalled before the ref put
		child.Process.Kill()
		child.Wait()
		killed = true
		if n := r.refs(branch); len(n) != 0 {
			t.Fatalf("ref written before the kill: %v", n)
		}
		r.startWorker()
		ctx, cancel := context.WithTimeout(r.ctx, 90*time.Second)
		defer cancel()
		res, err := h.WaitFinal(ctx)
		if err != nil {
			t.Fatalf("create after worker death: %v", err)
		}
		assertCreated(t, r, res)
	})

	t.Run("9_SecondCreateOfInDoubtName_AttachesToFirst", func(t *testing.T) {
		r := runningRig(t)
		r.store.Add(liveRefRule(r, faults.Hold, 0))
		_, err := r.gc.CreateBranch(r.ctx, client.CreateBranchRequest{Graph: r.graph, Branch: branch, IdempotencyKey: "first"})
		var first *outcome.Error
		if !errors.As(err, &first) || first.Outcome != outcome.InDoubt {
			t.Fatalf("first create: %v, want in_doubt", err)
		}
		h2, err := r.gc.StartCreateBranch(r.ctx, client.CreateBranchRequest{Graph: r.graph, Branch: branch, IdempotencyKey: "second"})
		if err != nil {
			t.Fatalf("second create: %v", err)
		}
		_, err = h2.WaitCreateBranch(r.ctx)
		var second *outcome.Error
		if !errors.As(err, &second) || second.Outcome != outcome.InDoubt || second.OpID != first.OpID {
			t.Fatalf("second create: %v, want in_doubt of operation %s", err, first.OpID)
		}
		if incs := r.incarnations(branch); len(incs) != 1 {
			t.Fatalf("ledger holds %d incarnations of %s, want 1 (no second ULID)", len(incs), branch)
		}
		if err := r.gc.AbandonCreate(r.ctx, r.graph, branch, "end of test"); err != nil {
			t.Fatal(err)
		}
		if _, err := h2.WaitFinal(r.ctx); !errors.Is(err, outcome.ErrUnpublished) {
			t.Fatalf("after abandon: %v", err)
		}
	})
}

// A worker's metrics count each operation once, by outcome, whichever step recorded its
// end: a create's ref write, a table write's publish, or the kernel's finish.
func TestOperationsFinished_EachCountedOnceByItsOutcome(t *testing.T) {
	r := runningRig(t)
	before := r.observed.counts()
	if res, err := r.gc.CreateBranch(r.ctx, client.CreateBranchRequest{Graph: r.graph, Branch: "counted"}); err != nil || res.Outcome != outcome.Created {
		t.Fatalf("create: %+v, %v", res, err)
	}
	if res, err := r.gc.CreateBranch(r.ctx, client.CreateBranchRequest{Graph: r.graph, Branch: "counted"}); !errors.Is(err, outcome.ErrConflict) {
		t.Fatalf("second create: %+v, %v; want conflict", res, err)
	}
	if res, err := r.gc.DeleteBranch(r.ctx, client.DeleteBranchRequest{Graph: r.graph, Branch: "counted"}); err != nil || res.Outcome != outcome.Deleted {
		t.Fatalf("delete: %+v, %v", res, err)
	}
	if res, err := r.gc.WriteTable(r.ctx, r.inner, client.WriteTableRequest{Graph: r.graph, Branch: "main", Table: "w", Files: writeFiles(t, "w")}); err != nil || res.Outcome != outcome.Done {
		t.Fatalf("write: %+v, %v", res, err)
	}
	got := r.observed.counts()
	for k, n := range before {
		got[k] -= n
	}
	maps.DeleteFunc(got, func(_ string, n int) bool { return n == 0 })
	want := map[string]int{"create_branch created": 1, "create_branch conflict": 1, "delete_branch deleted": 1, "write_table done": 1}
	if !maps.Equal(got, want) {
		t.Fatalf("operations finished %v, want %v", got, want)
	}
}
