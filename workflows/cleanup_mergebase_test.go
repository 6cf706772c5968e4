package workflows_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/workflows"
)

// createFrom creates branch logical from commit from through the engine and returns
// its head.
func (r *rig) createFrom(logical string, from graph.CommitView) graph.CommitView {
	r.t.Helper()
	if res, err := r.gc.CreateBranch(r.ctx, client.CreateBranchRequest{Graph: r.graph, Branch: logical, FromCommit: from.ID.String()}); err != nil {
		r.t.Fatalf("create %s from %s: %+v, %v", logical, from.ID, res, err)
	}
	return r.headOf(logical)
}

// reportedMergeBases reads kept.merge_base from the run's report in the ledger.
func (r *rig) reportedMergeBases(runID string) int64 {
	r.t.Helper()
	run, err := r.cat.CleanupRunGet(r.ctx, catalog.CleanupRunGetParams{ID: runID})
	if err != nil {
		r.t.Fatalf("cleanup run %s: %v", runID, err)
	}
	var report struct {
		Kept map[string]int64 `json:"kept"`
	}
	if err := json.Unmarshal(run.Report, &report); err != nil {
		r.t.Fatalf("decode report %s: %v", run.Report, err)
	}
	n, ok := report.Kept["merge_base"]
	if !ok {
		r.t.Fatalf("report %s has no kept.merge_base", run.Report)
	}
	return n
}

// TestCleanup_FeatureForkedFromOldMain_KeepsForkPoint_MergeSucceeds: a long-lived
// feature forked from a main commit that later falls outside main's keep-1 window. The
// sweep keeps that fork point — the merge base of feature and main — as a merge_base
// root, with the version it pins, and reclaims the rest of both histories; merging
// feature into main then succeeds from it.
func TestCleanup_FeatureForkedFromOldMain_KeepsForkPoint_MergeSucceeds(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.startWorker()
	m1 := r.main
	forkPoint := r.write(&r.main, "t", "t2")
	r.write(&r.main, "b", "b1")
	feat := r.createFrom("feature", forkPoint)
	featFork := feat
	r.write(&feat, "a", "a1")
	r.write(&feat, "a", "a2")
	middle := r.write(&r.main, "b", "b2")
	r.write(&r.main, "b", "b3")

	res := r.cleanup(client.CleanupRequest{KeepNewest: 1, Mode: workflows.CleanupModeSweep, GuardWindow: noGuard()})
	if res.Kept.MergeBase != 1 || res.Kept.Head != 2 {
		t.Fatalf("kept %+v: want 2 heads and the fork point as the one merge_base", res.Kept)
	}
	if n := r.reportedMergeBases(res.RunID); n != 1 {
		t.Fatalf("ledger report counts %d merge_base commits, want 1", n)
	}
	r.wantKept("fork point of feature, its merge base with main", forkPoint, "t")
	// Everything else outside the window went: the policy still applies.
	r.wantGone("main and feature outside every window", r.commitKey(m1), r.commitKey(middle), r.commitKey(featFork))
	checkInvariants(t, r)

	merged, err := r.merge(client.MergeRequest{Source: "feature"})
	if err != nil || merged.Outcome != workflows.OutcomeMerged {
		t.Fatalf("merge after cleanup: %+v, %v; want merged", merged, err)
	}
	if !slices.Equal(merged.Bases, []string{forkPoint.ID.String()}) || actions(merged)["a"] != "adopt" || actions(merged)["b"] != "keep" {
		t.Fatalf("merge %+v: want base %s, a adopted and b kept", merged, forkPoint.ID)
	}
	head := r.headOf("main")
	if head.Pins["a"] != feat.Pins["a"] || head.Pins["b"] != r.main.Pins["b"] || head.Pins["t"] != forkPoint.Pins["t"] {
		t.Fatalf("main's pins after the merge %v: want feature's a, main's b and the fork point's t", head.Pins)
	}
	r.wantOperation(merged.OpID, catalog.OpMerge, workflows.OutcomeMerged)
	checkInvariants(t, r)
}

// TestCleanup_BaseInDeletedBranch_KeptAndNextCommitOfItReclaimed: a branch x merged into
// main at x-1 and into feature at x-2, then deleted. Merging feature into main needs two
// candidates — main's commit feature's lineage names and x-1, the lower of the two heads'
// entries for x, which is the merge base — and nothing else of x. The sweep keeps both
// (x-1 although its tree is retired) and reclaims x-2, which no merge of the live
// branches can read; the merge then succeeds from x-1.
func TestCleanup_BaseInDeletedBranch_KeptAndNextCommitOfItReclaimed(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.startWorker()
	featFork := r.write(&r.main, "t", "t2")
	feat := r.createFrom("feature", r.main)
	r.write(&feat, "a", "a1")
	m3 := r.write(&r.main, "b", "b1")
	x := r.createFrom("x", m3)
	x1 := r.write(&x, "x", "x1")
	if res, err := r.merge(client.MergeRequest{Source: "x"}); err != nil || res.Outcome != workflows.OutcomeAdopted {
		t.Fatalf("merge x into main: %+v, %v; want adopted", res, err)
	}
	x2 := r.write(&x, "y", "y1")
	if res, err := r.merge(client.MergeRequest{Source: "x", Target: "feature"}); err != nil || res.Outcome != workflows.OutcomeMerged {
		t.Fatalf("merge x into feature: %+v, %v; want merged", res, err)
	}
	if res, err := r.gc.DeleteBranch(r.ctx, client.DeleteBranchRequest{Graph: r.graph, Branch: "x"}); err != nil || res.Outcome != workflows.OutcomeDeleted {
		t.Fatalf("delete x: %+v, %v", res, err)
	}
	r.main = r.headOf("main")
	r.write(&r.main, "b", "b2")
	r.write(&r.main, "b", "b3")

	res := r.cleanup(client.CleanupRequest{KeepNewest: 1, Mode: workflows.CleanupModeSweep, GuardWindow: noGuard()})
	// The candidates of the pairs of heads, and feature's fork, which the merge-base search
	// reads to rule candidates out (docs/cleanup.md, *Merge bases*).
	if res.Kept.MergeBase != 3 || r.reportedMergeBases(res.RunID) != 3 {
		t.Fatalf("kept %+v: want main's seq %d, x-1 and feature's fork as the merge_base commits", res.Kept, m3.ID.Seq)
	}
	r.wantKept("feature's fork", featFork, "t")
	r.wantKept("main's commit feature's lineage names", m3, "b")
	r.wantKept("x-1, a merge-base candidate in a deleted branch", x1, "x")
	r.wantGone("x's commit only feature's lineage names", r.commitKey(x2))
	checkInvariants(t, r)

	merged, err := r.merge(client.MergeRequest{Source: "feature"})
	if err != nil || merged.Outcome != workflows.OutcomeMerged {
		t.Fatalf("merge after cleanup: %+v, %v; want merged", merged, err)
	}
	if !slices.Equal(merged.Bases, []string{x1.ID.String()}) {
		t.Fatalf("merge bases %v, want x-1 %s", merged.Bases, x1.ID)
	}
	if a := actions(merged); a["a"] != "adopt" || a["y"] != "adopt" || a["b"] != "keep" {
		t.Fatalf("tables %v: want a and y adopted, b kept", a)
	}
	checkInvariants(t, r)
}
