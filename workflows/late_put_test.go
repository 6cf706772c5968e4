package workflows_test

import (
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/faults"
	"github.com/graftworks/graft/workflows"
)

// A commit put that answered ambiguously may still be delivered after its write settled
// (soak, localfs seed 7000478: a table write's commit put was held twice and landed on
// the third try; a sweep then reclaimed that commit and the version only it pinned, and
// the held put, delivered late, put the commit back on main's chain pinning a version
// that was gone). The write's pin of that commit now outlives the operation, marked
// late_put: cleanup keeps the commit and what it pins, so the late delivery finds the key
// taken; only an operator's release lets the commit go.
func TestWrite_CommitPutHeldThenLanded_CommitKeptPastTheWriteUntilReleased(t *testing.T) {
	t.Parallel()
	var fs *faults.Store
	r := newPublishRig(t, func(s storage.Store) storage.Store { fs = faults.Wrap(s); return fs })
	commits := r.graph + "/trees/" + r.mainRef.Tree.String() + "/commits/"
	fs.Add(faults.Rule{Name: "held-commit", Op: faults.OpPut, KeyPrefix: commits, Mode: faults.Hold, Times: 2})

	first, err := r.gc.WriteTable(r.ctx, r.store, client.WriteTableRequest{Graph: r.graph, Branch: "main", Table: "t", Files: writeFiles(t, "first")})
	if err != nil || first.Outcome != outcome.Done {
		t.Fatalf("first write: %+v, %v", first, err)
	}
	held := fs.Held()
	if len(held) != 2 {
		t.Fatalf("%d held commit puts, want the first two of the write's three", len(held))
	}
	pins, err := r.cat.PinsList(r.ctx, catalog.PinsListParams{Graph: r.graph})
	if err != nil {
		t.Fatal(err)
	}
	firstKey := ""
	if id, err := format.ParseCommitID(first.Commit); err == nil {
		firstKey = format.CommitIDKey(r.graph, id)
	}
	var late []catalog.PinRecord
	for _, p := range pins {
		if p.LatePut {
			late = append(late, p)
		}
	}
	if len(late) != 1 || late[0].Key != firstKey || late[0].OpID != first.OpID {
		t.Fatalf("late-put pins %+v, want the first write's commit %s alone", late, firstKey)
	}
	versionKey := format.TableVersionKey(r.graph, "t", mustULID(t, first.Version))

	if second, err := r.gc.WriteTable(r.ctx, r.store, client.WriteTableRequest{Graph: r.graph, Branch: "main", Table: "t", Files: writeFiles(t, "second")}); err != nil || second.Outcome != outcome.Done {
		t.Fatalf("second write: %+v, %v", second, err)
	}
	r.cleanup(client.CleanupRequest{KeepNewest: 1, Mode: workflows.CleanupModeSweep, GuardWindow: noGuard()})
	if !r.exists(firstKey) || !r.exists(versionKey) {
		t.Fatalf("the sweep reclaimed the first write's commit (%v) or its version (%v) while a put of the commit was in flight",
			r.exists(firstKey), r.exists(versionKey))
	}
	wantLateRefused(t, r.ctx, "late delivery of the held commit put", held)
	r.checkRetained()

	// The operator's word that nothing more is in flight: the commit becomes reclaimable.
	n, err := r.cat.PinsReleaseLatePuts(r.ctx, catalog.PinsReleaseLatePutsParams{OpID: first.OpID})
	if err != nil || n != 1 {
		t.Fatalf("release late-put pins: %d, %v; want 1", n, err)
	}
	r.cleanup(client.CleanupRequest{KeepNewest: 1, Mode: workflows.CleanupModeSweep, GuardWindow: noGuard()})
	if r.exists(firstKey) || r.exists(versionKey) {
		t.Fatalf("after the release the sweep kept the first write's commit (%v) or version (%v)", r.exists(firstKey), r.exists(versionKey))
	}
	r.checkRetained()
}

func mustULID(t *testing.T, s string) ulid.ULID {
	t.Helper()
	id, err := ulid.ParseStrict(s)
	if err != nil {
		t.Fatalf("parse ULID %q: %v", s, err)
	}
	return id
}

// A write whose workflow was terminated while its head swap was in flight, the
// swap landing afterwards: the reconciler finds the write landed and finishes it done, and
// since nothing tells it which of the closed run's commit puts answered, it keeps the
// commit pinned past the operation as the kernel would (a late-put pin), so no late
// delivery can refill the commit's key after cleanup.
func TestReconcile_TerminatedWriteFoundLanded_CommitKeptForALatePut(t *testing.T) {
	t.Parallel()
	r := newRig2(t)
	r.startWorker()
	opID, start, run, hold := r.writeInDoubt("landed-", "landed-late", faults.Hold, false)
	r.terminate(run)
	hold()
	held := r.store.Held()
	if len(held) == 0 {
		t.Fatal("no swap held")
	}
	if _, err := held[0].Release(r.ctx); err != nil { // the first lands, after the termination
		t.Fatalf("the held swap, delivered after the termination: %v", err)
	}
	wantLateRefused(t, r.ctx, "a re-issued swap after the first landed", held[1:]) // the re-issues find the ref moved
	head := r.branchHead("main")
	if head.Commit.ID == start.Commit.ID {
		t.Fatal("the late swap did not move main")
	}

	res := r.reconcile()
	if len(res.Settled) != 1 || res.Settled[0].OpID != opID || res.Settled[0].Outcome != outcome.Done {
		t.Fatalf("reconcile %+v, want %s settled done", res, opID)
	}
	pins := r.pinsOf(opID)
	if len(pins) != 1 || !pins[0].LatePut || pins[0].Key != format.CommitIDKey(r.graph, head.Commit.ID) {
		t.Fatalf("pins of the reconciled write %+v, want its commit %s alone, held for a late put", pins, head.Commit.ID)
	}
	if now := r.branchHead("main"); now.Commit.ID != head.Commit.ID {
		t.Fatalf("main moved to %s after the reconciler, want %s", now.Commit.ID, head.Commit.ID)
	}
}
