package workflows_test

import (
	"errors"
	"testing"
	"time"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/workflows"
)

// TestCleanupSchedule_Lifecycle: a graph's cleanup schedule is created, bootstrapped
// again (which updates it instead of failing), described, paused and resumed, triggered
// (the run it starts cleans the graph), and deleted.
func TestCleanupSchedule_Lifecycle(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.startWorker()
	old := r.main
	r.commitAt("t", "v2", time.Now())
	t.Cleanup(func() { _ = r.gc.CleanupScheduleDelete(r.ctx, r.graph) })

	req := client.CleanupScheduleRequest{Graph: r.graph, Every: time.Hour, KeepNewest: 2, Mode: workflows.CleanupModeDryRun,
		GuardWindow: noGuard(), Paused: true}
	if err := r.gc.CleanupScheduleCreate(r.ctx, req); err != nil {
		t.Fatalf("create schedule: %v", err)
	}
	req.KeepNewest, req.Mode, req.Cron, req.Paused = 1, workflows.CleanupModeSweep, "0 3 * * *", false
	if err := r.gc.CleanupScheduleCreate(r.ctx, req); err != nil {
		t.Fatalf("bootstrap the existing schedule again: %v", err)
	}
	info, err := r.gc.CleanupScheduleDescribe(r.ctx, r.graph)
	if err != nil {
		t.Fatalf("describe: %v", err)
	}
	if info.ID != client.CleanupScheduleID(r.graph) || info.Every != time.Hour || info.Cron != "0 3 * * *" ||
		info.KeepNewest != 1 || info.Mode != workflows.CleanupModeSweep || info.Paused ||
		info.GuardWindow == nil || *info.GuardWindow != 0 || len(info.NextRuns) == 0 {
		t.Fatalf("described %+v, want the updated schedule", info)
	}

	if err := r.gc.CleanupSchedulePause(r.ctx, r.graph, true, "maintenance"); err != nil {
		t.Fatalf("pause: %v", err)
	}
	if info, err = r.gc.CleanupScheduleDescribe(r.ctx, r.graph); err != nil || !info.Paused || info.Note != "maintenance" {
		t.Fatalf("after pause: %+v, %v", info, err)
	}
	if err := r.gc.CleanupSchedulePause(r.ctx, r.graph, false, "back"); err != nil {
		t.Fatalf("unpause: %v", err)
	}

	if err := r.gc.CleanupScheduleTrigger(r.ctx, r.graph); err != nil {
		t.Fatalf("trigger: %v", err)
	}
	var run catalog.CleanupRun
	r.waitFor("the triggered cleanup to finish", time.Minute, func() bool {
		runs, err := r.cat.CleanupRunList(r.ctx, catalog.CleanupRunListParams{Graph: r.graph})
		if err != nil || len(runs) == 0 || runs[0].State != catalog.CleanupDone {
			return false
		}
		run = runs[0]
		return true
	})
	if run.Mode != catalog.CleanupSweep {
		t.Fatalf("triggered run %+v, want a sweep", run)
	}
	r.wantGone("the old commit, outside the scheduled policy", r.commitKey(old))
	r.waitFor("the schedule to record its run", 30*time.Second, func() bool {
		info, err = r.gc.CleanupScheduleDescribe(r.ctx, r.graph)
		return err == nil && len(info.RecentRuns) == 1 && info.RecentRuns[0].WorkflowID != ""
	})

	if err := r.gc.CleanupScheduleDelete(r.ctx, r.graph); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := r.gc.CleanupScheduleDescribe(r.ctx, r.graph); !errors.Is(err, outcome.ErrNotFound) {
		t.Fatalf("describe after delete: %v, want not_found", err)
	}
	if err := r.gc.CleanupScheduleCreate(r.ctx, client.CleanupScheduleRequest{Graph: r.graph, KeepNewest: 1}); !errors.Is(err, outcome.ErrInvalid) {
		t.Fatalf("schedule without an interval or cron: %v, want invalid", err)
	}
	checkInvariants(t, r)
}
