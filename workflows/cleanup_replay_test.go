package workflows_test

import (
	"path/filepath"
	"testing"

	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/graftworks/graft/workflows"
)

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
