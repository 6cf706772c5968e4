package workflows_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/faults"
)

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
