package workflows_test

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/faults"
	"github.com/graftworks/graft/worker"
	"github.com/graftworks/graft/workflows"
)

// TestCleanup_InDoubtCreate_KeepOne_BranchOpensAfterHeldRefLands is the review's
// regression: a create whose ref put is held (in doubt), then a cleanup keeping one
// commit with no age cutoff, then the held put lands. The branch must list and open with
// its tree intact: cleanup never reclaims a tree whose ref may still land.
func TestCleanup_InDoubtCreate_KeepOne_BranchOpensAfterHeldRefLands(t *testing.T) {
	t.Parallel()
	const branch = "feature/x"
	r := newRig(t)
	r.startWorker()
	old := r.main // pins t@v1; the create forks from it
	r.commitAt("t", "v2", time.Now())
	r.commitAt("t", "v3", time.Now())

	removeHold := r.store.Add(faults.Rule{Op: faults.OpPut, KeyPrefix: r.refPrefix(branch), Body: isLiveRef, Mode: faults.Hold})
	h, err := r.gc.StartCreateBranch(r.ctx, client.CreateBranchRequest{Graph: r.graph, Branch: branch, FromCommit: old.ID.String()})
	if err != nil {
		t.Fatalf("start create: %v", err)
	}
	inDoubt, err := h.WaitCreateBranch(r.ctx)
	if !errors.Is(err, outcome.ErrInDoubt) {
		t.Fatalf("create: %v, want in_doubt", err)
	}
	native := inDoubt.Native
	fork := r.treeCommits(native)
	if len(fork) != 1 {
		t.Fatalf("in-doubt tree holds %v, want its fork commit", fork)
	}

	res := r.cleanup(client.CleanupRequest{KeepNewest: 1, Mode: workflows.CleanupModeSweep, GuardWindow: noGuard()})
	u, ok := hasUnsettled(res, native)
	if !ok || u.State != string(catalog.IncarnationInDoubt) || u.OpID != inDoubt.OpID {
		t.Fatalf("skipped unsettled %+v, want %s (in_doubt, operation %s)", res.SkippedUnsettled, native, inDoubt.OpID)
	}
	if res.Kept.InFlightTree != 1 || res.Kept.Pin != 2 {
		// The create pins its source commit, and main's chain is kept from that seq up to
		// the head, so a walk back from the head never meets a gap (docs/format.md,
		// *Cleanup*): the source and the commit above it.
		t.Fatalf("kept %+v: want the in-flight tree's commit, the create's pinned source commit and the chain above it", res.Kept)
	}
	if res.Deleted.Keys() == 0 || res.Deleted.Keys() != res.Condemned.Keys() {
		t.Fatalf("deleted %+v of condemned %+v: the run reclaimed nothing, or not all it condemned", res.Deleted, res.Condemned)
	}
	if got := r.treeCommits(native); !slices.Equal(got, fork) {
		t.Fatalf("cleanup touched the in-doubt tree: %v, was %v", got, fork)
	}
	r.wantKept("source of the in-doubt create", old, "t")

	// The held ref put lands now; the create settles as created.
	removeHold()
	held := r.store.Held()
	if len(held) == 0 {
		t.Fatal("no ref put is held")
	}
	if _, err := held[0].Release(r.ctx); err != nil {
		t.Fatalf("release the first held ref put: %v", err)
	}
	for _, p := range held[1:] {
		p.Drop()
	}
	final, err := h.WaitFinal(r.ctx)
	if err != nil || final.Outcome != outcome.Created || final.Native != native {
		t.Fatalf("create settled as %+v, %v; want created as %s", final, err, native)
	}
	b, err := graph.ResolveBranch(r.ctx, r.inner, r.graph, branch)
	if err != nil || b.Native != native {
		t.Fatalf("branch %s resolves to %+v, %v; want %s", branch, b, err, native)
	}
	head := r.view(b.Ref.Head)
	if head.ID.Seq != 0 || head.Pins["t"] != old.Pins["t"] {
		t.Fatalf("branch head %+v, %v; want its fork commit pinning %s", head, err, old.Pins["t"])
	}
	checkInvariants(t, r)

	// Settled now: the next run keeps the branch's head (and what it pins) by policy alone,
	// and the source commit, no longer pinned, as the merge base of the branch and main,
	// which has moved on since.
	again := r.cleanup(client.CleanupRequest{KeepNewest: 1, Mode: workflows.CleanupModeSweep, GuardWindow: noGuard()})
	if len(again.SkippedUnsettled) != 0 || again.Kept.Head != 2 || again.Kept.Pin != 0 || again.Kept.MergeBase != 1 {
		t.Fatalf("second run skipped %+v, kept %+v; want nothing unsettled, two heads and the source commit as merge base",
			again.SkippedUnsettled, again.Kept)
	}
	r.wantKept("source commit, the merge base of the branch and main", old, "t")
	v, objs := r.dataKeys(head, "t")
	for _, k := range append(objs, v) {
		if !r.exists(k) {
			t.Fatalf("the new branch's head needs %s, which was deleted", k)
		}
	}
	checkInvariants(t, r)
}

// TestCleanup_RefLessTree_FenceLosesToLiveRef_BranchKept: when a live ref lands at the
// tree's ref key before the collector's fence, the branch is live and kept whole.
func TestCleanup_RefLessTree_FenceLosesToLiveRef_BranchKept(t *testing.T) {
	r := runningRig(t)
	fork := r.handBranch("late", r.main, time.Now(), false)
	native := format.NativeName("late", fork.ID.Tree)
	refKey := format.BranchRefKey(r.graph, native)
	isFence := func(b []byte) bool {
		ref, err := format.DecodeBranchRef(b)
		return err == nil && ref.State == format.RefFence
	}
	r.store.Add(faults.Rule{Op: faults.OpPut, KeyPrefix: refKey, Body: isFence, Mode: faults.Delay, Delay: time.Second, Times: 1})

	h, err := r.gc.StartCleanup(r.ctx, client.CleanupRequest{Graph: r.graph, KeepNewest: 1, Mode: workflows.CleanupModeSweep, GuardWindow: noGuard()})
	if err != nil {
		t.Fatalf("start cleanup: %v", err)
	}
	r.waitFor("the collector's fence put", 30*time.Second, func() bool {
		return r.store.CountMatching(faults.Rule{Op: faults.OpPut, KeyPrefix: refKey}).Attempted > 0
	})
	if _, err := r.inner.Put(r.ctx, refKey, liveRefBytes(t, "late", fork.ID), storage.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatalf("live ref put while the fence is in flight: %v", err)
	}
	res, err := h.Wait(r.ctx)
	if err != nil {
		t.Fatalf("cleanup: %v", err)
	}
	if len(res.Fenced) != 0 || res.Kept.Head != 2 {
		t.Fatalf("fenced %v, kept %+v; want no fence and two heads (main and the late branch)", res.Fenced, res.Kept)
	}
	if got := r.treeCommits(native); len(got) != 1 {
		t.Fatalf("the late branch's tree holds %v, want its fork commit", got)
	}
	if b, err := graph.ResolveBranch(r.ctx, r.inner, r.graph, "late"); err != nil || b.Native != native {
		t.Fatalf("resolve late: %+v, %v", b, err)
	}
	checkInvariants(t, r)
}

// TestCleanup_RefLessTree_FencePutAmbiguous_TreeSkippedAndReported: a fence put whose
// outcome stays unknown proves nothing, so the tree is skipped and reported; once a live
// ref wins the key the next run keeps the branch by policy.
func TestCleanup_RefLessTree_FencePutAmbiguous_TreeSkippedAndReported(t *testing.T) {
	r := runningRig(t)
	fork := r.handBranch("murky", r.main, time.Now(), false)
	native := format.NativeName("murky", fork.ID.Tree)
	refKey := format.BranchRefKey(r.graph, native)
	removeHold := r.store.Add(faults.Rule{Op: faults.OpPut, KeyPrefix: refKey, Mode: faults.Hold})

	res := r.cleanup(client.CleanupRequest{KeepNewest: 1, Mode: workflows.CleanupModeSweep, GuardWindow: noGuard()})
	u, ok := hasUnsettled(res, native)
	if !ok || res.Kept.Unsettled != 1 || len(res.Fenced) != 0 {
		t.Fatalf("unsettled %+v, kept %+v, fenced %v; want the tree skipped as unsettled", res.SkippedUnsettled, res.Kept, res.Fenced)
	}
	t.Logf("reported: %+v", u)
	if got := r.treeCommits(native); len(got) != 1 {
		t.Fatalf("the tree holds %v after an ambiguous fence, want its fork commit", got)
	}

	removeHold()
	if _, err := r.inner.Put(r.ctx, refKey, liveRefBytes(t, "murky", fork.ID), storage.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatalf("live ref put: %v", err)
	}
	wantLateRefused(t, r.ctx, "held fence released after the live ref", r.store.Held())
	again := r.cleanup(client.CleanupRequest{KeepNewest: 1, Mode: workflows.CleanupModeSweep, GuardWindow: noGuard()})
	if len(again.SkippedUnsettled) != 0 || again.Kept.Head != 2 {
		t.Fatalf("second run: unsettled %+v, kept %+v; want the branch kept as live", again.SkippedUnsettled, again.Kept)
	}
	checkInvariants(t, r)
}

// TestCleanup_Policies: keep-N only, older-than only, and both, on a live branch whose
// commits are an hour apart.
func TestCleanup_Policies(t *testing.T) {
	// aged builds a live branch "aged" by hand with commits (each writing a new version of
	// table "a") at the given ages, oldest first, and returns them.
	aged := func(r *rig, ages ...time.Duration) []graph.CommitView {
		now := time.Now()
		head := r.handBranch("aged", r.main, now.Add(-5*time.Hour), true)
		var out []graph.CommitView
		for i, age := range ages {
			out = append(out, r.commitOn(&head, "a", "a"+string(rune('0'+i)), now.Add(-age)))
		}
		return out
	}
	ages := []time.Duration{4 * time.Hour, 3 * time.Hour, 2 * time.Hour, 30 * time.Minute, 10 * time.Minute}
	cases := []struct {
		name          string
		keep          int
		newerThan     time.Duration
		kept, deleted []int // indexes into the aged commits
	}{
		{"KeepNewestOnly", 2, 0, []int{3, 4}, []int{0, 1, 2}},
		{"OlderThanOnly", 0, 90 * time.Minute, []int{3, 4}, []int{0, 1, 2}},
		{"BothWindows_UnionKept", 3, 90 * time.Minute, []int{2, 3, 4}, []int{0, 1}},
		{"BothWindows_AgeWindowWider", 1, 150 * time.Minute, []int{2, 3, 4}, []int{0, 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			r.startWorker()
			commits := aged(r, ages...)
			keys := make([][]string, len(commits))
			for i, c := range commits {
				v, objs := r.dataKeys(c, "a")
				keys[i] = append([]string{r.commitKey(c), v}, objs...)
			}
			res := r.cleanupRecorded(client.CleanupRequest{KeepNewest: c.keep, KeepNewerThan: c.newerThan,
				Mode: workflows.CleanupModeSweep, GuardWindow: noGuard()}, "cleanup_policy_"+strings.ToLower(c.name))
			for _, i := range c.kept {
				r.wantKept("commit inside a window", commits[i], "a")
			}
			for _, i := range c.deleted {
				r.wantGone("commit outside every window", keys[i]...)
			}
			// The aged branch's fork commit (5h old) is outside every window too.
			if got := r.treeCommits(format.NativeName("aged", commits[0].ID.Tree)); len(got) != len(c.kept) {
				t.Fatalf("aged tree holds %d commits, want %d", len(got), len(c.kept))
			}
			if res.Deleted.Commits != int64(len(c.deleted)+1) || res.Deleted.Versions != int64(len(c.deleted)) ||
				res.Deleted.Objects != int64(len(c.deleted)) {
				t.Fatalf("deleted %+v, want %d commits (with the fork) and %d versions and objects", res.Deleted, len(c.deleted)+1, len(c.deleted))
			}
			wantHeads := int64(2) // main and aged
			if res.Kept.Head != wantHeads || res.Kept.LiveWindow != int64(len(c.kept)-1)+1 {
				t.Fatalf("kept %+v: want %d heads and %d commits in windows (aged's and main's seq 1)", res.Kept, wantHeads, len(c.kept))
			}
			checkInvariants(t, r)
		})
	}
}

// TestCleanup_DryRun_ChangesNothingAndListsThePlan: a dry run reports what a sweep would
// reclaim — counts, bytes, keys — and leaves the bucket and the ledger's condemned set
// untouched; it writes no fence either.
func TestCleanup_DryRun_ChangesNothingAndListsThePlan(t *testing.T) {
	r := runningRig(t)
	r.commitAt("t", "v2", time.Now())
	r.commitAt("t", "v3", time.Now())
	orphan := r.handBranch("orphan", r.main, time.Now(), false)
	before := r.bucket()

	res := r.cleanupRecorded(client.CleanupRequest{KeepNewest: 1, Mode: workflows.CleanupModeDryRun, GuardWindow: noGuard()}, "cleanup_dry_run")
	if after := r.bucket(); !maps.Equal(before, after) {
		t.Fatalf("a dry run changed the bucket: %d keys before, %d after", len(before), len(after))
	}
	if condemned, _ := r.condemnedSummary(res.RunID); condemned != 0 {
		t.Fatalf("a dry run recorded %d condemned keys", condemned)
	}
	// Planned: main's root, seq 1 and seq 2 (3 commits), the orphan's fork commit; the
	// versions and objects of v1 and v2.
	want := workflows.CleanupCounts{Commits: 4, Versions: 2, Objects: 2}
	got := res.Condemned
	got.Bytes = 0
	if got != want || res.Condemned.Bytes == 0 || res.PlanKeyCount != want.Keys() || int64(len(res.PlanKeys)) != want.Keys() {
		t.Fatalf("plan %+v (%d keys listed, count %d), want %+v", res.Condemned, len(res.PlanKeys), res.PlanKeyCount, want)
	}
	for _, k := range res.PlanKeys {
		if _, ok := before[k]; !ok {
			t.Fatalf("plan lists %s, which is not in the bucket", k)
		}
	}
	if !slices.Equal(res.WouldFence, []string{format.NativeName("orphan", orphan.ID.Tree)}) {
		t.Fatalf("would fence %v, want the orphan", res.WouldFence)
	}
	run, err := r.cat.CleanupRunGet(r.ctx, catalog.CleanupRunGetParams{ID: res.RunID})
	if err != nil || run.State != catalog.CleanupDone || run.Mode != catalog.CleanupDryRun {
		t.Fatalf("run row %+v, %v; want a finished dry run", run, err)
	}
	var report workflows.CleanupResult
	if err := json.Unmarshal(run.Report, &report); err != nil || report.Condemned != res.Condemned {
		t.Fatalf("run report %s (%v), want the result's figures", run.Report, err)
	}
	checkInvariants(t, r)
}

// TestCleanup_MarkThenSweepThatPlan_DeletesOnlyWhatIsStillGarbage: mark persists the plan
// and deletes nothing; a later sweep of that plan deletes its keys — except those a
// create has since come to need, because a finished plan no longer refuses pins.
func TestCleanup_MarkThenSweepThatPlan_DeletesOnlyWhatIsStillGarbage(t *testing.T) {
	r := runningRig(t)
	c1 := r.main
	c2 := r.commitAt("t", "v2", time.Now())
	r.commitAt("t", "v3", time.Now())
	before := r.bucket()

	mark := r.cleanup(client.CleanupRequest{KeepNewest: 1, Mode: workflows.CleanupModeMark, GuardWindow: noGuard()})
	if after := r.bucket(); !maps.Equal(before, after) {
		t.Fatal("mark changed the bucket")
	}
	condemned, deleted := r.condemnedSummary(mark.RunID)
	if condemned != mark.Condemned.Keys() || condemned != 7 || deleted != 0 || mark.Deleted.Keys() != 0 {
		t.Fatalf("mark condemned %d (result %+v), deleted %d; want 7 keys (3 commits, 2 versions, 2 objects) and nothing deleted",
			condemned, mark.Condemned, deleted)
	}
	// Reviewing the plan takes time; meanwhile a branch is created from c2, so c2's
	// version and object are needed again.
	if res, err := r.gc.CreateBranch(r.ctx, client.CreateBranchRequest{Graph: r.graph, Branch: "from-c2", FromCommit: c2.ID.String()}); err != nil {
		t.Fatalf("create from c2 after the mark finished: %+v, %v", res, err)
	}

	sweep := r.cleanup(client.CleanupRequest{SweepRunID: mark.RunID, KeepNewest: 1, GuardWindow: noGuard()})
	if sweep.Mode != workflows.CleanupModeSweep || sweep.PlanRunID != mark.RunID {
		t.Fatalf("sweep result %+v", sweep)
	}
	// c2 is garbage no more: it is the merge base of from-c2 and main.
	if sweep.Deleted.Keys() != 4 || sweep.PlanDropped != 3 || sweep.NotInPlan != 0 || sweep.Kept.MergeBase != 1 {
		t.Fatalf("sweep deleted %+v, dropped %d keys of the plan, %d not in it, kept %+v; want 4 deleted (2 commits, v1 and its object) "+
			"and c2 (a merge base now), v2 and its object dropped", sweep.Deleted, sweep.PlanDropped, sweep.NotInPlan, sweep.Kept)
	}
	r.wantGone("planned and still garbage", r.commitKey(c1))
	r.wantKept("planned, but now the merge base of from-c2 and main", c2, "t")
	v2, objs := r.dataKeys(r.mustHead("from-c2"), "t")
	for _, k := range append(objs, v2) {
		if !r.exists(k) {
			t.Fatalf("sweep of the plan deleted %s, which the new branch needs", k)
		}
	}
	checkInvariants(t, r)
}

// TestCleanup_RetentionRoots: each root keeps what it names, on a graph whose other
// history is reclaimed.
func TestCleanup_RetentionRoots(t *testing.T) {
	sweep := client.CleanupRequest{KeepNewest: 1, Mode: workflows.CleanupModeSweep, GuardWindow: noGuard()}

	t.Run("Head", func(t *testing.T) {
		r := runningRig(t)
		old := r.main
		v1, objs := r.dataKeys(old, "t")
		head := r.commitAt("t", "v2", time.Now())
		res := r.cleanup(sweep)
		r.wantKept("head", head, "t")
		r.wantGone("old commit", append([]string{r.commitKey(old), v1}, objs...)...)
		if res.Kept.Head != 1 {
			t.Fatalf("kept %+v, want one head", res.Kept)
		}
		checkInvariants(t, r)
	})

	t.Run("Tag", func(t *testing.T) {
		r := runningRig(t)
		tagged := r.main
		r.commitAt("t", "v2", time.Now())
		r.commitAt("t", "v3", time.Now())
		r.putTag("release-1", tagged)
		res := r.cleanup(sweep)
		r.wantKept("tagged commit", tagged, "t")
		if res.Kept.Tag != 1 {
			t.Fatalf("kept %+v, want one commit kept by its tag", res.Kept)
		}
		checkInvariants(t, r)
	})

	t.Run("InFlightPin", func(t *testing.T) {
		r := runningRig(t)
		pinned := r.main
		r.commitAt("t", "v2", time.Now())
		op, err := r.cat.OperationInsert(r.ctx, catalog.OperationInsertParams{ID: catalog.NewID(), Kind: catalog.OpRestore, Graph: r.graph})
		if err != nil {
			t.Fatalf("operation: %v", err)
		}
		if err := r.cat.PinsRegister(r.ctx, catalog.PinsRegisterParams{OpID: op.ID, Pins: []catalog.Pin{
			{Kind: catalog.ObjectCommit, Key: r.commitKey(pinned)},
		}}); err != nil {
			t.Fatalf("pin: %v", err)
		}
		res := r.cleanup(sweep)
		// The pinned commit stays, and with it the version it pins and that version's objects.
		r.wantKept("pinned commit", pinned, "t")
		if res.Kept.Pin != 1 {
			t.Fatalf("kept %+v, want one key kept by its pin", res.Kept)
		}
		if _, err := r.cat.OperationFinish(r.ctx, catalog.OperationFinishParams{ID: op.ID, Outcome: catalog.OutcomeDone}); err != nil {
			t.Fatalf("finish operation: %v", err)
		}
		r.cleanup(sweep)
		r.wantGone("commit no longer pinned", r.commitKey(pinned))
		checkInvariants(t, r)
	})

	t.Run("GuardWindow", func(t *testing.T) {
		r := runningRig(t)
		old := r.main
		r.commitAt("t", "v2", time.Now())
		// The default guard window: everything here was written a moment ago.
		res := r.cleanup(client.CleanupRequest{KeepNewest: 1, Mode: workflows.CleanupModeSweep})
		if res.Policy.GuardWindow != workflows.DefaultGuardWindow {
			t.Fatalf("policy %+v, want the default guard window", res.Policy)
		}
		r.wantGone("old commit (commits have no guard)", r.commitKey(old))
		v1, objs := r.dataKeys(old, "t")
		for _, k := range append(objs, v1) {
			if !r.exists(k) {
				t.Fatalf("young %s was deleted inside the guard window", k)
			}
		}
		if res.Kept.Guard != 1 || res.Deleted.Versions != 0 || res.Deleted.Objects != 0 {
			// The guard keeps v1; v1 keeps the object it lists (counted as referenced).
			t.Fatalf("kept %+v, deleted %+v; want v1 kept by the guard, and its object with it", res.Kept, res.Deleted)
		}
		checkInvariants(t, r)
	})
}

// TestCleanup_AnotherRunActive_Conflict: the ledger allows one condemning run per graph;
// a cleanup that finds another running ends with conflict, naming it, before reading.
func TestCleanup_AnotherRunActive_Conflict(t *testing.T) {
	r := runningRig(t)
	other, err := r.cat.CleanupRunInsert(r.ctx, catalog.CleanupRunInsertParams{ID: catalog.NewID(), Graph: r.graph, Mode: catalog.CleanupSweep})
	if err != nil {
		t.Fatalf("insert run: %v", err)
	}
	res, err := r.gc.Cleanup(r.ctx, client.CleanupRequest{Graph: r.graph, KeepNewest: 1, Mode: workflows.CleanupModeSweep, GuardWindow: noGuard()})
	if !errors.Is(err, outcome.ErrConflict) || res.ActiveRunID != other.ID {
		t.Fatalf("cleanup: %+v, %v; want conflict naming run %s", res, err, other.ID)
	}
	op := r.operation(res.RunID)
	if op.Kind != catalog.OpCleanup || op.Outcome != catalog.OutcomeConflict {
		t.Fatalf("operation %+v, want a cleanup that ended in conflict", op)
	}
	if _, err := r.gc.Cleanup(r.ctx, client.CleanupRequest{Graph: r.graph, Mode: workflows.CleanupModeSweep}); !errors.Is(err, outcome.ErrInvalid) {
		t.Fatalf("cleanup without a window: %v, want invalid", err)
	}
	checkInvariants(t, r)
}

// mustHead returns the head commit of logical branch.
func (r *rig) mustHead(logical string) graph.CommitView {
	r.t.Helper()
	b, err := graph.ResolveBranch(r.ctx, r.inner, r.graph, logical)
	if err != nil {
		r.t.Fatalf("resolve %s: %v", logical, err)
	}
	return r.view(b.Ref.Head)
}

// A head swapped in after the mark listed the trees — a publish that lands between the
// listing and the read of the refs — is kept, and what it pins retained: a sweep that
// keeps only the newest commit must not reclaim the table version the new head still
// names because the head itself was never listed (found by the soak, localfs seed
// 100146).
func TestCleanup_HeadPublishedAfterTheListing_KeptWithWhatItPins(t *testing.T) {
	t.Parallel()
	r := newStackRig(t, "localfs", false)
	u := r.version("u", ulid.ULID{}, r.objects("u", 2), nil)
	first := r.appendOn("main", map[string]ulid.ULID{"u": u})

	// The worker's store delays the mark's listing of the refs, once.
	fs := faults.Wrap(r.store)
	refsList := faults.Rule{Op: faults.OpList, KeyPrefix: format.BranchRefsPrefix(r.graph), Mode: faults.Delay, Delay: 3 * time.Second, Times: 1}
	fs.Add(refsList)
	w := worker.New(r.tc, r.queue, &activities.Activities{Store: fs, Catalog: r.cat, Workflows: worker.TemporalWorkflows(r.tc)}, sdkworker.Options{})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)

	h, err := r.gc.StartCleanup(r.ctx, client.CleanupRequest{Graph: r.graph, KeepNewest: 1, Mode: workflows.CleanupModeSweep, GuardWindow: noGuard()})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for fs.CountMatching(refsList).Attempted == 0 { // the trees are listed; the refs not yet read
		if time.Now().After(deadline) {
			t.Fatal("the mark never listed the refs")
		}
		time.Sleep(20 * time.Millisecond)
	}
	second := r.appendOn("main", nil) // a write publishes a new head, inheriting u's version
	res, err := h.Wait(r.ctx)
	if err != nil || res.Outcome != "done" {
		t.Fatalf("cleanup: %+v, %v", res, err)
	}
	if got := r.head("main"); got.ID != second.ID || second.ID.Seq != first.ID.Seq+1 {
		t.Fatalf("main's head %s, want %s after %s", got.ID, second.ID, first.ID)
	}
	r.checkRetained() // every key main's head reaches exists: u's version above all
}

// A cleanup whose workflow was terminated, and whose worker died, after its begin step
// recorded the operation and before it inserted the run (soak, localfs seed 9001508: an
// operator's terminate and a kill -9 of the only worker 26 ms apart) left the operation
// running for good: the reconciler left every cleanup row to the next cleanup, and the
// next cleanup finds orphaned runs, not operations without one. The reconciler now
// finishes such an operation failed — it read and deleted nothing — and the run can never
// be inserted under it after; the next cleanup runs as if it had not been.
func TestReconcile_CleanupClosedBeforeItsRunBegan_FinishedFailedNextCleanupRuns(t *testing.T) {
	t.Parallel()
	r := newRig2(t)
	first := r.newWorker()

	// Hold the graph's ledger lock, which the run's insert takes after the operation is
	// recorded.
	unlock := r.holdGraphLock()
	runID := catalog.NewID()
	h, err := r.gc.StartCleanup(r.ctx, client.CleanupRequest{Graph: r.graph, RunID: runID, KeepNewest: 1,
		Mode: workflows.CleanupModeSweep, GuardWindow: noGuard()})
	if err != nil {
		t.Fatalf("start cleanup: %v", err)
	}
	r.waitFor("the operation recorded, its run's insert waiting on the graph lock", time.Minute, func() bool {
		_, err := r.cat.OperationGet(r.ctx, catalog.OperationGetParams{ID: runID})
		return err == nil && r.graphLockAwaited()
	})
	if err := r.tc.TerminateWorkflow(r.ctx, h.WorkflowID, h.RunID, "operator terminates it"); err != nil {
		t.Fatalf("terminate: %v", err)
	}
	first.stop() // the worker dies with the begin step inside the run's insert
	unlock()
	if _, err := r.cat.CleanupRunGet(r.ctx, catalog.CleanupRunGetParams{ID: runID}); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("run %s: %v; the test needs the run never inserted", runID, err)
	}
	if op := r.operation(runID); op.State == catalog.OperationDone {
		t.Fatalf("operation %+v; the test needs it left unfinished", op)
	}

	r.newWorker()
	res := r.reconcile()
	if len(res.Settled) != 1 || res.Settled[0].OpID != runID {
		t.Fatalf("reconcile %+v, want %s settled", res, runID)
	}
	op := r.operation(runID)
	if op.State != catalog.OperationDone || op.Outcome != catalog.OutcomeFailed || op.Error == "" {
		t.Fatalf("operation after the reconciler: %+v; want done, failed, with the reason", op)
	}
	again, err := r.gc.Cleanup(r.ctx, client.CleanupRequest{Graph: r.graph, RunID: runID, KeepNewest: 1,
		Mode: workflows.CleanupModeSweep, GuardWindow: noGuard()})
	if !errors.Is(err, outcome.ErrConflict) {
		t.Fatalf("the same run id again: %+v, %v; want conflict (a run id names one run)", again, err)
	}
	next, err := r.gc.Cleanup(r.ctx, client.CleanupRequest{Graph: r.graph, KeepNewest: 1, Mode: workflows.CleanupModeSweep, GuardWindow: noGuard()})
	if err != nil || next.Outcome != outcome.Done || len(next.Adopted) != 0 {
		t.Fatalf("the next cleanup: %+v, %v; want done, nothing to adopt", next, err)
	}
	checkInvariants(t, r.rig)
}

// TestCleanupSchedule_Lifecycle: a graph's cleanup schedule is created, bootstrapped
// again (which updates it instead of failing), described, paused and resumed, triggered
// (the run it starts cleans the graph), and deleted.
func TestCleanupSchedule_Lifecycle(t *testing.T) {
	r := runningRig(t)
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
	r := runningRig(t)
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
	r := runningRig(t)
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
