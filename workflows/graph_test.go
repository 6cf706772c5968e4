package workflows_test

import (
	"errors"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	sdkclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/internal/testenv"
	"github.com/graftworks/graft/internal/tools"
	"github.com/graftworks/graft/storage/faults"
	"github.com/graftworks/graft/workflows"
)

func TestInitGraph_Twice_SecondFindsItsOwnGraph(t *testing.T) {
	r := runningRig(t)
	g := randomName("n")

	first, err := r.gc.InitGraph(r.ctx, client.InitGraphRequest{Graph: g, Author: "ana"})
	if err != nil {
		t.Fatalf("init: %v", err)
	}
	if first.Outcome != outcome.Done || !first.Created || first.Main == "" || first.Root == "" {
		t.Fatalf("first init %+v, want done and created with main and root", first)
	}
	recordHistory(t, r, client.InitGraphWorkflowID(g), "", "initgraph_created")
	second, err := r.gc.InitGraph(r.ctx, client.InitGraphRequest{Graph: g, Author: "ana"})
	if err != nil {
		t.Fatalf("init again: %v", err)
	}
	if second.Outcome != outcome.Done || second.Created || second.Main != first.Main || second.Root != first.Root || second.OpID != first.OpID {
		t.Fatalf("second init %+v, want done, not created, same main, root and operation as %+v", second, first)
	}

	recordHistory(t, r, client.InitGraphWorkflowID(g), "", "initgraph_found_own")
	rec, err := graph.ReadGraph(r.ctx, r.inner, g)
	if err != nil || rec.Op != first.OpID {
		t.Fatalf("graph record %+v, %v; want one written by %s", rec, err, first.OpID)
	}
	gr, err := graph.Open(r.inner, g)
	if err != nil {
		t.Fatal(err)
	}
	main, err := gr.BranchHead(r.ctx, "main")
	if err != nil || main.Native != first.Main {
		t.Fatalf("main resolves to %+v, %v; want %s", main, err, first.Main)
	}
	if root := main.Commit; root.ID.String() != first.Root || root.Author != "ana" {
		t.Fatalf("main's head %+v; want root %s by ana", root, first.Root)
	}
	if inc, err := r.cat.IncarnationGetByNative(r.ctx, catalog.IncarnationGetByNativeParams{Graph: g, Native: first.Main}); err != nil || inc.State != catalog.IncarnationLive {
		t.Fatalf("witness of main %+v, %v; want live", inc, err)
	}
	if op := r.operation(first.OpID); op.Kind != catalog.OpInitGraph || op.State != catalog.OperationDone || op.Outcome != catalog.OutcomeDone {
		t.Fatalf("operation %+v, want init_graph done/done", op)
	}
	if _, err := r.cat.GraphGet(r.ctx, catalog.GraphGetParams{Name: g}); err != nil {
		t.Fatalf("graph not registered in the ledger: %v", err)
	}
}

func TestInitGraph_GraphExistsWithOtherBytes_IsConflictAndWritesNothing(t *testing.T) {
	r := runningRig(t)
	before := r.store.Count(faults.OpPut).Attempted
	res, err := r.gc.InitGraph(r.ctx, client.InitGraphRequest{Graph: r.graph})
	if !errors.Is(err, outcome.ErrConflict) || res.Outcome != outcome.Conflict {
		t.Fatalf("init over an existing graph: %+v, %v; want conflict", res, err)
	}
	if n := r.store.Count(faults.OpPut).Attempted - before; n != 0 {
		t.Fatalf("%d puts sent, want none", n)
	}
	if live := r.liveNatives("main"); len(live) != 1 {
		t.Fatalf("main has live refs %v, want the original one", live)
	}
	if op := r.operation(res.OpID); op.State != catalog.OperationDone || op.Outcome != catalog.OutcomeConflict {
		t.Fatalf("operation %+v, want done/conflict", op)
	}
}

func TestInitGraph_InvalidName_IsInvalidBeforeAnyRequest(t *testing.T) {
	r := runningRig(t)
	if _, err := r.gc.InitGraph(r.ctx, client.InitGraphRequest{Graph: "Not A Name"}); !errors.Is(err, outcome.ErrInvalid) {
		t.Fatalf("client: %v, want invalid", err)
	}
	// A service in another language skips the Go client's checks: the workflow refuses too.
	run, err := r.tc.ExecuteWorkflow(r.ctx, sdkclient.StartWorkflowOptions{ID: randomName("bad-init-"), TaskQueue: r.taskQueue},
		workflows.InitGraphName, workflows.InitGraphInput{Graph: "Not A Name"})
	if err != nil {
		t.Fatal(err)
	}
	// A non-success outcome fails the workflow with an ApplicationError whose type is
	// the outcome and whose first detail is the result (docs/workflows.md).
	var res workflows.InitGraphResult
	err = run.Get(r.ctx, &res)
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.Type() != string(outcome.Invalid) || app.NonRetryable() != true || app.Details(&res) != nil || res.Outcome != outcome.Invalid {
		t.Fatalf("workflow: %+v, %v; want a failure of type invalid carrying the result", res, err)
	}
}

func TestOps_ListShowWait(t *testing.T) {
	r := runningRig(t)
	ops := r.ops(r.gc)
	g := randomName("n")
	init, err := r.gc.InitGraph(r.ctx, client.InitGraphRequest{Graph: g})
	if err != nil {
		t.Fatal(err)
	}

	// A write whose commit put is slow: Wait returns only once it is done.
	r.store.Add(faults.Rule{Op: faults.OpPut, KeyPrefix: r.graph + "/trees/", Mode: faults.Delay, Delay: time.Second, Times: 1})
	h, err := r.gc.StartWriteTable(r.ctx, r.inner, client.WriteTableRequest{
		Graph: r.graph, Branch: "main", Table: "u", Files: writeFiles(t, "slow"), IdempotencyKey: randomName("wait-"),
	})
	if err != nil {
		t.Fatal(err)
	}
	r.waitFor("the write's ledger row", 30*time.Second, func() bool {
		_, err := ops.Show(r.ctx, h.OpID)
		return err == nil
	})
	op, err := ops.Wait(r.ctx, h.OpID)
	if err != nil || op.State != client.OperationDone || op.Outcome != outcome.Done || op.WorkflowID != h.WorkflowID {
		t.Fatalf("wait: %+v, %v; want the write done/done", op, err)
	}

	all, err := ops.List(r.ctx, client.OpsFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, o := range all {
		ids = append(ids, o.ID)
	}
	if !slices.Contains(ids, init.OpID) || !slices.Contains(ids, h.OpID) {
		t.Fatalf("listed %v, want %s and %s", ids, init.OpID, h.OpID)
	}
	writes, err := ops.List(r.ctx, client.OpsFilter{Graph: r.graph, Kind: "write_table", State: "done", Limit: 10})
	if err != nil || len(writes) != 1 || writes[0].ID != h.OpID {
		t.Fatalf("filtered list %+v, %v; want only the write", writes, err)
	}
	if _, err := ops.List(r.ctx, client.OpsFilter{Kind: "bake_bread"}); !errors.Is(err, outcome.ErrInvalid) {
		t.Fatalf("unknown kind: %v, want invalid", err)
	}
	shown, err := ops.Show(r.ctx, init.OpID)
	if err != nil || shown.Kind != string(catalog.OpInitGraph) || shown.Graph != g {
		t.Fatalf("show: %+v, %v", shown, err)
	}
	if _, err := ops.Show(r.ctx, "no-such-op"); !errors.Is(err, outcome.ErrNotFound) {
		t.Fatalf("show unknown: %v, want not_found", err)
	}
	// Waiting on a finished operation returns at once.
	if again, err := ops.Wait(r.ctx, init.OpID); err != nil || again.Outcome != outcome.Done {
		t.Fatalf("wait on finished: %+v, %v", again, err)
	}
}

// TestInitGraph_StartedByTheTemporalCLI_AsDocumented starts graft.InitGraph
// the way docs/workflows.md shows a non-Go service doing it: by name, with
// a JSON input, through the Temporal CLI.
func TestInitGraph_StartedByTheTemporalCLI_AsDocumented(t *testing.T) {
	r := runningRig(t)
	bin, err := tools.Temporal.Ensure(r.ctx)
	if err != nil {
		t.Fatal(err)
	}
	ts := testenv.Temporal(t)
	g := randomName("cli")
	id := client.InitGraphWorkflowID(g)
	out, err := exec.CommandContext(r.ctx, bin, "workflow", "start", "--address", ts.HostPort, "--namespace", ts.Namespace,
		"--task-queue", r.taskQueue, "--type", "graft.InitGraph", "--workflow-id", id,
		"--id-conflict-policy", "UseExisting", "--id-reuse-policy", "AllowDuplicate",
		"--search-attribute", `GraftGraph="`+g+`"`, "--search-attribute", `GraftOperation="init_graph"`,
		"--input", `{"graph": "`+g+`"}`).CombinedOutput()
	if err != nil {
		t.Fatalf("temporal workflow start: %v\n%s", err, out)
	}
	var res workflows.InitGraphResult
	if err := r.tc.GetWorkflow(r.ctx, id, "").Get(r.ctx, &res); err != nil {
		t.Fatal(err)
	}
	if res.Outcome != outcome.Done || !res.Created || res.OpID != id || res.Graph != g {
		t.Fatalf("result %+v, want done and created under op id %s", res, id)
	}
	// The Go client's default init of the same graph is the same operation.
	again, err := r.gc.InitGraph(r.ctx, client.InitGraphRequest{Graph: g})
	if err != nil || again.Created || again.Main != res.Main {
		t.Fatalf("client init after the CLI's: %+v, %v; want done, not created, same main", again, err)
	}
}

// TestGraftWorkflows_ReplayRecordedHistories replays histories recorded from
// real runs of InitGraph, WriteTable and RepairBranch against today's code:
// a change that would break a run in flight across a worker deploy fails here.
func TestGraftWorkflows_ReplayRecordedHistories(t *testing.T) {
	for _, pattern := range []string{"initgraph_*.json", "writetable_*.json", "repairbranch_*.json"} {
		files, err := filepath.Glob(filepath.Join("testdata", pattern))
		if err != nil {
			t.Fatal(err)
		}
		if len(files) == 0 {
			t.Fatalf("no recorded history matches testdata/%s (record with %s=1)", pattern, recordEnv)
		}
		for _, f := range files {
			t.Run(filepath.Base(f), func(t *testing.T) {
				replayer := worker.NewWorkflowReplayer()
				workflows.Register(replayer)
				if err := replayer.ReplayWorkflowHistoryFromJSONFile(quietLogger(), f); err != nil {
					t.Fatalf("replay %s: %v", f, err)
				}
			})
		}
	}
}

// headOf reads the head commit of branch straight from the bucket.
func (r *rig) headOf(branch string) graph.CommitView {
	r.t.Helper()
	b, err := graph.ResolveBranch(r.ctx, r.inner, r.graph, branch)
	if err != nil {
		r.t.Fatalf("resolve %s: %v", branch, err)
	}
	return r.view(b.Ref.Head)
}
