package workflows_test

import (
	"testing"
	"time"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/storage/faults"
	"github.com/graftworks/graft/workflows"
)

// A terminated upgrade is finished by the reconciler as its workflow would have finished
// it: the upgrade's one step is resumable and idempotent, so the pass runs it to its end
// and records done — not an end that leaves the graph half upgraded and the row failed.
func TestReconcile_UpgradeTerminatedMidway_ReconcilerFinishesIt(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.startWorker()
	// The terminated run's swap of main's ref stalls (once); the reconciler's passes.
	r.store.Add(faults.Rule{Op: faults.OpPut, KeyPrefix: format.BranchRefPrefix(r.graph, "main"), Mode: faults.Delay, Delay: 10 * time.Minute, Times: 1})
	opID := randomName("upgrade-")
	run := r.startOp(workflows.UpgradeGraphName, workflows.UpgradeGraphInput{Graph: r.graph, OpID: opID})
	r.waitFor("the upgrade to write the format-2 graph record", time.Minute, func() bool {
		_, version, err := graph.ReadGraphAny(r.ctx, r.store, r.graph)
		return err == nil && version == format.Version2
	})
	r.terminate(run)
	if op := r.operation(opID); op.State == catalog.OperationDone {
		t.Fatalf("the upgrade finished before it was terminated: %+v", op)
	}
	res := r.reconcile()
	var settled *workflows.ReconciledOp
	for i := range res.Settled {
		if res.Settled[i].OpID == opID {
			settled = &res.Settled[i]
		}
	}
	if settled == nil || settled.Outcome != outcome.Done || settled.Parked {
		t.Fatalf("reconcile %+v, want %s settled done", res, opID)
	}
	if op := r.operation(opID); op.State != catalog.OperationDone || op.Outcome != catalog.OutcomeDone {
		t.Fatalf("ledger %s: %s %s, want done", opID, op.State, op.Outcome)
	}
	rec, version, err := graph.ReadGraphAny(r.ctx, r.store, r.graph)
	if err != nil || version != format.Version2 || rec.UpgradeOp != opID {
		t.Fatalf("graph record %+v: format %d, %v; want format 2 upgraded by %s", rec, version, err, opID)
	}
}
