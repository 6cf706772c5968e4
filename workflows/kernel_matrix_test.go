package workflows_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	sdkclient "go.temporal.io/sdk/client"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/storage/faults"
	"github.com/graftworks/graft/workflows"
)

// The all-operations matrix: every operation kind × every way its workflow can be ended
// or its storage can misbehave. Each case runs on a fresh rig (its own bucket, ledger
// schema, graph, task queue) and must end with a definitive outcome; then the graph and
// every name it used must be usable again, and — when the case ends — the reconciler and
// the oracle run (harness_test.go). The test reports how many cases ran and how many
// violated anything.

// matrixKind is one operation kind as the matrix drives it.
type matrixKind struct {
	name string
	wf   string
	// prepare readies the rig and returns the request for an op id, and a different
	// request sent with the same op id.
	prepare func(r *rig) (req, other func(opID string) any)
	// effect selects the operation's main storage effect: the write that publishes.
	effect func(r *rig) faults.Rule
	// kernel: the kind goes through the kernel's writes (pending recorded, in doubt).
	kernel bool
	// success is the outcome when the effect lands.
	success []outcome.Outcome
	// result returns a fresh result value to decode into.
	result func() any
	// usable uses the graph once more, as the kind's users would after the case.
	usable func(t *testing.T, r *rig)
	// awaitsUpload: the workflow waits for graft.uploaded after its pins (a pin-first
	// write); startMatrix sends it once the workflow waits.
	awaitsUpload bool
}

// matrixCase is one way of ending an operation or misbehaving under it.
type matrixCase struct {
	name string
	run  func(t *testing.T, r *rig, k matrixKind)
}

// shortStepBudgets lowers the kernel's step timing for one test: steps time out after
// 2 s, a step before any effect gives up after 10 s, a fast path hands over after 4 s.
// The knobs are the package's, so a test that calls it must not be parallel: no other
// test runs while they are lowered.
func shortStepBudgets(t *testing.T) {
	saved := []time.Duration{workflows.StepTimeout, workflows.BeforeEffectBudget, workflows.FastPathBudget}
	workflows.StepTimeout, workflows.BeforeEffectBudget, workflows.FastPathBudget = 2*time.Second, 10*time.Second, 4*time.Second
	t.Cleanup(func() {
		workflows.StepTimeout, workflows.BeforeEffectBudget, workflows.FastPathBudget = saved[0], saved[1], saved[2]
	})
}

func TestKernel_AllOperationsMatrix(t *testing.T) {
	// A 5 s stall is longer than every step timeout here.
	shortStepBudgets(t)

	kinds := matrixKinds()
	cases := matrixCases()
	type job struct {
		k matrixKind
		c matrixCase
	}
	jobs := make(chan job)
	var ran, violations atomic.Int64
	var mu sync.Mutex
	var failed []string
	var wg sync.WaitGroup
	// Ten cases at once: most of a case is waiting on a timeout, a stall or a
	// second worker, not on a core.
	for range 10 {
		wg.Go(func() {
			for j := range jobs {
				name := j.k.name + "/" + j.c.name
				ok := t.Run(name, func(t *testing.T) {
					ran.Add(1)
					r := newRig(t)
					j.k.prepareOnce(r)
					j.c.run(t, r, j.k)
				})
				if !ok {
					violations.Add(1)
					mu.Lock()
					failed = append(failed, name)
					mu.Unlock()
				}
			}
		})
	}
	for _, k := range kinds {
		for _, c := range cases {
			jobs <- job{k, c}
		}
	}
	close(jobs)
	wg.Wait()
	sort.Strings(failed)
	t.Logf("all-operations matrix: %d kinds × %d cases = %d cases run, %d violations %v",
		len(kinds), len(cases), ran.Load(), violations.Load(), failed)
}

// --- the cases ---

func matrixCases() []matrixCase {
	return []matrixCase{
		{"StallLongerThanEveryStepTimeout_Succeeds", func(t *testing.T, r *rig, k matrixKind) {
			r.startWorker()
			rule := k.effect(r)
			rule.Mode, rule.Delay, rule.Times = faults.Delay, 5*time.Second, 1
			r.store.Add(rule)
			run := r.startMatrix(k, randomName("stall-"))
			r.wantSuccess(t, k, run)
			k.usable(t, r)
		}},
		{"AnswerLost_SucceedsOnce", func(t *testing.T, r *rig, k matrixKind) {
			r.startWorker()
			rule := k.effect(r)
			rule.Mode, rule.Times = faults.ApplyLoseAnswer, 1
			r.store.Add(rule)
			run := r.startMatrix(k, randomName("lost-"))
			r.wantSuccess(t, k, run)
			k.usable(t, r)
		}},
		{"CancelledBeforeTheEffect_EndsRecorded", func(t *testing.T, r *rig, k matrixKind) {
			r.startWorker()
			run := r.startMatrix(k, randomName("cancel-"))
			_ = r.tc.CancelWorkflow(r.ctx, run.GetID(), run.GetRunID())
			r.wantClosed(t, run)
			k.usable(t, r)
		}},
		{"CancelledWithItsEffectInFlight_EndsRecorded", func(t *testing.T, r *rig, k matrixKind) {
			r.startWorker()
			stop, release := r.holdEffect(k)
			opID := randomName("cancel-")
			run := r.startMatrix(k, opID)
			r.waitInFlight(t, k, opID)
			if err := r.tc.CancelWorkflow(r.ctx, run.GetID(), run.GetRunID()); err != nil {
				t.Fatal(err)
			}
			stop()
			release()
			r.wantClosed(t, run)
			r.wantFinished(t, opID, k)
			k.usable(t, r)
		}},
		{"TerminatedBeforeTheEffect_ReconciledToAnEnd", func(t *testing.T, r *rig, k matrixKind) {
			r.startWorker()
			run := r.startMatrix(k, randomName("term-"))
			_ = r.tc.TerminateWorkflow(r.ctx, run.GetID(), run.GetRunID(), "matrix")
			r.wantClosed(t, run)
			r.settleClosed(t, k)
			k.usable(t, r)
		}},
		{"TerminatedWithItsEffectInFlight_ReconciledToAnEnd", func(t *testing.T, r *rig, k matrixKind) {
			r.startWorker()
			stop, release := r.holdEffect(k)
			opID := randomName("term-")
			run := r.startMatrix(k, opID)
			r.waitInFlight(t, k, opID)
			r.terminate(run)
			stop()
			r.settleClosed(t, k)
			release() // the late effect lands on a fence, or is the same effect again
			r.settleClosed(t, k)
			r.wantFinished(t, opID, k)
			k.usable(t, r)
		}},
		{"WorkerKilledAtTheEffect_SecondWorkerFinishes", func(t *testing.T, r *rig, k matrixKind) {
			child := r.childWorker(t, k.effect(r).KeyPrefix)
			opID := randomName("kill-")
			run := r.startMatrix(k, opID)
			r.waitStalledInChild(t, k, opID)
			child.Process.Kill() // kill -9
			child.Wait()
			r.startWorker()
			r.wantEnded(t, run, k)
			r.wantFinished(t, opID, k)
			k.usable(t, r)
		}},
		{"SameOpIDFromADifferentRequest_NeverTouchesTheFirst", func(t *testing.T, r *rig, k matrixKind) {
			r.startWorker()
			stop, release := r.holdEffect(k)
			opID := randomName("same-")
			_, other := k.prepareOnce(r)
			first := r.startMatrix(k, opID)
			r.waitInFlight(t, k, opID)
			before, _ := r.cat.OperationGet(r.ctx, catalog.OperationGetParams{ID: opID})
			second := r.startOp(k.wf, other(opID))
			res := k.result()
			ctx, cancel := context.WithTimeout(r.ctx, 90*time.Second)
			defer cancel()
			if err := endOfCtx(ctx, r, second, res); err != nil {
				t.Fatalf("second request with the same op id: %v", err)
			}
			if got := outcomeOf(res); got != outcome.Conflict {
				t.Fatalf("second request ended %s (%+v), want conflict", got, res)
			}
			if after, err := r.cat.OperationGet(r.ctx, catalog.OperationGetParams{ID: opID}); err == nil && before.ID != "" &&
				(after.OwnerRun != before.OwnerRun || after.Fingerprint != before.Fingerprint) {
				t.Fatalf("the second request changed the first's row: %+v → %+v", before, after)
			}
			stop()
			release()
			r.wantSuccess(t, k, first)
			k.usable(t, r)
		}},
		{"StoreRefusesEveryWrite_EndsDefinitively", func(t *testing.T, r *rig, k matrixKind) {
			r.startWorker()
			remove := r.store.Add(faults.Rule{Match: func(op faults.Op, _ string) bool {
				return op == faults.OpPut || op == faults.OpDelete || op == faults.OpDeleteBatch
			}, Mode: faults.Refuse, Status: 403})
			opID := randomName("refused-")
			run := r.startMatrix(k, opID)
			r.wantEnded(t, run, k)
			remove()
			r.wantFinished(t, opID, k)
			k.usable(t, r)
		}},
	}
}

// --- the kinds ---

func matrixKinds() []matrixKind {
	objects := func(r *rig) []workflows.TableObject {
		return []workflows.TableObject{r.upload("u", "matrix "+randomName(""))}
	}
	nextCommit := func(tree func(*rig) graph.CommitView) func(*rig) faults.Rule {
		return func(r *rig) faults.Rule {
			head := tree(r)
			// The next commit's key, whatever its digest: the tree's commits at seq+1.
			return faults.Rule{Op: faults.OpPut, KeyPrefix: format.TreeCommitsPrefix(r.graph, head.ID.Tree) + format.InvSeq(head.ID.Seq+1) + "-"}
		}
	}
	mainHead := func(r *rig) graph.CommitView { return r.headOfTree(r.main.ID.Tree) }
	writeMain := func(t *testing.T, r *rig) {
		t.Helper()
		res, err := r.gc.WriteTable(r.ctx, r.inner, client.WriteTableRequest{Graph: r.graph, Branch: "main", Table: "after", Files: writeFiles(t, "after")})
		if err != nil {
			t.Fatalf("write to main after the case: %+v, %v", res, err)
		}
		r.report("main", res.Commit)
	}
	createNames := func(t *testing.T, r *rig) {
		t.Helper()
		for _, n := range r.names {
			if len(r.liveNatives(n)) > 0 {
				continue
			}
			if _, err := r.gc.CreateBranch(r.ctx, client.CreateBranchRequest{Graph: r.graph, Branch: n}); err != nil {
				t.Fatalf("create %s after the case: %v", n, err)
			}
		}
	}
	usable := func(t *testing.T, r *rig) { writeMain(t, r); createNames(t, r) }
	return []matrixKind{
		{name: "InitGraph", wf: workflows.InitGraphName, success: []outcome.Outcome{outcome.Done},
			prepare: func(r *rig) (func(string) any, func(string) any) {
				r.graph = randomName("g") // a graph not initialised yet
				return func(op string) any { return workflows.InitGraphInput{Graph: r.graph, OpID: op} },
					func(op string) any { return workflows.InitGraphInput{Graph: r.graph, OpID: op, Author: "someone-else"} }
			},
			effect: func(r *rig) faults.Rule {
				return faults.Rule{Op: faults.OpPut, KeyPrefix: r.refPrefix("main"), Body: isLiveRef}
			},
			result: func() any { return &workflows.InitGraphResult{} },
			usable: func(t *testing.T, r *rig) {
				t.Helper()
				res, err := r.gc.InitGraph(r.ctx, client.InitGraphRequest{Graph: r.graph})
				if err != nil && res.Outcome != outcome.Conflict {
					t.Fatalf("init after the case: %+v, %v", res, err)
				}
				if _, err := r.gc.CreateBranch(r.ctx, client.CreateBranchRequest{Graph: r.graph, Branch: "after-init"}); err != nil {
					t.Fatalf("create on the graph after the case: %v", err)
				}
				r.names = append(r.names, "after-init")
			}},
		{name: "WriteTable", wf: workflows.WriteTableName, kernel: true, success: []outcome.Outcome{outcome.Done},
			prepare: func(r *rig) (func(string) any, func(string) any) {
				objs := objects(r)
				return func(op string) any {
						return workflows.WriteTableInput{Graph: r.graph, Branch: "main", Table: "u", Objects: objs, OpID: op}
					}, func(op string) any {
						return workflows.WriteTableInput{Graph: r.graph, Branch: "main", Table: "w", Objects: objs, OpID: op}
					}
			},
			effect: nextCommit(mainHead), result: func() any { return &workflows.WriteTableResult{} }, usable: usable},
		{name: "WriteTablePinFirst", wf: workflows.WriteTableName, kernel: true, success: []outcome.Outcome{outcome.Done}, awaitsUpload: true,
			prepare: func(r *rig) (func(string) any, func(string) any) {
				objs := objects(r)
				return func(op string) any {
						return workflows.WriteTableInput{Graph: r.graph, Branch: "main", Table: "u", Objects: objs, OpID: op, AwaitUpload: true}
					}, func(op string) any {
						return workflows.WriteTableInput{Graph: r.graph, Branch: "main", Table: "w", Objects: objs, OpID: op, AwaitUpload: true}
					}
			},
			effect: nextCommit(mainHead), result: func() any { return &workflows.WriteTableResult{} }, usable: usable},
		{name: "CreateBranch", wf: workflows.CreateBranchName, kernel: true, success: []outcome.Outcome{outcome.Created},
			prepare: func(r *rig) (func(string) any, func(string) any) {
				r.names = append(r.names, "mx", "my")
				return func(op string) any { return workflows.CreateBranchInput{Graph: r.graph, Branch: "mx", OpID: op} },
					func(op string) any { return workflows.CreateBranchInput{Graph: r.graph, Branch: "my", OpID: op} }
			},
			effect: func(r *rig) faults.Rule {
				return faults.Rule{Op: faults.OpPut, KeyPrefix: r.refPrefix("mx"), Body: isLiveRef}
			},
			result: func() any { return &workflows.CreateBranchResult{} }, usable: usable},
		{name: "Merge", wf: workflows.MergeName, kernel: true, success: []outcome.Outcome{outcome.Merged, outcome.Adopted},
			prepare: func(r *rig) (func(string) any, func(string) any) {
				fork := r.handBranch("feat", r.main, time.Now(), true)
				r.commitOn(&fork, "f", "featurework", time.Now())
				r.names = append(r.names, "feat")
				return func(op string) any {
						return workflows.MergeInput{Graph: r.graph, Source: "feat", Target: "main", OpID: op}
					},
					func(op string) any {
						return workflows.MergeInput{Graph: r.graph, Source: "feat", Target: "main", OpID: op, Message: "another merge"}
					}
			},
			effect: nextCommit(mainHead), result: func() any { return &workflows.MergeResult{} }, usable: usable},
		{name: "Restore", wf: workflows.RestoreName, kernel: true, success: []outcome.Outcome{outcome.Done},
			prepare: func(r *rig) (func(string) any, func(string) any) {
				target := r.main
				r.commitAt("t", "v2", time.Now())
				return func(op string) any {
						return workflows.RestoreInput{Graph: r.graph, Branch: "main", To: workflows.RestoreTarget{Commit: target.ID.String()}, OpID: op}
					}, func(op string) any {
						return workflows.RestoreInput{Graph: r.graph, Branch: "main", To: workflows.RestoreTarget{Commit: target.ID.String()}, OpID: op, NoBackup: true}
					}
			},
			effect: nextCommit(mainHead), result: func() any { return &workflows.RestoreResult{} }, usable: usable},
		{name: "CreateTag", wf: workflows.CreateTagName, kernel: true, success: []outcome.Outcome{outcome.Created},
			prepare: func(r *rig) (func(string) any, func(string) any) {
				return func(op string) any {
						return workflows.CreateTagInput{Graph: r.graph, Name: "rel", Branch: "main", OpID: op}
					},
					func(op string) any {
						return workflows.CreateTagInput{Graph: r.graph, Name: "rel2", Branch: "main", OpID: op}
					}
			},
			effect: func(r *rig) faults.Rule {
				return faults.Rule{Op: faults.OpPut, KeyPrefix: format.TagKey(r.graph, "rel")}
			},
			result: func() any { return &workflows.CreateTagResult{} }, usable: usable},
		{name: "DeleteTag", wf: workflows.DeleteTagName, kernel: true, success: []outcome.Outcome{outcome.Deleted},
			prepare: func(r *rig) (func(string) any, func(string) any) {
				r.putTag("old", r.main)
				return func(op string) any { return workflows.DeleteTagInput{Graph: r.graph, Name: "old", OpID: op} },
					func(op string) any { return workflows.DeleteTagInput{Graph: r.graph, Name: "old2", OpID: op} }
			},
			effect: func(r *rig) faults.Rule {
				return faults.Rule{Op: faults.OpPut, KeyPrefix: format.TagKey(r.graph, "old")}
			},
			result: func() any { return &workflows.DeleteTagResult{} }, usable: usable},
		{name: "DeleteBranch", wf: workflows.DeleteBranchName, kernel: true, success: []outcome.Outcome{outcome.Deleted},
			prepare: func(r *rig) (func(string) any, func(string) any) {
				r.handBranch("gone", r.main, time.Now(), true)
				r.names = append(r.names, "gone")
				return func(op string) any { return workflows.DeleteBranchInput{Graph: r.graph, Branch: "gone", OpID: op} },
					func(op string) any { return workflows.DeleteBranchInput{Graph: r.graph, Branch: "gone2", OpID: op} }
			},
			effect: func(r *rig) faults.Rule { return faults.Rule{Op: faults.OpPut, KeyPrefix: r.refPrefix("gone")} },
			result: func() any { return &workflows.DeleteBranchResult{} }, usable: usable},
		{name: "RepairBranch", wf: workflows.RepairBranchName, kernel: true, success: []outcome.Outcome{outcome.Done},
			prepare: func(r *rig) (func(string) any, func(string) any) {
				a, _ := r.handWrittenIncarnation("dup")
				b, _ := r.handWrittenIncarnation("dup")
				r.repairKeep, r.repairRetire = a, b
				return func(op string) any {
						return workflows.RepairBranchInput{Graph: r.graph, Branch: "dup", Keep: a, OpID: op}
					},
					func(op string) any {
						return workflows.RepairBranchInput{Graph: r.graph, Branch: "dup", Keep: b, OpID: op}
					}
			},
			effect: func(r *rig) faults.Rule {
				return faults.Rule{Op: faults.OpPut, KeyPrefix: format.BranchRefKey(r.graph, r.repairRetire)}
			},
			result: func() any { return &workflows.RepairBranchResult{} },
			usable: func(t *testing.T, r *rig) {
				t.Helper()
				if live := r.liveNatives("dup"); len(live) > 1 {
					if _, err := r.gc.RepairBranch(r.ctx, client.RepairBranchRequest{Graph: r.graph, Branch: "dup", Keep: r.repairKeep}); err != nil {
						t.Fatalf("repair after the case: %v", err)
					}
				}
				usable(t, r)
			}},
		{name: "Cleanup", wf: workflows.CleanupName, success: []outcome.Outcome{outcome.Done},
			prepare: func(r *rig) (func(string) any, func(string) any) {
				old := time.Now().Add(-time.Hour)
				r.commitAt("t", "c1", old)
				r.commitAt("t", "c2", old.Add(time.Second))
				r.garbage([]string{"t"}, 5)
				in := func(op string, keep int) any {
					return workflows.CleanupInput{Graph: r.graph, KeepNewest: keep, Mode: workflows.CleanupModeSweep, GuardWindow: noGuard(),
						RunID: op, Tuning: &workflows.CleanupTuning{HeartbeatTimeout: 2 * time.Second}}
				}
				return func(op string) any { return in(op, 1) }, func(op string) any { return in(op, 2) }
			},
			effect: func(r *rig) faults.Rule {
				return faults.Rule{KeyPrefix: r.graph + "/", Match: func(op faults.Op, _ string) bool { return op == faults.OpDelete || op == faults.OpDeleteBatch }}
			},
			result: func() any { return &workflows.CleanupResult{} }, usable: usable},
	}
}

// --- helpers ---

// prepareOnce readies the rig for k, once per case.
func (k matrixKind) prepareOnce(r *rig) (req, other func(opID string) any) {
	if r.matrixReq == nil {
		r.matrixReq, r.matrixOther = k.prepare(r)
	}
	return r.matrixReq, r.matrixOther
}

func (r *rig) startMatrix(k matrixKind, opID string) sdkclient.WorkflowRun {
	req, _ := k.prepareOnce(r)
	run := r.startOp(k.wf, req(opID))
	if k.awaitsUpload {
		go r.sendUploaded(run)
	}
	return run
}

// sendUploaded sends graft.uploaded to a pin-first write, retrying only a request the
// server did not answer: a signal waits in the workflow until it waits for its upload.
func (r *rig) sendUploaded(run sdkclient.WorkflowRun) {
	for r.ctx.Err() == nil {
		var unavailable *serviceerror.Unavailable
		err := r.tc.SignalWorkflow(r.ctx, run.GetID(), run.GetRunID(), workflows.UploadedSignalName, workflows.UploadedRequest{})
		if !errors.As(err, &unavailable) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// holdEffect keeps the kind's effect in flight: puts are held (Hold), cleanup's deletes
// delayed. stop ends the fault for new requests; release lets held puts land (or fail).
func (r *rig) holdEffect(k matrixKind) (stop, release func()) {
	rule := k.effect(r)
	if k.wf == workflows.CleanupName {
		rule.Mode, rule.Delay = faults.Delay, 4*time.Second
		return r.store.Add(rule), func() {}
	}
	rule.Mode = faults.Hold
	return r.store.Add(rule), func() {
		for _, h := range r.store.Held() {
			_, _ = h.Release(r.ctx)
		}
	}
}

// waitInFlight waits until the operation's effect is in flight: the kernel recorded it
// in doubt, or (init, cleanup) the effect was sent.
func (r *rig) waitInFlight(t *testing.T, k matrixKind, opID string) {
	t.Helper()
	rule := k.effect(r)
	r.waitFor("the effect in flight", 2*time.Minute, func() bool {
		if k.kernel {
			op, err := r.cat.OperationGet(r.ctx, catalog.OperationGetParams{ID: opID})
			return err == nil && op.State == catalog.OperationInDoubt
		}
		return r.store.CountMatching(rule).Attempted > 0
	})
}

// waitStalledInChild waits until a child worker is stalled in the effect: the kernel
// recorded the write as pending just before sending it (init and cleanup: a moment after
// their ledger row exists).
func (r *rig) waitStalledInChild(t *testing.T, k matrixKind, opID string) {
	t.Helper()
	r.waitFor("the child stalled in the effect", 2*time.Minute, func() bool {
		op, err := r.cat.OperationGet(r.ctx, catalog.OperationGetParams{ID: opID})
		if err != nil {
			return false
		}
		return !k.kernel || len(op.Pending) > 0
	})
	time.Sleep(2 * time.Second)
}

// childWorker runs a worker in a process of its own whose writes under prefix stall.
func (r *rig) childWorker(t *testing.T, prefix string) *exec.Cmd {
	t.Helper()
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), childWorkerEnv+"=1",
		"GRAFT_CHILD_S3_ENDPOINT="+r.s3cfg.Endpoint, "GRAFT_CHILD_S3_BUCKET="+r.s3cfg.Bucket,
		"GRAFT_CHILD_S3_ACCESS="+r.s3cfg.AccessKeyID, "GRAFT_CHILD_S3_SECRET="+r.s3cfg.SecretAccessKey,
		"GRAFT_CHILD_STALL_PREFIX="+prefix, "GRAFT_CHILD_DB_SCHEMA="+r.cat.Schema(),
		"GRAFT_CHILD_TEMPORAL="+testenvTemporal(t), "GRAFT_CHILD_TASK_QUEUE="+r.taskQueue)
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatalf("start child worker: %v", err)
	}
	t.Cleanup(func() {
		_ = child.Process.Kill()
		_ = child.Wait()
	})
	return child
}

// wantEnded waits for the workflow's end and fails unless it carries a definitive outcome.
func (r *rig) wantEnded(t *testing.T, run sdkclient.WorkflowRun, k matrixKind) outcome.Outcome {
	t.Helper()
	res := k.result()
	ctx, cancel := context.WithTimeout(r.ctx, 3*time.Minute)
	defer cancel()
	if err := endOfCtx(ctx, r, run, res); err != nil {
		t.Fatalf("%s: %v", run.GetID(), err)
	}
	out := outcomeOf(res)
	if !out.Valid() {
		t.Fatalf("%s ended with %q (%+v), want a definitive outcome", run.GetID(), out, res)
	}
	return out
}

// wantSuccess waits for the workflow's end and fails unless it is one of k's successes.
func (r *rig) wantSuccess(t *testing.T, k matrixKind, run sdkclient.WorkflowRun) {
	t.Helper()
	out := r.wantEnded(t, run, k)
	for _, s := range k.success {
		if out == s {
			return
		}
	}
	t.Fatalf("%s ended %s, want one of %v", run.GetID(), out, k.success)
}

// wantClosed waits until the workflow has closed, whatever its status.
func (r *rig) wantClosed(t *testing.T, run sdkclient.WorkflowRun) {
	t.Helper()
	r.waitFor("the workflow closed", 3*time.Minute, func() bool {
		d, err := r.tc.DescribeWorkflowExecution(r.ctx, run.GetID(), run.GetRunID())
		return err == nil && d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	})
}

// wantFinished fails unless the operation's ledger row, if the operation recorded one,
// is finished (cleanup's, once a later cleanup adopted it).
func (r *rig) wantFinished(t *testing.T, opID string, k matrixKind) {
	t.Helper()
	r.settleClosed(t, k)
	op, err := r.cat.OperationGet(r.ctx, catalog.OperationGetParams{ID: opID})
	if err != nil {
		return // ended before anything was recorded
	}
	if op.State != catalog.OperationDone {
		t.Fatalf("operation %s is %s (phase %s, waiting %q) after its workflow closed and the reconciler ran", opID, op.State, op.Phase, op.Waiting)
	}
}

// settleClosed settles operations whose workflow closed: the reconciler; for cleanup, a
// later cleanup run, which adopts the orphaned run.
func (r *rig) settleClosed(t *testing.T, k matrixKind) {
	t.Helper()
	if k.wf == workflows.CleanupName {
		res, err := r.gc.Cleanup(r.ctx, client.CleanupRequest{Graph: r.graph, KeepNewest: 1, Mode: workflows.CleanupModeSweep, GuardWindow: noGuard()})
		if err != nil && res.Outcome != outcome.Conflict {
			t.Fatalf("cleanup after the case: %+v, %v", res, err)
		}
		return
	}
	r.reconcile()
}

// endOfCtx is endOf with a deadline.
func endOfCtx(ctx context.Context, r *rig, run sdkclient.WorkflowRun, res any) error {
	done := make(chan error, 1)
	go func() { done <- endOf(r, run, res) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("no end within the deadline: %w", ctx.Err())
	}
}

// outcomeOf reads the outcome of any graft result (a pointer to a struct with an Outcome).
func outcomeOf(res any) outcome.Outcome {
	if v := reflect.ValueOf(res).Elem().FieldByName("Outcome"); v.IsValid() {
		return v.Interface().(outcome.Outcome)
	}
	return ""
}
