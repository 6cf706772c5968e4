package workflows_test

import (
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage/faults"
	"github.com/graftworks/graft/worker"
	"github.com/graftworks/graft/workflows"

	sdkworker "go.temporal.io/sdk/worker"
)

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
	w := sdkworker.New(r.tc, r.queue, sdkworker.Options{})
	worker.Register(w, &activities.Activities{Store: fs, Catalog: r.cat, Workflows: worker.TemporalWorkflows(r.tc)})
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
