package workflows_test

import (
	"context"
	"errors"
	"sync"
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

// A refusal proves a write absent only when no earlier put of it may still land. Two
// ways one can (soak, localfs seed 1002188: a table write's head swap was held, its
// re-issue refused with 403, the write ended refused and released its pins, a sweep
// reclaimed the commit, and the held swap then landed — main's live ref named a commit
// that was gone): within one step, a put held and its re-issue refused; across a step's
// attempts, a put still in flight when its attempt timed out and the retry's put refused.
// Either way the write is settled, never ended refused, and the earlier put can no
// longer land once it is.

// newPublishRig is a rig on the local store whose worker's store is wrapped
// by wrap.
func newPublishRig(t *testing.T, wrap func(storage.Store) storage.Store) *stackRig {
	t.Helper()
	r := newStackRig(t, "localfs", false)
	r.store = wrap(r.store)
	r.startWorker()
	return r
}

// writeMain writes one file of table on main through the engine and checks it ended
// done with main's head at the commit it reports.
func writeMain(t *testing.T, r *stackRig, table string) {
	t.Helper()
	h, err := r.gc.StartWriteTable(r.ctx, r.store, client.WriteTableRequest{Graph: r.graph, Branch: "main", Table: table, Files: writeFiles(t, table)})
	if err != nil {
		t.Fatalf("start write %s: %v", table, err)
	}
	res, err := h.WaitFinal(r.ctx) // through a settle: in doubt is not an end
	if err != nil || res.Outcome != outcome.Done {
		t.Fatalf("write %s: %+v, %v; want done — an earlier swap may still land, so a refusal is not the end", table, res, err)
	}
	if h := r.head("main"); h.ID.String() != res.Commit {
		t.Fatalf("main's head %s, want the write's commit %s", h.ID, res.Commit)
	}
}

func TestWrite_HeadSwapHeldThenReissueRefused_SettledDoneAndTheHeldSwapNeverLands(t *testing.T) {
	t.Parallel()
	var fs *faults.Store
	r := newPublishRig(t, func(s storage.Store) storage.Store { fs = faults.Wrap(s); return fs })
	refKey := format.BranchRefKey(r.graph, r.mainRef.Native)
	fs.Add(faults.Rule{Name: "held", Op: faults.OpPut, KeyPrefix: refKey, Mode: faults.Hold, Times: 1})
	fs.Add(faults.Rule{Name: "refused", Op: faults.OpPut, KeyPrefix: refKey, Mode: faults.Refuse, Status: 403, Skip: 1, Times: 1})
	writeMain(t, r, "t")
	held := fs.Held()
	if len(held) != 1 {
		t.Fatalf("%d held puts, want the first swap", len(held))
	}
	if _, err := held[0].Release(r.ctx); !errors.Is(err, storage.ErrPreconditionFailed) {
		t.Fatalf("the held swap on release: %v; want it refused by its condition (the ref moved on)", err)
	}
	r.checkRetained()
}

// inFlight keeps the first put of key in flight past its caller's deadline, as a request
// sent to a slow server is: the caller gets its context's error (ambiguous), and the put
// lands only when land is called — after the step's next attempt has run.
type inFlight struct {
	storage.Store
	key string

	mu      sync.Mutex
	started bool
	land    func() error
}

func (f *inFlight) Put(ctx context.Context, key string, body []byte, opts storage.PutOptions) (storage.PutResult, error) {
	f.mu.Lock()
	first := key == f.key && !f.started
	if first {
		f.started = true
		f.land = func() error {
			_, err := f.Store.Put(context.Background(), key, body, opts)
			return err
		}
	}
	f.mu.Unlock()
	if !first {
		return f.Store.Put(ctx, key, body, opts)
	}
	<-ctx.Done()
	return storage.PutResult{}, &storage.Error{Op: "put", Key: key, Code: storage.CodeAmbiguous, Err: ctx.Err()}
}

// This test waits out one step attempt (workflows.StepTimeout, 30 s).
func TestWrite_HeadSwapInFlightPastItsAttempt_RetryRefused_SettledDoneAndTheLateSwapNeverLands(t *testing.T) {
	t.Parallel()
	var slow *inFlight
	var fs *faults.Store
	r := newPublishRig(t, func(s storage.Store) storage.Store {
		slow = &inFlight{Store: s}
		fs = faults.Wrap(slow)
		return fs
	})
	slow.key = format.BranchRefKey(r.graph, r.mainRef.Native)
	// The first swap reaches the slow put; the next one (the step's retry) is refused.
	fs.Add(faults.Rule{Name: "refused", Op: faults.OpPut, KeyPrefix: slow.key, Mode: faults.Refuse, Status: 403, Skip: 1, Times: 1})
	writeMain(t, r, "t")
	slow.mu.Lock()
	land := slow.land
	slow.mu.Unlock()
	if land == nil {
		t.Fatal("the first swap never reached the store")
	}
	if err := land(); !errors.Is(err, storage.ErrPreconditionFailed) {
		t.Fatalf("the late swap: %v; want it refused by its condition (the ref moved on)", err)
	}
	r.checkRetained()
}
