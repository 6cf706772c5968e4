package workflows_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	sdkclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
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

// A graph owns its whole prefix, and only its prefix (docs/format.md, *Ownership*), on
// the real stack: the Temporal dev server, Postgres, the local store and versitygw.

// An init whose graph record put never answers after its root commit and main's ref
// landed: the retried step finds those two keys under the prefix — its own, written by
// the recorded operation — and completes the graph rather than refusing the prefix; a
// repeated init is idempotent.
func TestInitGraph_RecordPutUnansweredAfterRootAndRef_RetriedStepCompletesTheGraph(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"localfs", "versitygw"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			r := newStackRig(t, backend, false)
			fs := faults.Wrap(r.store)
			w := worker.New(r.tc, r.queue, &activities.Activities{Store: fs, Catalog: r.cat, Workflows: worker.TemporalWorkflows(r.tc)}, sdkworker.Options{})
			if err := w.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(w.Stop)
			name := randomName("init")
			fs.Add(faults.Rule{Op: faults.OpPut, KeyGlob: format.GraphKey(name), Mode: faults.FailBeforeSend, Times: graph.MaxPutAttempts})

			res, err := r.gc.InitGraph(r.ctx, client.InitGraphRequest{Graph: name})
			if err != nil || res.Outcome != outcome.Done || !res.Created {
				t.Fatalf("init: %+v, %v; want done and created", res, err)
			}
			if n := fs.CountMatching(faults.Rule{Op: faults.OpPut, KeyGlob: format.GraphKey(name)}).Attempted; n <= graph.MaxPutAttempts {
				t.Fatalf("the graph record was put %d times: the step was not retried", n)
			}
			var keys []string
			if err := storage.ListAll(r.ctx, r.store, format.GraphPrefix(name), func(o storage.ObjectInfo) error {
				keys = append(keys, o.Key)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if len(keys) != 3 {
				t.Fatalf("the graph's prefix holds %v; want its root commit, main's ref and the graph record", keys)
			}
			again, err := r.gc.InitGraph(r.ctx, client.InitGraphRequest{Graph: name})
			if err != nil || again.Outcome != outcome.Done || again.Created || again.Root != res.Root {
				t.Fatalf("repeated init: %+v, %v; want the same graph, not created", again, err)
			}
		})
	}
}

// graft.WriteTable started by name (another SDK, no Go client to check the request) with
// an import of a key another graph owns, or of a graft-shaped key where no graph exists,
// ends invalid and writes nothing.
func TestWriteTable_StartedByName_ImportOfAKeyAGraphOwnsOrMayOwn_IsInvalidAndWritesNothing(t *testing.T) {
	t.Parallel()
	eachStackStore(t, func(t *testing.T, r *stackRig) {
		other := randomName("other")
		if _, err := graph.Init(r.ctx, r.store, graph.InitParams{Graph: other, MainTree: ulid.Make(), Op: "init-" + other,
			Time: time.Now().UTC().Truncate(time.Millisecond)}); err != nil {
			t.Fatal(err)
		}
		keys := []string{
			other + "/landed/part-0.csv",                                        // under another graph, not graft-shaped
			randomName("nograph") + "/tables/t/objects/" + ulid.Make().String(), // graft-shaped, no graph there
		}
		for _, k := range keys {
			if _, err := r.store.Put(r.ctx, k, []byte("not this graph's"), storage.PutOptions{IfNoneMatch: true}); err != nil {
				t.Fatal(err)
			}
		}
		for i, k := range keys {
			info, err := r.store.Head(r.ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			before := r.listAll()
			run, err := r.tc.ExecuteWorkflow(r.ctx, sdkclient.StartWorkflowOptions{ID: randomName("by-name-"), TaskQueue: r.queue},
				workflows.WriteTableName, workflows.WriteTableInput{Graph: r.graph, Branch: "main", Table: "borrowed", OpID: randomName("op-"),
					Imports: []workflows.TableImport{{Name: "borrowed.csv", Key: k, Size: info.Size, ETag: info.ETag}}})
			if err != nil {
				t.Fatal(err)
			}
			var res workflows.WriteTableResult
			err = run.Get(r.ctx, &res)
			var app *temporal.ApplicationError
			if !errors.As(err, &app) || app.Type() != string(outcome.Invalid) {
				t.Fatalf("import %d (%s): %v; want the workflow to end invalid", i, k, err)
			}
			if !strings.Contains(err.Error(), k) {
				t.Fatalf("import %d: %v; want the message to name %s", i, err, k)
			}
			if after := r.listAll(); len(after) != len(before) {
				t.Fatalf("import %d: the bucket went from %d to %d keys", i, len(before), len(after))
			}
		}
	})
}

// listAll lists every key of the rig's store.
func (r *stackRig) listAll() map[string]bool {
	r.t.Helper()
	out := map[string]bool{}
	if err := storage.ListAll(r.ctx, r.store, "", func(o storage.ObjectInfo) error { out[o.Key] = true; return nil }); err != nil {
		r.t.Fatal(err)
	}
	return out
}

// unlisted hides keys from List: an init that never saw them, as graft's did before init
// checked its prefix (and as one does when they land between its check and its graph
// record).
type unlisted struct {
	storage.Store
	hide map[string]bool
}

func (u unlisted) List(ctx context.Context, opts storage.ListOptions) (storage.ListPage, error) {
	page, err := u.Store.List(ctx, opts)
	var kept []storage.ObjectInfo
	for _, o := range page.Objects {
		if !u.hide[o.Key] {
			kept = append(kept, o)
		}
	}
	page.Objects = kept
	return page, err
}

// A graph that sits on objects older than itself — another graph's copied under its
// prefix by a tool before the graph was created (data object, version, commit, graph
// chunk), and an object with an old ULID copied in afterwards — writes three versions
// and cleans up keeping one: cleanup reclaims what the graph wrote and leaves every
// one of those keys, counted unknown, neither fencing nor reporting the copied tree.
func TestCleanup_KeysOlderThanTheGraph_NeverCondemned_WhateverTheirShape(t *testing.T) {
	t.Parallel()
	eachStackStore(t, func(t *testing.T, r *stackRig) {
		// Graph B (the rig's) writes a version; a tool copies B's keys under x/.
		c := r.appendOn("main", map[string]ulid.ULID{"t": r.version("t", ulid.ULID{}, r.objects("t", 1), nil)})
		x := randomName("x")
		var copies []string
		copyTo := func(key string) {
			obj, err := r.store.Get(r.ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			to := x + strings.TrimPrefix(key, r.graph)
			if _, err := r.store.Put(r.ctx, to, obj.Body, storage.PutOptions{IfNoneMatch: true}); err != nil {
				t.Fatal(err)
			}
			copies = append(copies, to)
		}
		for _, prefix := range []string{format.TablePrefix(r.graph, "t"), format.TreePrefix(r.graph, c.ID.Tree)} {
			var keys []string
			if err := storage.ListAll(r.ctx, r.store, prefix, func(o storage.ObjectInfo) error { keys = append(keys, o.Key); return nil }); err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				copyTo(k)
			}
		}
		chunk := []byte("a chunk some tool wrote")
		sum := sha256.Sum256(chunk)
		chunkKey := format.ChunksPrefix(x) + hex.EncodeToString(sum[:]) + ".json"
		if _, err := r.store.Put(r.ctx, chunkKey, chunk, storage.PutOptions{IfNoneMatch: true}); err != nil {
			t.Fatal(err)
		}
		copies = append(copies, chunkKey)

		// x is created in a later second than the copies, by an init that did not see them.
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(1100 * time.Millisecond)))
		hide := map[string]bool{}
		for _, k := range copies {
			hide[k] = true
		}
		if _, err := graph.Init(r.ctx, unlisted{Store: r.store, hide: hide}, graph.InitParams{Graph: x, MainTree: ulid.Make(),
			Op: "init-" + x, Time: time.Now().UTC().Truncate(time.Millisecond)}); err != nil {
			t.Fatalf("init x: %v", err)
		}
		if _, err := r.cat.GraphInsert(r.ctx, catalog.GraphInsertParams{Name: x, Locator: "test"}); err != nil {
			t.Fatal(err)
		}
		old := format.ObjectKey(x, "t", ulid.MustNew(ulid.Timestamp(time.Now().Add(-48*time.Hour)), rand.Reader))
		if _, err := r.store.Put(r.ctx, old, []byte("an old object restored from a backup"), storage.PutOptions{IfNoneMatch: true}); err != nil {
			t.Fatal(err)
		}
		copies = append(copies, old)

		var err error
		if r.g, err = graph.Open(r.store, x); err != nil {
			t.Fatal(err)
		}
		r.graph = x
		var versions []ulid.ULID
		for range 3 {
			v := r.version("t", ulid.ULID{}, r.objects("t", 1), nil)
			versions = append(versions, v)
			r.appendOn("main", map[string]ulid.ULID{"t": v})
		}
		res := r.cleanup(client.CleanupRequest{KeepNewest: 1, Mode: workflows.CleanupModeSweep, GuardWindow: noGuard()})
		if res.Deleted.Versions != 2 || res.Kept.Unknown < int64(len(copies)) || len(res.SkippedUnsettled) != 0 || len(res.Fenced) != 0 {
			t.Fatalf("cleanup deleted %+v, kept %+v, skipped %v, fenced %v; want x's 2 old versions deleted and the %d copies unknown",
				res.Deleted, res.Kept, res.SkippedUnsettled, res.Fenced, len(copies))
		}
		for _, k := range copies {
			if !r.exists(k) {
				t.Fatalf("cleanup of x deleted %s, which graft did not write for x", k)
			}
		}
		for _, v := range versions[:2] {
			if r.exists(format.TableVersionKey(x, "t", v)) {
				t.Fatalf("x's old version %s survived", v)
			}
		}
		r.checkRetained()
	})
}

// A reused idempotency key never reports another request's result as yours
// (docs/outcomes.md): the same request under a key attaches to the first and reports its
// result; a different request under it is a conflict naming the key and what differs, and
// changes neither the store nor the ledger.

// otherRequest is a request that differs from a case's first under the same key.
type otherRequest struct {
	name string
	run  func(key string) error
	// differs is the field the conflict names.
	differs string
}

// keyCase is one mutating operation of the table below.
type keyCase struct {
	name string
	// first runs the case's request under key and returns what a repeat must report
	// again.
	first  func(t *testing.T, key string) any
	others []otherRequest
}

// TestIdempotencyKey_EveryOperation_SameRequestAttachesOtherRequestConflictsChangingNothing
// runs every mutating operation on one format-2 stack: the request, then the same request
// under the same key (the same result: the first run's, not a second operation), then
// requests that differ under that key — under the same workflow id (the client compares
// the run's own input) and under another (the ledger compares the recorded request), and
// for a tag one started by name as another SDK would. Each is a conflict naming the key
// and the field, and the store and the ledger are as they were.
func TestIdempotencyKey_EveryOperation_SameRequestAttachesOtherRequestConflictsChangingNothing(t *testing.T) {
	t.Parallel()
	r := newRig2(t)
	r.startWorker()
	fail := func(t *testing.T, what string, res any, err error) {
		t.Helper()
		t.Fatalf("%s: %+v, %v", what, res, err)
	}
	write := func(t *testing.T, req client.WriteTableRequest) workflows.WriteTableResult {
		t.Helper()
		res, err := r.gc.WriteTable(r.ctx, r.inner, req)
		if err != nil {
			fail(t, "write", res, err)
		}
		r.report(req.Branch, res.Commit)
		return res
	}
	writeReq := func(key string, mod func(*client.WriteTableRequest)) client.WriteTableRequest {
		req := client.WriteTableRequest{Graph: r.graph, Branch: "main", Table: "u", IdempotencyKey: key}
		mod(&req)
		return req
	}
	otherWrite := func(name, differs string, mod func(*client.WriteTableRequest)) otherRequest {
		return otherRequest{name: name, differs: differs, run: func(key string) error {
			_, err := r.gc.WriteTable(r.ctx, r.inner, writeReq(key, mod))
			return err
		}}
	}
	// byName starts a workflow by name under a fresh workflow id, as a service in another
	// language would, and returns its end as an error.
	byName := func(name string, in any) error {
		var res struct {
			Outcome outcome.Outcome `json:"outcome"`
			Message string          `json:"message"`
		}
		if err := endOf(r.rig, r.startOp(name, in), &res); err != nil {
			return err
		}
		if !res.Outcome.Success() {
			return &outcome.Error{Outcome: res.Outcome, Message: res.Message}
		}
		return nil
	}

	a, b := writeFiles(t, "id\n1\n")[0], writeFiles(t, "id\n2\n")[0]
	for _, k := range []string{"external/in/one.csv", "external/in/two.csv"} {
		if _, err := r.inner.Put(r.ctx, k, []byte(k), storage.PutOptions{IfNoneMatch: true}); err != nil {
			t.Fatal(err)
		}
	}
	staged := manyFiles(t, workflows.MaxInlineObjects+1, "s")
	stagedOther := append(append([]string(nil), staged[:len(staged)-1]...), writeFiles(t, "another last file")...)
	at := time.Now().UTC().Truncate(time.Millisecond)
	var dup []string // two live incarnations of "dup", for the repair
	for i := 0; i < 2; i++ {
		p, err := r.g.CreateBranch(r.ctx, graph.ForkSpec{Branch: "dup", Tree: ulid.Make(), Source: r.head.ID.String(),
			Author: "test", Message: "dup", Time: at, Op: randomName("hand-")})
		if err != nil {
			t.Fatalf("hand create: %v", err)
		}
		dup = append(dup, p.Ref.Native)
	}
	for _, br := range []string{"src", "doomed"} {
		if _, err := r.gc.CreateBranch(r.ctx, client.CreateBranchRequest{Graph: r.graph, Branch: br}); err != nil {
			t.Fatal(err)
		}
	}
	write(t, client.WriteTableRequest{Graph: r.graph, Branch: "src", Table: "m", Files: writeFiles(t, "merged")})
	r.names = append(r.names, "b1", "src", "doomed", "dup")
	initGraph := randomName("n")
	restoreTo := r.head.ID.String()
	var removed string // the entry the remove drops, read once from main's head

	cases := []keyCase{
		{name: "init", first: func(t *testing.T, key string) any {
			res, err := r.gc.InitGraph(r.ctx, client.InitGraphRequest{Graph: initGraph, IdempotencyKey: key})
			if err != nil {
				fail(t, "init", res, err)
			}
			// A repeat finds its own graph: the same operation, main and root (docs/workflows.md).
			return []string{string(res.Outcome), res.OpID, res.Main, res.Root}
		}, others: []otherRequest{{name: "another author", differs: "author", run: func(key string) error {
			_, err := r.gc.InitGraph(r.ctx, client.InitGraphRequest{Graph: initGraph, IdempotencyKey: key, Author: "ana"})
			return err
		}}}},
		{name: "create", first: func(t *testing.T, key string) any {
			res, err := r.gc.CreateBranch(r.ctx, client.CreateBranchRequest{Graph: r.graph, Branch: "b1", IdempotencyKey: key})
			if err != nil {
				fail(t, "create", res, err)
			}
			return res
		}, others: []otherRequest{
			{name: "another source", differs: "source.commit", run: func(key string) error {
				_, err := r.gc.CreateBranch(r.ctx, client.CreateBranchRequest{Graph: r.graph, Branch: "b1", FromCommit: r.head.ID.String(), IdempotencyKey: key})
				return err
			}},
			{name: "another branch", differs: "branch", run: func(key string) error {
				_, err := r.gc.CreateBranch(r.ctx, client.CreateBranchRequest{Graph: r.graph, Branch: "b2", IdempotencyKey: key})
				return err
			}},
		}},
		{name: "write", first: func(t *testing.T, key string) any {
			return write(t, writeReq(key, func(q *client.WriteTableRequest) { q.Files = []string{a} }))
		}, others: []otherRequest{
			otherWrite("another file", "objects", func(q *client.WriteTableRequest) { q.Files = []string{b} }),
			otherWrite("another message", "message", func(q *client.WriteTableRequest) { q.Files, q.Message = []string{a}, "m" }),
			otherWrite("another table", "table", func(q *client.WriteTableRequest) { q.Files, q.Table = []string{a}, "t" }),
		}},
		{name: "write append", first: func(t *testing.T, key string) any {
			return write(t, writeReq(key, func(q *client.WriteTableRequest) { q.Files, q.Append = []string{b}, true }))
		}, others: []otherRequest{
			otherWrite("not an append", "append", func(q *client.WriteTableRequest) { q.Files = []string{b} }),
		}},
		{name: "write remove", first: func(t *testing.T, key string) any {
			if removed == "" {
				removed = r.entryNames(r.branchHead("main").Commit, "u")[0]
			}
			return write(t, writeReq(key, func(q *client.WriteTableRequest) { q.Remove = []string{removed} }))
		}, others: []otherRequest{
			otherWrite("another name", "remove", func(q *client.WriteTableRequest) { q.Remove = []string{"no-such-entry"} }),
		}},
		{name: "write import", first: func(t *testing.T, key string) any {
			return write(t, writeReq(key, func(q *client.WriteTableRequest) { q.Import, q.Append = []string{"external/in/one.csv"}, true }))
		}, others: []otherRequest{
			otherWrite("another key", "imports", func(q *client.WriteTableRequest) { q.Import, q.Append = []string{"external/in/two.csv"}, true }),
		}},
		{name: "write staged", first: func(t *testing.T, key string) any {
			return write(t, writeReq(key, func(q *client.WriteTableRequest) { q.Files = staged }))
		}, others: []otherRequest{
			otherWrite("another last file", "objects", func(q *client.WriteTableRequest) { q.Files = stagedOther }),
		}},
		{name: "merge", first: func(t *testing.T, key string) any {
			res, err := r.gc.Merge(r.ctx, client.MergeRequest{Graph: r.graph, Source: "src", Target: "main", IdempotencyKey: key})
			if err != nil {
				fail(t, "merge", res, err)
			}
			r.report("main", res.Commit)
			return res
		}, others: []otherRequest{{name: "another message", differs: "message", run: func(key string) error {
			_, err := r.gc.Merge(r.ctx, client.MergeRequest{Graph: r.graph, Source: "src", Target: "main", Message: "m", IdempotencyKey: key})
			return err
		}}}},
		{name: "restore", first: func(t *testing.T, key string) any {
			res, err := r.gc.Restore(r.ctx, client.RestoreRequest{Graph: r.graph, Branch: "main", ToCommit: restoreTo, IdempotencyKey: key})
			if err != nil {
				fail(t, "restore", res, err)
			}
			r.report("main", res.Commit)
			return res
		}, others: []otherRequest{{name: "no backup", differs: "no_backup", run: func(key string) error {
			_, err := r.gc.Restore(r.ctx, client.RestoreRequest{Graph: r.graph, Branch: "main", ToCommit: restoreTo, NoBackup: true, IdempotencyKey: key})
			return err
		}}}},
		{name: "tag create", first: func(t *testing.T, key string) any {
			res, err := r.gc.CreateTag(r.ctx, client.CreateTagRequest{Graph: r.graph, Name: "v1", IdempotencyKey: key})
			if err != nil {
				fail(t, "tag create", res, err)
			}
			return res
		}, others: []otherRequest{
			{name: "another branch", differs: "branch", run: func(key string) error {
				_, err := r.gc.CreateTag(r.ctx, client.CreateTagRequest{Graph: r.graph, Name: "v1", Branch: "src", IdempotencyKey: key})
				return err
			}},
			{name: "another name, by name from another SDK", differs: "tag", run: func(key string) error {
				return byName(workflows.CreateTagName, workflows.CreateTagInput{Graph: r.graph, Name: "v9", OpID: key})
			}},
		}},
		{name: "tag delete", first: func(t *testing.T, key string) any {
			res, err := r.gc.DeleteTag(r.ctx, client.DeleteTagRequest{Graph: r.graph, Name: "v1", IdempotencyKey: key})
			if err != nil {
				fail(t, "tag delete", res, err)
			}
			return res
		}, others: []otherRequest{{name: "another tag", differs: "tag", run: func(key string) error {
			_, err := r.gc.DeleteTag(r.ctx, client.DeleteTagRequest{Graph: r.graph, Name: "v9", IdempotencyKey: key})
			return err
		}}}},
		{name: "branch delete", first: func(t *testing.T, key string) any {
			res, err := r.gc.DeleteBranch(r.ctx, client.DeleteBranchRequest{Graph: r.graph, Branch: "doomed", IdempotencyKey: key})
			if err != nil {
				fail(t, "branch delete", res, err)
			}
			return res
		}, others: []otherRequest{{name: "forced", differs: "force", run: func(key string) error {
			_, err := r.gc.DeleteBranch(r.ctx, client.DeleteBranchRequest{Graph: r.graph, Branch: "doomed", Force: true, IdempotencyKey: key})
			return err
		}}}},
		{name: "repair", first: func(t *testing.T, key string) any {
			res, err := r.gc.RepairBranch(r.ctx, client.RepairBranchRequest{Graph: r.graph, Branch: "dup", Keep: dup[0], IdempotencyKey: key})
			if err != nil {
				fail(t, "repair", res, err)
			}
			return res
		}, others: []otherRequest{{name: "keep the other", differs: "keep", run: func(key string) error {
			_, err := r.gc.RepairBranch(r.ctx, client.RepairBranchRequest{Graph: r.graph, Branch: "dup", Keep: dup[1], IdempotencyKey: key})
			return err
		}}}},
		{name: "cleanup", first: func(t *testing.T, key string) any {
			res, err := r.gc.Cleanup(r.ctx, client.CleanupRequest{Graph: r.graph, Mode: workflows.CleanupModeDryRun, KeepNewest: 1, RunID: key})
			if err != nil {
				fail(t, "cleanup", res, err)
			}
			return res
		}, others: []otherRequest{{name: "another window", differs: "keep_newest", run: func(key string) error {
			_, err := r.gc.Cleanup(r.ctx, client.CleanupRequest{Graph: r.graph, Mode: workflows.CleanupModeDryRun, KeepNewest: 2, RunID: key})
			return err
		}}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			key := randomName("key-")
			first := c.first(t, key)
			again := c.first(t, key)
			if !reflect.DeepEqual(again, first) {
				t.Fatalf("the same request again reported %+v; want the first's result %+v", again, first)
			}
			bucket, ledger := r.wholeBucket(), r.ledgerRows()
			for _, o := range c.others {
				err := o.run(key)
				if !errors.Is(err, outcome.ErrConflict) || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), o.differs+" ") {
					t.Errorf("%s under key %s: %v; want a conflict naming the key and %s", o.name, key, err, o.differs)
				}
				if now := r.wholeBucket(); !reflect.DeepEqual(now, bucket) {
					t.Errorf("%s changed the store: %d keys before, %d after", o.name, len(bucket), len(now))
				}
				if now := r.ledgerRows(); !reflect.DeepEqual(now, ledger) {
					t.Errorf("%s changed the ledger:\n%+v\nwant\n%+v", o.name, now, ledger)
				}
			}
		})
	}
}

// TestIdempotencyKey_RunningOperation_SameRequestAttachesOtherRequestConflicts: while a
// create of a name is running (in doubt), the same request attaches to its run, under its
// key or another; a different request of the name is a conflict naming the running
// operation and what differs, under its key or another, and starts nothing.
func TestIdempotencyKey_RunningOperation_SameRequestAttachesOtherRequestConflicts(t *testing.T) {
	t.Parallel()
	r := newRig2(t)
	r.startWorker()
	r.store.Add(faults.Rule{Op: faults.OpPut, KeyPrefix: r.refPrefix("held"), Body: isLiveRef, Mode: faults.Hold})
	req := client.CreateBranchRequest{Graph: r.graph, Branch: "held", IdempotencyKey: "first"}
	h, err := r.gc.StartCreateBranch(r.ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Wait(r.ctx); !errors.Is(err, outcome.ErrInDoubt) {
		t.Fatalf("first create: %v; want in_doubt", err)
	}
	for _, key := range []string{"first", "second"} {
		same := req
		same.IdempotencyKey = key
		h2, err := r.gc.StartCreateBranch(r.ctx, same)
		if err != nil || h2.RunID != h.RunID {
			t.Fatalf("the same request under key %s: %v; want it attached to run %s", key, err, h.RunID)
		}
		other := same
		other.FromCommit = r.head.ID.String()
		_, err = r.gc.StartCreateBranch(r.ctx, other)
		var rc *client.RequestConflictError
		if !errors.As(err, &rc) || !errors.Is(err, outcome.ErrConflict) || rc.OpID != "first" || rc.RunID != h.RunID ||
			len(rc.Differences) != 1 || !strings.HasPrefix(rc.Differences[0], "source.commit ") {
			t.Fatalf("another request under key %s: %v; want a conflict naming operation first and the source", key, err)
		}
	}
	if incs := r.incarnations("held"); len(incs) != 1 {
		t.Fatalf("%d witnesses of held, want the first create's only", len(incs))
	}
	if err := r.gc.AbandonCreate(r.ctx, r.graph, "held", "end of test"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.WaitFinal(r.ctx); !errors.Is(err, outcome.ErrUnpublished) {
		t.Fatalf("after abandon: %v; want unpublished", err)
	}
	r.names = append(r.names, "held")
}

// wholeBucket lists every key of the bucket with its ETag.
func (r *rig) wholeBucket() map[string]string {
	r.t.Helper()
	out := map[string]string{}
	if err := storage.ListAll(r.ctx, r.inner, "", func(o storage.ObjectInfo) error {
		out[o.Key] = o.ETag
		return nil
	}); err != nil {
		r.t.Fatalf("list bucket: %v", err)
	}
	return out
}

// ledgerRows returns every operation row of the ledger.
func (r *rig) ledgerRows() []catalog.Operation {
	r.t.Helper()
	ops, err := r.cat.OperationList(r.ctx, catalog.OperationListParams{Limit: 1000})
	if err != nil {
		r.t.Fatalf("list operations: %v", err)
	}
	return ops
}
