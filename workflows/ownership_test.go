package workflows_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
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
			w := sdkworker.New(r.tc, r.queue, sdkworker.Options{})
			worker.Register(w, &activities.Activities{Store: fs, Catalog: r.cat, Workflows: worker.TemporalWorkflows(r.tc)})
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
