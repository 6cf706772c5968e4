package workflows_test

import (
	"errors"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/workflows"
)

// graft.UpgradeGraph on the real stack (docs/format.md, *Upgrading a format-1 graph*).

// v1Branch forks a format-1 branch from source, with its live format-1 ref.
func (r *rigV2) v1Branch(logical string, source format.Commit) format.Commit {
	r.t.Helper()
	tree := ulid.Make()
	fork, err := graph.ForkCommit(r.ctx, r.store, graph.ForkParams{Graph: r.graph, Tree: tree, Branch: logical,
		Source: source.ID.String(), Author: "test", Message: "fork", Time: time.Now().UTC().Truncate(time.Millisecond), Op: r.op("fork")})
	if err != nil {
		r.t.Fatalf("fork commit: %v", err)
	}
	b, err := format.EncodeBranchRef(format.BranchRef{State: format.RefLive, Branch: logical, Native: format.NativeName(logical, tree), Tree: tree, Op: r.op("ref")})
	if err != nil {
		r.t.Fatal(err)
	}
	if _, err := r.store.Put(r.ctx, format.BranchRefKey(r.graph, format.NativeName(logical, tree)), b, storage.PutOptions{IfNoneMatch: true}); err != nil {
		r.t.Fatalf("put ref: %v", err)
	}
	return fork
}

// etags lists every key of the bucket under the graph with its ETag.
func (r *rigV2) etags() map[string]string {
	r.t.Helper()
	out := map[string]string{}
	if err := storage.ListAll(r.ctx, r.store, format.GraphPrefix(r.graph), func(o storage.ObjectInfo) error {
		out[o.Key] = o.ETag
		return nil
	}); err != nil {
		r.t.Fatal(err)
	}
	return out
}

// wantUpgraded checks the graph record is format 2 naming op, and every live ref is a
// format-2 ref naming heads[native].
func (r *rigV2) wantUpgraded(op string, heads map[string]format.CommitID) {
	r.t.Helper()
	rec, version, err := graph.ReadGraphAny(r.ctx, r.store, r.graph)
	if err != nil || version != format.Version2 || rec.UpgradeOp != op {
		r.t.Fatalf("graph record %+v format %d, %v; want format 2 upgraded by %s", rec, version, err, op)
	}
	for native, head := range heads {
		obj, err := r.store.Get(r.ctx, format.BranchRefKey(r.graph, native))
		if err != nil {
			r.t.Fatal(err)
		}
		ref, v, err := format.DecodeBranchRefAny(obj.Body)
		if err != nil || v != format.Version2 || ref.State != format.RefLive || ref.Head != head {
			r.t.Fatalf("ref %s = %+v (format %d), %v; want a live format-2 ref naming %s", native, ref, v, err, head)
		}
	}
}

// A format-1 graph with two branches becomes format 2: the graph record and both live
// refs, naming their trees' heads, and no other key changes. Running the upgrade again
// gives the same result and changes nothing. The upgraded graph then takes format-2
// appends and a format-2 cleanup that keeps what its roots reach.
func TestUpgradeGraph_FormatOneGraph_BecomesFormatTwo_TwiceSameResult_ThenWritableAndCleanable(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"localfs", "versitygw"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			r := newStackRig(t, backend, 1, true)
			main := r.v1Commit(r.v1Main, "t", "v2")
			fork := r.v1Branch("feature", r.v1Main)
			feature := r.v1Commit(fork, "f", "f1")
			heads := map[string]format.CommitID{
				format.NativeName("main", main.ID.Tree):       main.ID,
				format.NativeName("feature", feature.ID.Tree): feature.ID,
			}
			before := r.etags()

			res, err := r.gc.UpgradeGraph(r.ctx, client.UpgradeGraphRequest{Graph: r.graph})
			if err != nil {
				t.Fatalf("upgrade: %v (%+v)", err, res)
			}
			want := slices.Sorted(func(yield func(string) bool) {
				for n := range heads {
					if !yield(n) {
						return
					}
				}
			})
			if res.Outcome != outcome.Done || !res.GraphRecord || !slices.Equal(res.Refs, want) || res.OpID != client.UpgradeGraphWorkflowID(r.graph) {
				t.Fatalf("upgrade = %+v, want done with the graph record and refs %v", res, want)
			}
			r.wantUpgraded(res.OpID, heads)
			after := r.etags()
			for k, e := range before {
				changed := after[k] != e
				rewritten := k == format.GraphKey(r.graph)
				for n := range heads {
					rewritten = rewritten || k == format.BranchRefKey(r.graph, n)
				}
				if changed != rewritten {
					t.Fatalf("key %s changed=%v, rewritten=%v: the upgrade rewrites the graph record and live refs only", k, changed, rewritten)
				}
			}
			if len(after) != len(before) {
				t.Fatalf("the upgrade added or removed keys: %d before, %d after", len(before), len(after))
			}
			op, err := r.cat.OperationGet(r.ctx, catalog.OperationGetParams{ID: res.OpID})
			if err != nil || op.Kind != catalog.OpUpgradeGraph || op.Outcome != catalog.OutcomeDone {
				t.Fatalf("ledger row %+v, %v; want an upgrade_graph operation, done", op, err)
			}

			again, err := r.gc.UpgradeGraph(r.ctx, client.UpgradeGraphRequest{Graph: r.graph})
			if err != nil || again.Outcome != outcome.Done || !again.GraphRecord || !slices.Equal(again.Refs, res.Refs) {
				t.Fatalf("second upgrade = %+v, %v; want the same result %+v", again, err, res)
			}
			if third := r.etags(); !equalMaps(third, after) {
				t.Fatal("the second upgrade changed the bucket")
			}

			// Format 2 from here: an append on each branch, then a cleanup.
			v := r.version("t", ulid.ULID{}, r.objects("t", 3), nil)
			r.appendOn("main", map[string]ulid.ULID{"t": v})
			r.appendOn("feature", map[string]ulid.ULID{"t": v})
			cl := r.cleanup(client.CleanupRequest{KeepNewest: 1, Mode: workflows.CleanupModeSweep, GuardWindow: noGuard()})
			if cl.Deleted.Commits == 0 || cl.Deleted != cl.Condemned {
				t.Fatalf("cleanup of the upgraded graph: condemned %+v, deleted %+v", cl.Condemned, cl.Deleted)
			}
			r.checkRetained()
			if _, err := r.g.FindBases(r.ctx, r.head("feature"), r.head("main")); err != nil {
				t.Fatalf("merge bases after the cleanup: %v", err)
			}
		})
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// An upgrade while a format-1 operation is in flight on the graph is a conflict that
// writes nothing and records nothing; once that operation is done, the same request
// upgrades.
func TestUpgradeGraph_FormatOneOperationInFlight_ConflictWritesNothing_ThenUpgrades(t *testing.T) {
	t.Parallel()
	r := newStackRig(t, "localfs", 1, true)
	busy := ulid.Make().String()
	if _, err := r.cat.OperationInsert(r.ctx, catalog.OperationInsertParams{ID: busy, Kind: catalog.OpWriteTable, Graph: r.graph}); err != nil {
		t.Fatal(err)
	}
	before := r.etags()
	_, err := r.gc.UpgradeGraph(r.ctx, client.UpgradeGraphRequest{Graph: r.graph})
	var oe *outcome.Error
	if !errors.As(err, &oe) || oe.Outcome != outcome.Conflict {
		t.Fatalf("upgrade with an operation in flight: %v, want conflict", err)
	}
	if !equalMaps(r.etags(), before) {
		t.Fatal("a refused upgrade wrote to the bucket")
	}
	if _, err := r.cat.OperationGet(r.ctx, catalog.OperationGetParams{ID: client.UpgradeGraphWorkflowID(r.graph)}); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("a refused upgrade recorded an operation: %v", err)
	}
	if _, err := r.cat.OperationFinish(r.ctx, catalog.OperationFinishParams{ID: busy, Outcome: catalog.OutcomeDone}); err != nil {
		t.Fatal(err)
	}
	res, err := r.gc.UpgradeGraph(r.ctx, client.UpgradeGraphRequest{Graph: r.graph})
	if err != nil || res.Outcome != outcome.Done || !res.GraphRecord || len(res.Refs) != 1 {
		t.Fatalf("upgrade once the operation is done: %+v, %v", res, err)
	}
	r.wantUpgraded(res.OpID, map[string]format.CommitID{format.NativeName("main", r.v1Main.ID.Tree): r.v1Main.ID})
	if _, err := r.gc.UpgradeGraph(r.ctx, client.UpgradeGraphRequest{Graph: "no-such-graph"}); !errors.As(err, &oe) || oe.Outcome != outcome.NotFound {
		t.Fatalf("upgrade of a missing graph: %v, want not_found", err)
	}
}

// The worker running an upgrade is killed (a real process, SIGKILL) after the graph
// record and one branch's ref were upgraded, while the other's swap stalls; a new
// worker finishes the same upgrade.
func TestUpgradeGraph_WorkerKilledMidway_NewWorkerFinishes(t *testing.T) {
	t.Parallel()
	r := newStackRig(t, "versitygw", 1, false)
	fork := r.v1Branch("feature", r.v1Main)
	heads := map[string]format.CommitID{
		format.NativeName("main", r.v1Main.ID.Tree): r.v1Main.ID,
		format.NativeName("feature", fork.ID.Tree):  fork.ID,
	}
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), childWorkerEnv+"=1",
		"GRAFT_CHILD_S3_ENDPOINT="+r.s3cfg.Endpoint, "GRAFT_CHILD_S3_BUCKET="+r.s3cfg.Bucket,
		"GRAFT_CHILD_S3_ACCESS="+r.s3cfg.AccessKeyID, "GRAFT_CHILD_S3_SECRET="+r.s3cfg.SecretAccessKey,
		"GRAFT_CHILD_STALL_PREFIX="+format.BranchRefPrefix(r.graph, "main"), "GRAFT_CHILD_DB_SCHEMA="+r.cat.Schema(),
		"GRAFT_CHILD_TEMPORAL="+testenvTemporal(t), "GRAFT_CHILD_TASK_QUEUE="+r.queue)
	child.Stdout, child.Stderr = os.Stderr, os.Stderr
	if err := child.Start(); err != nil {
		t.Fatalf("start child worker: %v", err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			child.Process.Kill()
			child.Wait()
		}
	})
	h, err := r.gc.StartUpgradeGraph(r.ctx, client.UpgradeGraphRequest{Graph: r.graph})
	if err != nil {
		t.Fatal(err)
	}
	featureRef := format.BranchRefKey(r.graph, format.NativeName("feature", fork.ID.Tree))
	deadline := time.Now().Add(time.Minute)
	for {
		obj, err := r.store.Get(r.ctx, featureRef)
		if err == nil && format.PeekFormat(obj.Body) == format.Version2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the child never upgraded the feature ref")
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // the child is now stalled on main's ref swap
	child.Process.Kill()
	child.Wait()
	killed = true
	mainRef, err := r.store.Get(r.ctx, format.BranchRefKey(r.graph, format.NativeName("main", r.v1Main.ID.Tree)))
	if err != nil || format.PeekFormat(mainRef.Body) != format.Version {
		t.Fatalf("main's ref before the new worker: format %d, %v; want still format 1", format.PeekFormat(mainRef.Body), err)
	}
	if _, version, err := graph.ReadGraphAny(r.ctx, r.store, r.graph); err != nil || version != format.Version2 {
		t.Fatalf("graph record before the new worker: format %d, %v; want 2", version, err)
	}
	r.startWorker()
	res, err := h.WaitFinal(r.ctx)
	if err != nil || res.Outcome != outcome.Done || !res.GraphRecord || len(res.Refs) != 2 {
		t.Fatalf("upgrade after the worker died: %+v, %v; want done with both refs", res, err)
	}
	r.wantUpgraded(res.OpID, heads)
}
