package workflows_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/storagetest"
	"github.com/graftworks/graft/worker"
	"github.com/graftworks/graft/workflows"
)

// Helpers of the cleanup tests. Every test ends with checkInvariants.

// noGuard disables the guard window, so data written a moment ago is old enough.
func noGuard() *time.Duration { d := time.Duration(0); return &d }

// cleanup runs a cleanup of the rig's graph to its end and fails the test on an error.
func (r *rig) cleanup(req client.CleanupRequest) workflows.CleanupResult {
	r.t.Helper()
	req.Graph = r.graph
	res, err := r.gc.Cleanup(r.ctx, req)
	if err != nil {
		r.t.Fatalf("cleanup %+v: %v (result %+v)", req, err, res)
	}
	return res
}

// cleanupRecorded runs a cleanup like cleanup and, when recording, saves the history of
// its first execution as testdata/<name>.json for the replay test.
func (r *rig) cleanupRecorded(req client.CleanupRequest, name string) workflows.CleanupResult {
	r.t.Helper()
	req.Graph = r.graph
	h, err := r.gc.StartCleanup(r.ctx, req)
	if err != nil {
		r.t.Fatalf("start cleanup: %v", err)
	}
	res, err := h.Wait(r.ctx)
	if err != nil {
		r.t.Fatalf("cleanup %+v: %v (result %+v)", req, err, res)
	}
	recordHistory(r.t, r, h.WorkflowID, h.RunID, name)
	return res
}

// stoppableWorker is a worker the test stops itself (exactly once).
type stoppableWorker struct {
	w    sdkworker.Worker
	once sync.Once
}

func (s *stoppableWorker) stop() { s.once.Do(s.w.Stop) }

// newWorker starts a worker on the rig's task queue that the test may stop early.
func (r *rig) newWorker() *stoppableWorker {
	r.t.Helper()
	w := worker.New(r.tc, r.taskQueue, r.acts(), sdkworker.Options{})
	if err := w.Start(); err != nil {
		r.t.Fatalf("start worker: %v", err)
	}
	s := &stoppableWorker{w: w}
	r.t.Cleanup(s.stop)
	return s
}

// commit appends to main a commit writing a one-object version of table, at time at,
// and moves r.main to it.
func (r *rig) commitAt(table, body string, at time.Time) graph.CommitView {
	r.t.Helper()
	return r.commitOn(&r.main, table, body, at)
}

// commitOn appends to *head's tree a commit writing a one-object version of table, at
// time at, and moves *head to it.
func (r *rig) commitOn(head *graph.CommitView, table, body string, at time.Time) graph.CommitView {
	r.t.Helper()
	return r.commitEntryOn(head, table, "", body, at)
}

// commitEntryOn is commitOn with the entry named name ("" names it by its object's ULID).
func (r *rig) commitEntryOn(head *graph.CommitView, table, name, body string, at time.Time) graph.CommitView {
	r.t.Helper()
	at = at.UTC().Truncate(time.Millisecond)
	g := r.graphAPI()
	id := ulid.Make()
	if name == "" {
		name = id.String()
	}
	sum := sha256.Sum256([]byte(body))
	if _, err := r.inner.Put(r.ctx, format.ObjectKey(r.graph, table, id), []byte(body), storage.PutOptions{IfNoneMatch: true}); err != nil {
		r.t.Fatalf("put object: %v", err)
	}
	v, err := g.PutVersion(r.ctx, graph.VersionSpec{Table: table, VersionID: ulid.Make(), Time: at, Op: "write-" + body,
		Put: []format.ManifestEntry{{Name: name, Object: id, Size: int64(len(body)), SHA256: hex.EncodeToString(sum[:])}}})
	if err != nil {
		r.t.Fatalf("write table: %v", err)
	}
	res, err := g.Append(r.ctx, graph.CommitSpec{Branch: head.Branch, ExpectedHead: head.ID.String(),
		SetPins: map[string]ulid.ULID{table: v.Version.ID}, Author: "test", Message: "write " + table, Time: at, Op: "commit-" + body})
	if err != nil {
		r.t.Fatalf("append commit: %v", err)
	}
	if res.Publish.Outcome != graph.Published {
		r.t.Fatalf("append commit: %+v", res.Publish)
	}
	*head = r.view(res.Plan.Commit.ID)
	return *head
}

// handBranch writes a branch by hand — a fork of source in a fresh tree and, if live, its
// live ref — with no witness in the ledger, and returns its fork commit.
func (r *rig) handBranch(logical string, source graph.CommitView, at time.Time, live bool) graph.CommitView {
	r.t.Helper()
	g := r.graphAPI()
	plan, err := g.PlanFork(r.ctx, graph.ForkSpec{Branch: logical, Tree: ulid.Make(), Source: source.ID.String(),
		Author: "test", Message: "by hand", Time: at.UTC().Truncate(time.Millisecond), Op: "hand-" + logical})
	if err != nil {
		r.t.Fatalf("plan fork: %v", err)
	}
	if err := g.WriteFork(r.ctx, plan); err != nil {
		r.t.Fatalf("fork commit: %v", err)
	}
	if live {
		if _, err := g.PutForkRef(r.ctx, plan); err != nil {
			r.t.Fatalf("fork ref: %v", err)
		}
	}
	return r.view(plan.Commit.ID)
}

// liveRefBytes is the live ref naming head, of head's tree as an incarnation of logical,
// as a hand-made create would write it.
func liveRefBytes(t *testing.T, logical string, head format.CommitID) []byte {
	t.Helper()
	tree := head.Tree
	b, err := format.EncodeBranchRef(format.BranchRef{State: format.RefLive, Branch: logical, Native: format.NativeName(logical, tree), Tree: tree,
		Head: head, Op: "late-" + tree.String()})
	if err != nil {
		t.Fatalf("encode ref: %v", err)
	}
	return b
}

// putTag writes a live tag naming commit straight into the bucket.
func (r *rig) putTag(name string, commit graph.CommitView) {
	r.t.Helper()
	b, err := format.EncodeTag(format.Tag{State: format.TagLive, Name: name, Commit: commit.ID, Op: "tag-" + name, CreatedAt: time.Now()})
	if err != nil {
		r.t.Fatalf("encode tag: %v", err)
	}
	if _, err := r.inner.Put(r.ctx, format.TagKey(r.graph, name), b, storage.PutOptions{IfNoneMatch: true}); err != nil {
		r.t.Fatalf("put tag: %v", err)
	}
}

// garbage writes n data objects per table that no version lists, straight into the
// bucket, and returns their keys.
func (r *rig) garbage(tables []string, n int) []string {
	r.t.Helper()
	objs := map[string][]byte{}
	for _, table := range tables {
		for range n {
			objs[format.ObjectKey(r.graph, table, ulid.Make())] = []byte("garbage")
		}
	}
	if _, err := storagetest.PutMany(r.ctx, r.inner, objs, 16); err != nil {
		r.t.Fatalf("seed garbage: %v", err)
	}
	keys := make([]string, 0, len(objs))
	for k := range objs {
		keys = append(keys, k)
	}
	return keys
}

// bucket lists every key of the graph with its ETag.
func (r *rig) bucket() map[string]string {
	r.t.Helper()
	out := map[string]string{}
	if err := storage.ListAll(r.ctx, r.inner, format.GraphPrefix(r.graph), func(o storage.ObjectInfo) error {
		out[o.Key] = o.ETag
		return nil
	}); err != nil {
		r.t.Fatalf("list bucket: %v", err)
	}
	return out
}

// exists reports whether key is in the bucket.
func (r *rig) exists(key string) bool {
	r.t.Helper()
	_, err := r.inner.Head(r.ctx, key)
	if err != nil && !errors.Is(err, storage.ErrNotFound) {
		r.t.Fatalf("head %s: %v", key, err)
	}
	return err == nil
}

// commitKey is the storage key of c.
func (r *rig) commitKey(c graph.CommitView) string { return format.CommitIDKey(r.graph, c.ID) }

// dataKeys returns the version key of table in c and the keys of the objects it lists.
func (r *rig) dataKeys(c graph.CommitView, table string) (string, []string) {
	r.t.Helper()
	v := c.Pins[table]
	g := r.graphAPI()
	tv, err := g.Version(r.ctx, table, v)
	if err != nil {
		r.t.Fatalf("read version %s of %s: %v", v, table, err)
	}
	var objs []string
	if err := g.EachEntry(r.ctx, tv, func(e format.ManifestEntry) error {
		objs = append(objs, graph.ObjectKeyOf(r.graph, table, e))
		return nil
	}); err != nil {
		r.t.Fatalf("read entries of %s: %v", v, err)
	}
	return format.TableVersionKey(r.graph, table, v), objs
}

// wantKept fails unless commit c and the version of table it pins (with its objects) exist.
func (r *rig) wantKept(what string, c graph.CommitView, table string) {
	r.t.Helper()
	if !r.exists(r.commitKey(c)) {
		r.t.Fatalf("%s: commit %s was deleted", what, c.ID)
	}
	v, objs := r.dataKeys(c, table)
	for _, k := range append([]string{v}, objs...) {
		if !r.exists(k) {
			r.t.Fatalf("%s: %s was deleted", what, k)
		}
	}
}

// wantGone fails unless every key is gone from the bucket.
func (r *rig) wantGone(what string, keys ...string) {
	r.t.Helper()
	for _, k := range keys {
		if r.exists(k) {
			r.t.Fatalf("%s: %s still exists", what, k)
		}
	}
}

// condemnedSummary reads a run's condemned set from the ledger.
func (r *rig) condemnedSummary(runID string) (condemned, deleted int64) {
	r.t.Helper()
	tallies, err := r.cat.CondemnedSummary(r.ctx, catalog.CondemnedSummaryParams{RunID: runID})
	if err != nil {
		r.t.Fatalf("summarise run %s: %v", runID, err)
	}
	for _, t := range tallies {
		condemned += t.Count
		if t.State == catalog.CondemnedDeleted {
			deleted += t.Count
		}
	}
	return condemned, deleted
}

// checkInvariants runs the oracle (internal/oracle) over the bucket and the ledger now,
// and fails the test on any violation. Every real-stack test runs it once more when it
// ends (harness_test.go).
func checkInvariants(t *testing.T, r *rig) {
	t.Helper()
	if err := r.oracle(false); err != nil {
		t.Fatal(err)
	}
}

// hasUnsettled reports whether res skipped native's tree as unsettled.
func hasUnsettled(res workflows.CleanupResult, native string) (workflows.UnsettledTree, bool) {
	for _, u := range res.SkippedUnsettled {
		if u.Native == native || strings.HasSuffix(native, "."+u.Tree) {
			return u, true
		}
	}
	return workflows.UnsettledTree{}, false
}

// holdGraphLock takes the rig's graph's ledger lock (as a cleanup run's insert and finish
// take it) in a transaction of its own, and returns the function that releases it.
func (r *rig) holdGraphLock() (unlock func()) {
	r.t.Helper()
	locked, release, held := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		held <- r.cat.InTx(r.ctx, func(tx pgx.Tx) error {
			if _, err := tx.Exec(r.ctx, `SELECT pg_advisory_xact_lock(hashtextextended('graft/graph/' || current_schema() || '/' || $1, 0))`,
				r.graph); err != nil {
				return err
			}
			close(locked)
			<-release
			return nil
		})
	}()
	select {
	case <-locked:
	case err := <-held:
		r.t.Fatalf("take the graph lock: %v", err)
	}
	return func() {
		r.t.Helper()
		close(release)
		if err := <-held; err != nil {
			r.t.Fatalf("lock holder: %v", err)
		}
	}
}

// graphLockAwaited reports whether some transaction waits for the rig's graph's ledger
// lock (the lock holdGraphLock holds); another test's graph lock does not count.
func (r *rig) graphLockAwaited() bool {
	var waiting int
	err := r.cat.InTx(r.ctx, func(tx pgx.Tx) error {
		return tx.QueryRow(r.ctx, `
			SELECT count(*) FROM pg_locks
			WHERE locktype = 'advisory' AND NOT granted AND objsubid = 1
			  AND ((classid::bigint << 32) | objid::bigint) = hashtextextended('graft/graph/' || current_schema() || '/' || $1, 0)`,
			r.graph).Scan(&waiting)
	})
	return err == nil && waiting > 0
}

// sweepInBatches is a sweep of r's graph keeping the newest version, in batches of 25 on a
// 2s heartbeat: a sweep long enough to interrupt.
func (r *rig) sweepInBatches() client.CleanupRequest {
	return client.CleanupRequest{Graph: r.graph, KeepNewest: 1, Mode: workflows.CleanupModeSweep,
		GuardWindow: noGuard(), Tuning: &workflows.CleanupTuning{BatchSize: 25, HeartbeatTimeout: 2 * time.Second}}
}

// waitSweepUnderWay waits until the run of cleanup h has deleted at least n keys, and
// returns the run's id.
func (r *rig) waitSweepUnderWay(h *client.CleanupHandle, n int64) string {
	r.t.Helper()
	var runID string
	r.waitFor("a sweep under way", time.Minute, func() bool {
		p, err := h.Progress(r.ctx)
		if err != nil || p.RunID == "" {
			return false
		}
		runID = p.RunID
		_, deleted := r.condemnedSummary(runID)
		return deleted >= n
	})
	return runID
}
