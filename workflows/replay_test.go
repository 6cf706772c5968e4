package workflows_test

import (
	"os"
	"path/filepath"
	"testing"

	"go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/graftworks/graft/workflows"
)

// recordEnv, when set, makes the real-stack tests write the histories of
// chosen runs to testdata/, for the replay test below. Record again only on
// purpose: a change that makes an old history fail to replay would break
// every workflow in flight across a worker deploy.
const recordEnv = "GRAFT_RECORD_HISTORY"

// recordHistory saves the run's history as testdata/<name>.json when recording.
func recordHistory(t *testing.T, r *rig, workflowID, runID, name string) {
	t.Helper()
	if os.Getenv(recordEnv) == "" {
		return
	}
	iter := r.tc.GetWorkflowHistory(r.ctx, workflowID, runID, false, 0)
	var h history.History
	for iter.HasNext() {
		ev, err := iter.Next()
		if err != nil {
			t.Fatalf("read history: %v", err)
		}
		h.Events = append(h.Events, ev)
	}
	b, err := protojson.MarshalOptions{Indent: "  "}.Marshal(&h)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join("testdata", name+".json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("recorded %s (%d events)", name, len(h.Events))
}

// TestCreateBranch_ReplaysRecordedHistories replays histories recorded from
// real runs (created after a lost acknowledgement; in doubt then settled;
// abandoned and fenced) against today's workflow code: any change that would
// break a workflow in flight fails here.
func TestCreateBranch_ReplaysRecordedHistories(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "createbranch_*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 4 {
		t.Fatalf("found %d recorded histories in testdata/, want 4 (record with %s=1)", len(files), recordEnv)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			replayer := worker.NewWorkflowReplayer()
			replayer.RegisterWorkflowWithOptions(workflows.CreateBranch, workflow.RegisterOptions{Name: workflows.CreateBranchName})
			if err := replayer.ReplayWorkflowHistoryFromJSONFile(quietLogger(), f); err != nil {
				t.Fatalf("replay %s: %v", f, err)
			}
		})
	}
}

// TestKernel_ReplaysRecordedHistories replays histories recorded from the kernel's own
// paths — a parked fence, an operator's abandon of a commit, a cancelled delete completing
// its swap, an in-doubt commit found stale, a reconcile pass, a pin-first write done and
// one abandoned at its upload deadline — against today's code.
func TestKernel_ReplaysRecordedHistories(t *testing.T) {
	for _, name := range []string{"createbranch_parked_then_fenced", "writetable_abandoned_fenced", "deletebranch_cancelled_swap_completed",
		"writetable_in_doubt_stale_replanned", "reconcile_settled_terminated_create", "writetable_pinfirst_done",
		"writetable_upload_deadline_abandoned"} {
		t.Run(name, func(t *testing.T) {
			f := filepath.Join("testdata", name+".json")
			if _, err := os.Stat(f); err != nil {
				t.Fatalf("no recorded history %s (record with %s=1): %v", f, recordEnv, err)
			}
			replayer := worker.NewWorkflowReplayer()
			workflows.Register(replayer)
			if err := replayer.ReplayWorkflowHistoryFromJSONFile(quietLogger(), f); err != nil {
				t.Fatalf("replay %s: %v", f, err)
			}
		})
	}
}

// TestCleanup_ReplaysRecordedHistories replays cleanup histories recorded from real runs
// (each policy's mark and sweep, a dry run, a sweep that continued as new, a run that
// first finished an orphaned run) against today's workflow code: a change that would
// break a cleanup in flight fails here. Record them with GRAFT_RECORD_HISTORY=1.
func TestCleanup_ReplaysRecordedHistories(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "cleanup_*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 7 {
		t.Fatalf("found %d recorded cleanup histories in testdata/, want 7 (record with %s=1)", len(files), recordEnv)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			replayer := worker.NewWorkflowReplayer()
			replayer.RegisterWorkflowWithOptions(workflows.Cleanup, workflow.RegisterOptions{Name: workflows.CleanupName})
			if err := replayer.ReplayWorkflowHistoryFromJSONFile(quietLogger(), f); err != nil {
				t.Fatalf("replay %s: %v", f, err)
			}
		})
	}
}
