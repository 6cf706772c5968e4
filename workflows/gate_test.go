package workflows_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/serviceerror"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/workflows"
	"github.com/graftworks/graft/workflows/contract"
)

// Merges into a protected branch: real Temporal, versitygw and Postgres, with the checks
// as workflows of a second worker on a task queue of their own, as a user's would be.

func init() {
	// Waiting merges read their heads often here (this process and its child workers).
	workflows.GateWatchFirst, workflows.GateWatchMax = 200*time.Millisecond, time.Second
}

// The test's check workflows. checkGated returns the verdict signalled to it, and counts
// its runs by round.
const (
	checkPass  = "graft-test.pass"
	checkFail  = "graft-test.fail"
	checkGated = "graft-test.gated"
)

// gateRig is a rig whose graph has a feature branch with a change for main, and a check
// worker on a task queue of its own.
type gateRig struct {
	*rig
	ops    *client.Ops
	checks string // the checks' task queue
	base   graph.CommitView
	feat   graph.CommitView
	// inputs records every check input the check workflows received.
	inputs chan contract.CheckInput
}

func newGateRig(t *testing.T) *gateRig {
	r := &gateRig{rig: runningRig(t), checks: randomName("graft-checks-"), inputs: make(chan contract.CheckInput, 64)}
	r.ops = r.rig.ops(r.gc)
	r.base = r.main
	r.feat = r.fork("feat", r.main)
	r.write(&r.feat, "a", "a1")
	w := sdkworker.New(r.tc, r.checks, sdkworker.Options{})
	w.RegisterWorkflowWithOptions(func(ctx workflow.Context, in contract.CheckInput) (contract.CheckResult, error) {
		r.inputs <- in
		return contract.CheckResult{Pass: true, Message: "fine"}, nil
	}, workflow.RegisterOptions{Name: checkPass})
	w.RegisterWorkflowWithOptions(func(ctx workflow.Context, in contract.CheckInput) (contract.CheckResult, error) {
		return contract.CheckResult{Pass: false, Message: "table a has no rows"}, nil
	}, workflow.RegisterOptions{Name: checkFail})
	w.RegisterWorkflowWithOptions(func(ctx workflow.Context, in contract.CheckInput) (contract.CheckResult, error) {
		r.inputs <- in
		var v contract.CheckResult
		sel := workflow.NewSelector(ctx)
		sel.AddReceive(workflow.GetSignalChannel(ctx, "verdict"), func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, &v) })
		sel.AddReceive(ctx.Done(), func(workflow.ReceiveChannel, bool) {})
		sel.Select(ctx)
		return v, ctx.Err()
	}, workflow.RegisterOptions{Name: checkGated})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return r
}

// protect sets main's rule: the named checks on the rig's check queue, and approvals.
func (r *gateRig) protect(approvals int, checks ...string) {
	r.t.Helper()
	rule := client.BranchRule{Graph: r.graph, Branch: "main", Approvals: approvals, SetBy: "test"}
	for _, c := range checks {
		rule.Checks = append(rule.Checks, client.BranchCheck{Name: c, TaskQueue: r.checks})
	}
	if _, err := r.ops.Protect(r.ctx, rule); err != nil {
		r.t.Fatalf("protect main: %v", err)
	}
}

// start starts a merge of feat into main.
func (r *gateRig) start(req client.MergeRequest) *client.MergeHandle {
	r.t.Helper()
	req.Graph, req.Source, req.Target = r.graph, "feat", "main"
	h, err := r.gc.StartMerge(r.ctx, req)
	if err != nil {
		r.t.Fatalf("start merge: %v", err)
	}
	return h
}

// waiting waits until the ledger says the merge waits for want (a substring of what it
// waits for) and returns the status the workflow answers then.
func (r *gateRig) waiting(h *client.MergeHandle, want string) client.MergeWait {
	r.t.Helper()
	var st client.Status
	r.waitFor("the merge waiting for "+want, time.Minute, func() bool {
		op, err := r.cat.OperationGet(r.ctx, catalog.OperationGetParams{ID: h.OpID})
		if err != nil || op.Phase != "waiting" || !strings.Contains(op.Waiting, want) {
			return false
		}
		st, err = h.Status(r.ctx)
		return err == nil && st.Wait != nil && strings.Contains(st.Wait.Summary(), want)
	})
	return *st.Wait
}

// review reviews the merge, retrying while it re-plans.
func (r *gateRig) review(h *client.MergeHandle, reviewer string, approve bool, comment string) client.MergeWait {
	r.t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		w, err := r.ops.Review(r.ctx, client.ReviewRequest{OpID: h.OpID, Reviewer: reviewer, Approve: approve, Comment: comment})
		if err == nil {
			return w
		}
		if !errors.Is(err, outcome.ErrConflict) || time.Now().After(deadline) {
			r.t.Fatalf("review by %s: %v", reviewer, err)
		}
	}
}

// verdict signals the running gated check of round its verdict.
func (r *gateRig) verdict(w client.MergeWait, pass bool, msg string) {
	r.t.Helper()
	for _, c := range w.Checks {
		if c.Name == checkGated {
			// The wait names a check as the merge starts it: its workflow may not exist yet.
			r.waitFor("check "+c.WorkflowID+" to start", time.Minute, func() bool {
				err := r.tc.SignalWorkflow(r.ctx, c.WorkflowID, "", "verdict", contract.CheckResult{Pass: pass, Message: msg})
				var notFound *serviceerror.NotFound
				if err != nil && !errors.As(err, &notFound) {
					r.t.Fatalf("signal check: %v", err)
				}
				return err == nil
			})
			return
		}
	}
	r.t.Fatalf("no gated check in %+v", w)
}

// wantRejected waits for the merge and fails unless it ended rejected with a message
// containing want, main unmoved and the merge's pins released.
func (r *gateRig) wantRejected(h *client.MergeHandle, want string) workflows.MergeResult {
	r.t.Helper()
	before := r.headOf("main")
	res, err := h.Wait(r.ctx)
	if !errors.Is(err, outcome.ErrRejected) || res.Outcome != outcome.Rejected || !strings.Contains(res.Message, want) || res.Commit != "" {
		r.t.Fatalf("merge: %+v, %v; want rejected naming %q", res, err, want)
	}
	if head := r.headOf("main"); head.ID != before.ID {
		r.t.Fatalf("main moved to %s after a rejected merge", head.ID)
	}
	r.wantOperation(h.OpID, catalog.OpMerge, outcome.Rejected)
	return res
}

func TestProtectedMerge_ChecksPassAndApproved_MergesAndRecordsTheReview(t *testing.T) {
	r := newGateRig(t)
	r.protect(1, checkPass)
	h := r.start(client.MergeRequest{})
	w := r.waiting(h, "passed; approvals 0/1")
	if len(w.Checks) != 1 || w.Checks[0].State != workflows.CheckPassed {
		t.Fatalf("waiting for %+v, want the check passed", w)
	}
	in := <-r.inputs
	if in.Graph != r.graph || in.OpID != h.OpID || in.SourceHead != r.feat.ID.String() || in.TargetHead != r.main.ID.String() ||
		in.Round != 1 || len(in.Tables) != 1 || in.Tables[0].Table != "a" || in.Tables[0].Action != contract.MergeAdopt ||
		!strings.HasPrefix(in.Locator, "s3://") {
		t.Fatalf("check input %+v", in)
	}
	waiting, err := r.ops.List(r.ctx, client.OpsFilter{Graph: r.graph, Waiting: true})
	if err != nil || len(waiting) != 1 || waiting[0].ID != h.OpID || waiting[0].Waiting != "checks: "+checkPass+" passed; approvals 0/1" {
		t.Fatalf("waiting merges %+v, %v", waiting, err)
	}
	r.review(h, "ana", true, "looks right")
	res, err := h.Wait(r.ctx)
	if err != nil || res.Outcome != outcome.Adopted || res.Wait == nil || res.Wait.Approvals != 1 {
		t.Fatalf("merge: %+v, %v; want adopted with one approval", res, err)
	}
	if head := r.headOf("main"); head.ID.String() != res.Commit || head.Pins["a"] != r.feat.Pins["a"] {
		t.Fatalf("main's head %+v, want the merge commit %s with a", head, res.Commit)
	}
	reviews, err := r.ops.Reviews(r.ctx, h.OpID)
	if err != nil || len(reviews) != 1 || reviews[0].Reviewer != "ana" || !reviews[0].Approve ||
		reviews[0].Comment != "looks right" || reviews[0].SourceHead != r.feat.ID.String() || reviews[0].At == "" {
		t.Fatalf("reviews %+v, %v", reviews, err)
	}
	r.wantOperation(h.OpID, catalog.OpMerge, outcome.Adopted)
	recordHistory(t, r.rig, h.WorkflowID, "", "merge_protected_approved")
	if _, err := r.ops.Review(r.ctx, client.ReviewRequest{OpID: h.OpID, Reviewer: "bo", Approve: true}); !errors.Is(err, outcome.ErrConflict) {
		t.Fatalf("review of an ended merge: %v, want conflict", err)
	}
}

func TestProtectedMerge_CheckFails_RejectedNamingTheCheckAndNothingWritten(t *testing.T) {
	r := newGateRig(t)
	r.protect(0, checkPass, checkFail)
	r.wantRejected(r.start(client.MergeRequest{}), "check "+checkFail+" failed: table a has no rows")
}

func TestProtectedMerge_ReviewerRejects_RejectedNamingTheReviewer(t *testing.T) {
	r := newGateRig(t)
	r.protect(2)
	h := r.start(client.MergeRequest{})
	r.waiting(h, "approvals 0/2")
	if w := r.review(h, "ana", true, ""); w.Approvals != 1 {
		t.Fatalf("after one approval: %+v", w)
	}
	r.review(h, "bo", false, "numbers are off")
	r.wantRejected(h, "rejected by bo: numbers are off")
	if reviews, err := r.ops.Reviews(r.ctx, h.OpID); err != nil || len(reviews) != 2 || reviews[1].Approve {
		t.Fatalf("reviews %+v, %v; want the approval and the rejection", reviews, err)
	}
}

func TestProtectedMerge_WaitDeadline_RejectedNamingTheDeadline(t *testing.T) {
	r := newGateRig(t)
	r.protect(1)
	r.wantRejected(r.start(client.MergeRequest{WaitTimeout: 2 * time.Second}), "wait deadline")
}

func TestProtectedMerge_CancelledWhileWaiting_RejectedAndPinsReleased(t *testing.T) {
	r := newGateRig(t)
	r.protect(0, checkGated)
	h := r.start(client.MergeRequest{})
	w := r.waiting(h, checkGated+" running")
	if err := r.tc.CancelWorkflow(r.ctx, h.WorkflowID, ""); err != nil {
		t.Fatal(err)
	}
	r.waitFor("the merge's end in the ledger", time.Minute, func() bool { return r.operation(h.OpID).State == catalog.OperationDone })
	r.wantOperation(h.OpID, catalog.OpMerge, outcome.Rejected)
	if op := r.operation(h.OpID); !strings.Contains(op.Error, "cancelled while waiting") {
		t.Fatalf("ledger row %+v, want the cancellation named", op)
	}
	r.waitFor("the check cancelled", time.Minute, func() bool {
		d, err := r.tc.DescribeWorkflowExecution(r.ctx, w.Checks[0].WorkflowID, "")
		return err == nil && d.WorkflowExecutionInfo.CloseTime != nil
	})
}

func TestProtectedMerge_TargetMovesWhileWaiting_ReplansAndChecksAgain(t *testing.T) {
	r := newGateRig(t)
	r.protect(0, checkGated)
	h := r.start(client.MergeRequest{})
	first := r.waiting(h, checkGated+" running")
	r.write(&r.main, "b", "b1") // main moves: the plan the check saw is not what would merge
	var second client.MergeWait
	r.waitFor("round 2", time.Minute, func() bool {
		second = r.waiting(h, checkGated+" running")
		return second.Round == 2
	})
	if second.TargetHead != r.main.ID.String() || first.Checks[0].WorkflowID == second.Checks[0].WorkflowID {
		t.Fatalf("round 2 %+v after round 1 %+v; want the moved target and a new check run", second, first)
	}
	r.verdict(second, true, "ok")
	res, err := h.Wait(r.ctx)
	if err != nil || res.Outcome != outcome.Merged || res.TargetHead != r.main.ID.String() {
		t.Fatalf("merge: %+v, %v; want merged onto the moved target", res, err)
	}
	if head := r.headOf("main"); head.Parents[0] != r.main.ID || head.Pins["b"] != r.main.Pins["b"] || head.Pins["a"] != r.feat.Pins["a"] {
		t.Fatalf("main's head %+v", head)
	}
	r.wantOperation(h.OpID, catalog.OpMerge, outcome.Merged)
	recordHistory(t, r.rig, h.WorkflowID, "", "merge_protected_replanned")
}

func TestProtectedMerge_SourceMovesWhileWaiting_ApprovalsDroppedAndChecksRunAgain(t *testing.T) {
	r := newGateRig(t)
	r.protect(1, checkGated)
	h := r.start(client.MergeRequest{})
	r.waiting(h, checkGated+" running")
	if w := r.review(h, "ana", true, ""); w.Approvals != 1 {
		t.Fatalf("after the approval: %+v", w)
	}
	r.write(&r.feat, "a", "a2") // the source moves: ana approved another head
	var w client.MergeWait
	r.waitFor("round 2", time.Minute, func() bool {
		w = r.waiting(h, "approvals 0/1")
		return w.Round == 2
	})
	if w.SourceHead != r.feat.ID.String() || len(w.Reviews) != 1 {
		t.Fatalf("round 2 %+v; want the new source head, and ana's review kept but not counted", w)
	}
	r.verdict(w, true, "ok")
	r.waiting(h, checkGated+" passed; approvals 0/1")
	r.review(h, "ana", true, "again")
	res, err := h.Wait(r.ctx)
	if err != nil || res.Outcome != outcome.Adopted || res.SourceHead != r.feat.ID.String() {
		t.Fatalf("merge: %+v, %v; want the new source head adopted", res, err)
	}
	if head := r.headOf("main"); head.Pins["a"] != r.feat.Pins["a"] {
		t.Fatalf("main pins %v, want a2", head.Pins)
	}
}

func TestProtectedMerge_CleanupWhileWaiting_KeepsTheMergeInputs(t *testing.T) {
	r := newGateRig(t)
	r.write(&r.main, "b", "b1") // the fork point is an older commit of main now
	r.protect(1)
	h := r.start(client.MergeRequest{})
	r.waiting(h, "approvals 0/1")
	res := r.cleanup(client.CleanupRequest{KeepNewest: 1, Mode: workflows.CleanupModeSweep, GuardWindow: noGuard()})
	r.wantKept("merge base", r.base, "t")
	if res.Kept.Pin == 0 {
		t.Fatalf("cleanup kept %+v, want keys kept by the waiting merge's pins", res.Kept)
	}
	r.review(h, "ana", true, "")
	if final, err := h.Wait(r.ctx); err != nil || final.Outcome != outcome.Merged {
		t.Fatalf("merge: %+v, %v; want merged", final, err)
	}
	r.wantOperation(h.OpID, catalog.OpMerge, outcome.Merged)
	checkInvariants(t, r.rig)
}

func TestProtectedMerge_WorkerKilledWhileWaiting_AnotherWorkerFinishes(t *testing.T) {
	t.Parallel()
	base := newRig(t) // no in-process worker: the child process runs the merge first
	r := &gateRig{rig: base, checks: randomName("graft-checks-")}
	r.ops = r.rig.ops(r.gc)
	r.feat = r.fork("feat", r.main)
	r.write(&r.feat, "a", "a1")
	r.protect(1)
	child := r.childWorker(t, "no-stall/")
	h := r.start(client.MergeRequest{})
	r.waiting(h, "approvals 0/1")
	if err := child.Process.Kill(); err != nil { // kill -9 while the merge waits
		t.Fatal(err)
	}
	_ = child.Wait()
	r.startWorker()
	r.review(h, "ana", true, "")
	if res, err := h.Wait(r.ctx); err != nil || res.Outcome != outcome.Adopted {
		t.Fatalf("merge: %+v, %v; want adopted by the second worker", res, err)
	}
	r.wantOperation(h.OpID, catalog.OpMerge, outcome.Adopted)
}
