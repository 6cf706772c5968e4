package workflows_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	enumspb "go.temporal.io/api/enums/v1"
	sdkclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/internal/oracle"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/faults"
	"github.com/graftworks/graft/workflows"
)

// Helpers of the kernel's real-stack tests: start any operation workflow by name, as a
// service in another language would, and read its end in either shape.

// startOp starts the workflow registered as name with input in, under a fresh workflow id.
func (r *rig) startOp(name string, in any) sdkclient.WorkflowRun {
	r.t.Helper()
	run, err := r.tc.ExecuteWorkflow(r.ctx, sdkclient.StartWorkflowOptions{ID: randomName("op-"), TaskQueue: r.taskQueue}, name, in)
	if err != nil {
		r.t.Fatalf("start %s: %v", name, err)
	}
	return run
}

// endOf waits for run's end and decodes its result into res: from the completion, or —
// for a definitive outcome that is not a success — from the ApplicationError the workflow
// failed with, whose type must be the outcome (docs/workflows.md). Other failures are
// returned.
func endOf(r *rig, run sdkclient.WorkflowRun, res any) error {
	r.t.Helper()
	err := run.Get(r.ctx, res)
	var app *temporal.ApplicationError
	if err == nil || !errors.As(err, &app) || !outcome.Outcome(app.Type()).Valid() {
		return err
	}
	if derr := app.Details(res); derr != nil {
		r.t.Fatalf("decode the result of %s from its failure: %v", run.GetID(), derr)
	}
	return nil
}

// upload writes one data object of table straight into the bucket, as the client does
// before a write, and returns its entry.
func (r *rig) upload(table, body string) workflows.TableObject {
	r.t.Helper()
	id := ulid.Make()
	if _, err := r.inner.Put(r.ctx, format.ObjectKey(r.graph, table, id), []byte(body), storage.PutOptions{IfNoneMatch: true}); err != nil {
		r.t.Fatalf("upload: %v", err)
	}
	sum := sha256.Sum256([]byte(body))
	return workflows.TableObject{ID: id.String(), Size: int64(len(body)), SHA256: hex.EncodeToString(sum[:])}
}

// waitOp waits until the operation's ledger row satisfies cond.
func (r *rig) waitOp(opID, what string, cond func(catalog.Operation) bool) catalog.Operation {
	r.t.Helper()
	var op catalog.Operation
	r.waitFor(what, 2*time.Minute, func() bool {
		var err error
		op, err = r.cat.OperationGet(r.ctx, catalog.OperationGetParams{ID: opID})
		return err == nil && cond(op)
	})
	return op
}

// inDoubt reports a row recorded in doubt.
func inDoubt(op catalog.Operation) bool { return op.State == catalog.OperationInDoubt }

// done reports a finished row.
func done(op catalog.Operation) bool { return op.State == catalog.OperationDone }

// reconcile runs one pass of graft.Reconcile through Temporal, as the schedule or `graft
// op reconcile` would, limited to the rig's graph.
func (r *rig) reconcile() workflows.ReconcileResult {
	r.t.Helper()
	run, err := r.tc.ExecuteWorkflow(r.ctx, sdkclient.StartWorkflowOptions{ID: randomName("reconcile-"), TaskQueue: r.taskQueue},
		workflows.ReconcileName, workflows.ReconcileInput{Graph: r.graph})
	if err != nil {
		r.t.Fatalf("start reconcile: %v", err)
	}
	r.lastReconcile = run.GetID()
	var res workflows.ReconcileResult
	if err := run.Get(r.ctx, &res); err != nil {
		r.t.Fatalf("reconcile: %v", err)
	}
	return res
}

// terminate terminates a workflow, as an operator's `temporal workflow terminate` would.
func (r *rig) terminate(run sdkclient.WorkflowRun) {
	r.t.Helper()
	if err := r.tc.TerminateWorkflow(r.ctx, run.GetID(), run.GetRunID(), "test terminates it"); err != nil {
		r.t.Fatalf("terminate %s: %v", run.GetID(), err)
	}
	r.waitFor("the workflow to close", time.Minute, func() bool {
		d, err := r.tc.DescribeWorkflowExecution(r.ctx, run.GetID(), run.GetRunID())
		return err == nil && d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	})
}

// headOfTree reads the head commit of tree straight from the bucket.
func (r *rig) headOfTree(tree ulid.ULID) graph.CommitView {
	r.t.Helper()
	var head format.CommitID
	if err := storage.ListAll(r.ctx, r.inner, format.BranchRefsPrefix(r.graph), func(o storage.ObjectInfo) error {
		obj, err := r.inner.Get(r.ctx, o.Key)
		if err != nil {
			return err
		}
		if ref, err := format.DecodeBranchRef(obj.Body); err == nil && ref.Tree == tree && !ref.Head.IsZero() {
			head = ref.Head
		}
		return nil
	}); err != nil {
		r.t.Fatalf("read refs: %v", err)
	}
	if head.IsZero() {
		r.t.Fatalf("no ref names a head of tree %s", tree)
	}
	return r.view(head)
}

// report records a commit a write reported done, for the oracle.
func (r *rig) report(branch, commit string) {
	r.reported = append(r.reported, oracle.ReportedCommit{Branch: branch, Commit: commit})
}

// pinsOf returns the pins an operation holds.
func (r *rig) pinsOf(opID string) []catalog.PinRecord {
	r.t.Helper()
	pins, err := r.cat.PinsList(r.ctx, catalog.PinsListParams{Graph: r.graph})
	if err != nil {
		r.t.Fatal(err)
	}
	var out []catalog.PinRecord
	for _, p := range pins {
		if p.OpID == opID {
			out = append(out, p)
		}
	}
	return out
}

// wantNoPuts fails the test if any put was sent since the store's counts were reset (by
// what, when named).
func (r *rig) wantNoPuts(what string) {
	r.t.Helper()
	if n := r.store.Count(faults.OpPut).Attempted; n != 0 {
		if what != "" {
			what = " by " + what
		}
		r.t.Fatalf("%d puts sent%s, want none", n, what)
	}
}

// wantMainUnmoved fails the test if main's head is not r.main.
func (r *rig) wantMainUnmoved() {
	r.t.Helper()
	if head := r.headOf("main"); head.ID != r.main.ID {
		r.t.Fatalf("main moved to %s", head.ID)
	}
}

// wantLateRefused releases the held puts, each of which must fail its precondition: what
// it would have written can never land any more.
func wantLateRefused(t testing.TB, ctx context.Context, what string, held []*faults.HeldPut) {
	t.Helper()
	for _, h := range held {
		if _, err := h.Release(ctx); !errors.Is(err, storage.ErrPreconditionFailed) {
			t.Fatalf("%s: %v; want a failed precondition", what, err)
		}
	}
}
