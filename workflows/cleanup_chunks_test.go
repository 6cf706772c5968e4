package workflows_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	sdkclient "go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/catalog/catalogtest"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/internal/testenv"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/faults"
	"github.com/graftworks/graft/storage/localfs"
	"github.com/graftworks/graft/storage/s3"
	"github.com/graftworks/graft/storage/storagetest"
	"github.com/graftworks/graft/worker"
	"github.com/graftworks/graft/workflows"
)

// Cleanup over graphs (docs/format.md, *Cleanup*), on the real stack: the
// Temporal dev server, Postgres, and each of the local directory store and versitygw.

// stackRig is a real stack around a graph made with the graph API.
type stackRig struct {
	t       *testing.T
	ctx     context.Context
	store   storage.Store
	dir     string // the local store's directory; "" on versitygw
	cat     *catalog.Catalog
	gc      *client.Client
	graph   string
	g       *graph.Graph
	mainRef format.BranchRef
	root    format.CommitID
	n       int
	// The stack, for tests that run their own workers.
	tc    sdkclient.Client
	queue string
	s3cfg s3.Config
}

// eachStackStore runs fn on a fresh rig over the local store and over versitygw.
func eachStackStore(t *testing.T, fn func(t *testing.T, r *stackRig)) {
	t.Helper()
	for _, name := range []string{"localfs", "versitygw"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn(t, newStackRigWithWorker(t, name))
		})
	}
}

func newStackRigWithWorker(t *testing.T, backend string) *stackRig {
	return newStackRig(t, backend, true)
}

// newStackRig makes a rig over a new graph, with a worker when withWorker.
func newStackRig(t *testing.T, backend string, withWorker bool) *stackRig {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	r := &stackRig{t: t, ctx: ctx, cat: catalogtest.Open(t), graph: randomName("g")}
	switch backend {
	case "localfs":
		r.dir = t.TempDir()
		st, err := localfs.Open(r.dir)
		if err != nil {
			t.Fatalf("local store: %v", err)
		}
		r.store = st
	default:
		srv := testenv.VersityGW(t)
		if backend == "minio" {
			srv = testenv.MinIO(t)
		}
		r.s3cfg = s3.Config{Endpoint: srv.Endpoint, Region: srv.Region, Bucket: srv.NewBucket(t), PathStyle: true,
			AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey}
		st, err := s3.New(ctx, r.s3cfg)
		if err != nil {
			t.Fatalf("s3 store: %v", err)
		}
		r.store = st
	}
	ts := testenv.Temporal(t)
	tc, err := sdkclient.DialContext(ctx, sdkclient.Options{HostPort: ts.HostPort, Namespace: ts.Namespace, Logger: quietLogger()})
	if err != nil {
		t.Fatalf("dial temporal: %v", err)
	}
	t.Cleanup(tc.Close)
	r.tc, r.queue = tc, randomName("graft-test-")
	r.gc = client.New(tc, client.Options{TaskQueue: r.queue, PollInterval: 200 * time.Millisecond})
	if withWorker {
		r.startWorker()
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	init, err := graph.Init(ctx, r.store, graph.InitParams{Graph: r.graph, MainTree: ulid.Make(), Op: "init-" + r.graph, Time: now})
	if err != nil {
		t.Fatalf("init graph: %v", err)
	}
	r.mainRef, r.root = init.MainRef, init.Root.ID
	var err2 error
	if r.g, err2 = graph.Open(r.store, r.graph); err2 != nil {
		t.Fatal(err2)
	}
	if _, err := r.cat.GraphInsert(ctx, catalog.GraphInsertParams{Name: r.graph, Locator: backend}); err != nil {
		t.Fatalf("ledger graph: %v", err)
	}
	return r
}

// startWorker runs an in-process worker on the rig's task queue.
func (r *stackRig) startWorker() {
	r.t.Helper()
	w := worker.New(r.tc, r.queue, &activities.Activities{Store: r.store, Catalog: r.cat, Workflows: worker.TemporalWorkflows(r.tc)}, sdkworker.Options{})
	if err := w.Start(); err != nil {
		r.t.Fatalf("start worker: %v", err)
	}
	r.t.Cleanup(w.Stop)
}

func (r *stackRig) op(what string) string { r.n++; return fmt.Sprintf("%s-%d", what, r.n) }

// objects writes n small data objects of table and returns their entries.
func (r *stackRig) objects(table string, n int) []format.ManifestEntry {
	r.t.Helper()
	out := make([]format.ManifestEntry, n)
	bodies := map[string][]byte{}
	for i := range out {
		id := ulid.Make()
		body := []byte(fmt.Sprintf("object %d of %s", i, table))
		sum := sha256.Sum256(body)
		out[i] = format.ManifestEntry{Name: id.String(), Object: id, Size: int64(len(body)), SHA256: hex.EncodeToString(sum[:])}
		bodies[format.ObjectKey(r.graph, table, id)] = body
	}
	if _, err := storagetest.PutMany(r.ctx, r.store, bodies, 16); err != nil {
		r.t.Fatalf("put objects: %v", err)
	}
	return out
}

// leafNames returns n ascending entry names after every `every`-th of which, and only
// there, a manifest leaf ends (format.ManifestMap's boundary rule): a chunking a test
// can count on.
func leafNames(n, every int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		name := fmt.Sprintf("part-%08d", i)
		if format.ManifestMap.BoundaryAfter(0, name) == ((len(out)+1)%every == 0) {
			out = append(out, name)
		}
	}
	return out
}

// named gives entries the names, in order.
func named(entries []format.ManifestEntry, names []string) []format.ManifestEntry {
	for i := range entries {
		entries[i].Name = names[i]
	}
	return entries
}

// version writes a version of table: base's entries with put added and del removed.
func (r *stackRig) version(table string, base ulid.ULID, put []format.ManifestEntry, del []string) ulid.ULID {
	r.t.Helper()
	p, err := r.g.PutVersion(r.ctx, graph.VersionSpec{Table: table, VersionID: ulid.Make(), Base: base, Put: put, Delete: del,
		Time: time.Now().UTC().Truncate(time.Millisecond), Op: r.op("version")})
	if err != nil {
		r.t.Fatalf("put version of %s: %v", table, err)
	}
	return p.Version.ID
}

// appendOn appends to branch a commit setting pins.
func (r *stackRig) appendOn(branch string, pins map[string]ulid.ULID) graph.Commit {
	r.t.Helper()
	res, err := r.g.Append(r.ctx, graph.CommitSpec{Branch: branch, SetPins: pins, Author: "test", Message: "append",
		Time: time.Now().UTC().Truncate(time.Millisecond), Op: r.op("append")})
	if err != nil {
		r.t.Fatalf("append to %s: %v", branch, err)
	}
	c, err := r.g.Commit(r.ctx, res.Plan.Commit.ID)
	if err != nil {
		r.t.Fatal(err)
	}
	return c
}

func (r *stackRig) head(branch string) graph.Commit {
	r.t.Helper()
	h, err := r.g.BranchHead(r.ctx, branch)
	if err != nil {
		r.t.Fatalf("head of %s: %v", branch, err)
	}
	return h.Commit
}

func (r *stackRig) cleanup(req client.CleanupRequest) workflows.CleanupResult {
	r.t.Helper()
	req.Graph = r.graph
	res, err := r.gc.Cleanup(r.ctx, req)
	if err != nil {
		r.t.Fatalf("cleanup %+v: %v (result %+v)", req, err, res)
	}
	return res
}

func (r *stackRig) exists(key string) bool {
	r.t.Helper()
	_, err := r.store.Head(r.ctx, key)
	if err != nil && !errors.Is(err, storage.ErrNotFound) {
		r.t.Fatalf("head %s: %v", key, err)
	}
	return err == nil
}

// chunksOf returns the manifest chunk keys of a version.
func (r *stackRig) chunksOf(table string, v ulid.ULID) map[string]bool {
	r.t.Helper()
	out := map[string]bool{}
	m := r.g.NewMarker(func(mk graph.Mark) error {
		if mk.Kind == graph.MarkManifestChunk {
			out[mk.Key] = true
		}
		return nil
	})
	if err := m.Version(r.ctx, table, v); err != nil {
		r.t.Fatalf("mark version %s of %s: %v", v, table, err)
	}
	return out
}

// checkRetained is the retention invariant the oracle checks: every key a
// root reaches — the head of every live ref, every live tag, every commit an operation
// pins — exists: commits, pins and lineage chunks, versions, manifest chunks and the
// objects graft wrote; an external object exists too (cleanup never deletes one).
func (r *stackRig) checkRetained(extra ...format.CommitID) {
	r.t.Helper()
	var missing []string
	m := r.g.NewMarker(func(mk graph.Mark) error {
		if !r.exists(mk.Key) {
			missing = append(missing, fmt.Sprintf("%s %s", mk.Kind, mk.Key))
		}
		return nil
	})
	var roots []format.CommitID
	branches, err := graph.ListBranches(r.ctx, r.store, r.graph)
	if err != nil {
		r.t.Fatalf("list branches: %v", err)
	}
	for _, b := range branches {
		h, err := r.g.HeadOf(r.ctx, b)
		if err != nil {
			r.t.Fatalf("head of %s: %v", b.Native, err)
		}
		roots = append(roots, h.Commit.ID)
	}
	tags, err := graph.ListTags(r.ctx, r.store, r.graph)
	if err != nil {
		r.t.Fatalf("list tags: %v", err)
	}
	for _, tg := range tags {
		if tg.Tag.State == format.TagLive {
			roots = append(roots, tg.Tag.Commit)
		}
	}
	for _, id := range append(roots, extra...) {
		c, err := r.g.Commit(r.ctx, id)
		if err != nil {
			r.t.Fatalf("root commit %s: %v", id, err)
		}
		if err := m.Commit(r.ctx, c); err != nil {
			r.t.Fatalf("walk root %s: %v", id, err)
		}
	}
	if len(missing) > 0 {
		r.t.Fatalf("cleanup deleted keys a root reaches: %v", missing)
	}
}

// A table version's chunks are shared with the version appended to it: cleanup keeping
// only the newest commit reclaims the old version, the chunks only it used and the
// objects only it listed, keeps every chunk the new version shares with it, and never
// deletes an object imported by reference, though only the reclaimed version named it.
func TestCleanup_SharedChunkKept_UnreferencedChunkSwept_ExternalObjectSurvives(t *testing.T) {
	t.Parallel()
	eachStackStore(t, func(t *testing.T, r *stackRig) {
		const table = "events"
		// Four leaves of 30 entries, then ten more: the middle leaves are shared.
		names := leafNames(130, 30)
		ents := named(r.objects(table, 120), names[:120])
		extKey := "landing-" + r.graph + "/part-0.parquet"
		if _, err := r.store.Put(r.ctx, extKey, []byte("not graft's"), storage.PutOptions{IfNoneMatch: true}); err != nil {
			t.Fatal(err)
		}
		ext, err := graph.ImportEntries(r.ctx, r.store, r.graph, []graph.ImportRef{{Key: extKey, Name: "imported/part-0.parquet"}})
		if err != nil {
			t.Fatalf("import: %v", err)
		}
		v1 := r.version(table, ulid.ULID{}, append(ents, ext...), nil)
		old := r.appendOn("main", map[string]ulid.ULID{table: v1})
		// v2: ten appended, the first five removed, the external entry dropped.
		more := named(r.objects(table, 10), names[120:])
		del := []string{"imported/part-0.parquet"}
		for _, e := range ents[:5] {
			del = append(del, e.Name)
		}
		v2 := r.version(table, v1, more, del)
		r.appendOn("main", map[string]ulid.ULID{table: v2})

		c1, c2 := r.chunksOf(table, v1), r.chunksOf(table, v2)
		var shared, onlyOld []string
		for k := range c1 {
			if c2[k] {
				shared = append(shared, k)
			} else {
				onlyOld = append(onlyOld, k)
			}
		}
		if len(shared) == 0 || len(onlyOld) == 0 {
			t.Fatalf("versions share %d chunks, %d only in the old one: the test needs both", len(shared), len(onlyOld))
		}

		dry := r.cleanup(client.CleanupRequest{KeepNewest: 1, Mode: workflows.CleanupModeDryRun, GuardWindow: noGuard()})
		res := r.cleanup(client.CleanupRequest{KeepNewest: 1, Mode: workflows.CleanupModeSweep, GuardWindow: noGuard()})
		if dry.Condemned != res.Condemned {
			t.Fatalf("dry run planned %+v, the sweep condemned %+v", dry.Condemned, res.Condemned)
		}
		if res.Deleted != res.Condemned || res.Condemned.Versions != 1 || res.Objects.ManifestChunks != int64(len(onlyOld)) {
			t.Fatalf("condemned %+v deleted %+v, v2 %+v: want one version and the %d chunks only it used",
				res.Condemned, res.Deleted, res.Objects, len(onlyOld))
		}
		// The root commit and the old commit go; 5 objects and the old chunks count as objects.
		if res.Condemned.Commits != 2 || res.Condemned.Objects != int64(5+len(onlyOld))+res.Objects.GraphChunks {
			t.Fatalf("condemned %+v (v2 %+v): want 2 commits, 5 objects and %d chunks", res.Condemned, res.Objects, len(onlyOld))
		}
		for _, k := range shared {
			if !r.exists(k) {
				t.Fatalf("chunk %s, shared with the retained version, was deleted", k)
			}
		}
		for _, k := range onlyOld {
			if r.exists(k) {
				t.Fatalf("chunk %s, which only the reclaimed version used, survived", k)
			}
		}
		for _, e := range ents[:5] {
			if r.exists(format.ObjectKey(r.graph, table, e.Object)) {
				t.Fatalf("object %s, which only the reclaimed version listed, survived", e.Object)
			}
		}
		if r.exists(format.TableVersionKey(r.graph, table, v1)) || r.exists(format.CommitIDKey(r.graph, old.ID)) {
			t.Fatal("the old version or commit survived")
		}
		if !r.exists(extKey) {
			t.Fatalf("cleanup deleted %s, an object graft did not write", extKey)
		}
		r.checkRetained()

		// A second run finds nothing more.
		again := r.cleanup(client.CleanupRequest{KeepNewest: 1, Mode: workflows.CleanupModeSweep, GuardWindow: noGuard()})
		if again.Condemned.Keys() != 0 {
			t.Fatalf("second run condemned %+v", again.Condemned)
		}
		r.checkRetained()
	})
}

// A writer that crashed mid-upload leaves a multipart upload of a dozen parts and its
// upload record: cleanup leaves it alone inside the guard window, a dry run only reports
// it, and a sweep aborts it and deletes the record — it is no longer listed and its parts
// are gone. The same holds where the server lists uploads only for one exact key (MinIO),
// emulated on each backend and on MinIO itself: cleanup finds uploads by their records,
// never by a prefix.
func TestCleanup_InterruptedMultipartUpload_AbortedAndItsPartsGone(t *testing.T) {
	t.Parallel()
	for _, listing := range []struct {
		name string
		mode faults.MultipartListing
	}{{"full_listing", faults.ListAllUploads}, {"exact_key_listing", faults.ListExactKeyUploads}} {
		t.Run(listing.name, func(t *testing.T) {
			t.Parallel()
			for _, backend := range []string{"localfs", "versitygw"} {
				t.Run(backend, func(t *testing.T) {
					t.Parallel()
					r := newStackRig(t, backend, false)
					raw := r.store
					w := faults.Wrap(raw)
					w.SetMultipartListing(listing.mode)
					r.store = w // the worker's store
					r.startWorker()
					interruptedUploadIsReclaimed(t, r, raw)
				})
			}
		})
	}
	// On MinIO itself, whose ListMultipartUploads answers only for one exact key.
	t.Run("minio", func(t *testing.T) {
		t.Parallel()
		r := newStackRig(t, "minio", false)
		r.startWorker()
		interruptedUploadIsReclaimed(t, r, r.store)
	})
}

func interruptedUploadIsReclaimed(t *testing.T, r *stackRig, raw storage.Store) {
	m, ok := storage.AsMultipart(raw)
	if !ok {
		t.Fatal("the store has no multipart uploads")
	}
	const table = "big"
	partSize := max(m.MultipartLimits().MinPartSize, 64<<10)
	id := ulid.Make()
	key, recKey := format.ObjectKey(r.graph, table, id), format.UploadKey(r.graph, table, id)
	// The writer sends all twelve parts, then dies before its complete: every complete and
	// abort it sends is refused, so the upload stays as a crash leaves it.
	writer := faults.Wrap(raw)
	writer.Add(faults.Rule{Name: "crash", Op: faults.OpCompleteMultipart, Mode: faults.Refuse, Status: 403})
	writer.Add(faults.Rule{Name: "crash", Op: faults.OpAbortMultipart, Mode: faults.Refuse, Status: 403})
	size := 12 * partSize
	_, err := graph.UploadObject(r.ctx, writer, r.graph, table, id, bytes.NewReader(bytes.Repeat([]byte{7}, int(size))), size,
		graph.UploadOptions{Threshold: 1024, PartSize: partSize})
	if !errors.Is(err, storage.ErrRefused) {
		t.Fatalf("the crashing upload: %v", err)
	}
	if c := writer.Count(faults.OpUploadPart); c.Attempted != 12 {
		t.Fatalf("%d parts sent, want 12", c.Attempted)
	}
	rec, err := raw.Get(r.ctx, recKey)
	if err != nil {
		t.Fatalf("the upload record: %v", err)
	}
	up, err := format.DecodeUpload(rec.Body)
	if err != nil || up.UploadID == "" {
		t.Fatalf("the upload record %s: %+v, %v", rec.Body, up, err)
	}
	upID := up.UploadID
	// An upload outside the graph's object keys is never touched.
	otherKey := "landing-" + r.graph + "/big.parquet"
	otherID, err := m.CreateMultipart(r.ctx, otherKey)
	if err != nil {
		t.Fatal(err)
	}
	listed := func(k, id string) bool {
		found := false
		if err := storage.ListAllMultipart(r.ctx, m, k, func(u storage.Upload) error {
			found = found || (u.Key == k && u.UploadID == id)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return found
	}

	guarded := r.cleanup(client.CleanupRequest{KeepNewest: 1, Mode: workflows.CleanupModeSweep})
	if guarded.Objects.UploadsFound != 0 || guarded.Objects.UploadRecordsRemoved != 0 || !listed(key, upID) || !r.exists(recKey) {
		t.Fatalf("inside the guard window: %+v, listed %v", guarded.Objects, listed(key, upID))
	}
	dry := r.cleanup(client.CleanupRequest{KeepNewest: 1, Mode: workflows.CleanupModeDryRun, GuardWindow: noGuard()})
	if dry.Objects.UploadsFound != 1 || dry.Objects.UploadsAborted != 0 || dry.Objects.UploadRecordsRemoved != 0 ||
		len(dry.Objects.UploadKeys) != 1 || dry.Objects.UploadKeys[0] != key || !listed(key, upID) || !r.exists(recKey) {
		t.Fatalf("dry run: %+v, still listed %v; want it reported and left", dry.Objects, listed(key, upID))
	}
	res := r.cleanup(client.CleanupRequest{KeepNewest: 1, Mode: workflows.CleanupModeSweep, GuardWindow: noGuard()})
	if res.Objects.UploadsFound != 1 || res.Objects.UploadsAborted != 1 || res.Objects.UploadRecordsRemoved != 1 {
		t.Fatalf("sweep: %+v, want the upload aborted and its record removed", res.Objects)
	}
	if listed(key, upID) {
		t.Fatal("the aborted upload is still listed")
	}
	if r.exists(recKey) {
		t.Fatal("the upload record survived the sweep")
	}
	if !listed(otherKey, otherID) {
		t.Fatal("cleanup aborted an upload outside the graph's object keys")
	}
	// Its parts are gone: the upload can be neither continued nor completed.
	body := bytes.Repeat([]byte{7}, int(partSize))
	if _, err := m.UploadPart(r.ctx, key, upID, 13, bytes.NewReader(body), partSize); err == nil {
		t.Fatal("a part was accepted into the aborted upload")
	}
	parts := make([]storage.Part, 12) // what the writer's parts were: each part's ETag is its MD5
	for i := range parts {
		parts[i] = storage.Part{Number: i + 1, ETag: storage.ETagOf(body), Size: partSize}
	}
	if _, err := m.CompleteMultipart(r.ctx, key, upID, parts); err == nil {
		t.Fatal("the aborted upload completed from its old parts")
	}
	if r.exists(key) {
		t.Fatalf("%s exists after the abort", key)
	}
	if r.dir != "" {
		if ents, err := os.ReadDir(filepath.Join(r.dir, ".graft-uploads", upID)); err == nil && len(ents) > 0 {
			t.Fatalf("the local store still holds %d files of the aborted upload", len(ents))
		}
	}
	if again := r.cleanup(client.CleanupRequest{KeepNewest: 1, Mode: workflows.CleanupModeSweep, GuardWindow: noGuard()}); again.Objects.UploadsFound != 0 ||
		again.Objects.UploadRecordsRemoved != 0 {
		t.Fatalf("a second sweep: %+v, want nothing more", again.Objects)
	}
	if err := m.AbortMultipart(r.ctx, otherKey, otherID); err != nil {
		t.Fatal(err)
	}
}

// Retention over a tree's first-parent chain: keep-newest counts along main's
// chain; a live tag, a live branch's fork point (the merge base with main) and every chain
// commit at or above one an in-flight operation pins are kept; a plan whose swap never
// happened and the commits below every window go. Nothing a root reaches is deleted, and
// the branch still merges into main after the run.
func TestCleanup_RetentionOverTheChain_TagBranchPinAndMergeBaseKept(t *testing.T) {
	t.Parallel()
	eachStackStore(t, func(t *testing.T, r *stackRig) {
		const table = "t"
		var mainCommits []graph.Commit
		for i := 0; i < 7; i++ {
			v := r.version(table, ulid.ULID{}, r.objects(table, 1), nil)
			mainCommits = append(mainCommits, r.appendOn("main", map[string]ulid.ULID{table: v}))
		}
		// main: root (seq 0), then mainCommits[i] at seq i+1.
		tagged, forkSrc, pinned := mainCommits[0], mainCommits[1], mainCommits[3]
		tb, err := graph.TagBytes(graph.TagParams{Graph: r.graph, Name: "v1", Commit: tagged.ID.String(), Op: r.op("tag"), Time: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := graph.PutTag(r.ctx, r.store, r.graph, tb); err != nil {
			t.Fatal(err)
		}
		fork, err := r.g.CreateBranch(r.ctx, graph.ForkSpec{Branch: "feature", Tree: ulid.Make(), Source: forkSrc.ID.String(),
			Author: "test", Message: "fork", Time: time.Now().UTC().Truncate(time.Millisecond), Op: r.op("fork")})
		if err != nil {
			t.Fatalf("create branch: %v", err)
		}
		fv := r.version("f", ulid.ULID{}, r.objects("f", 1), nil)
		r.appendOn("feature", map[string]ulid.ULID{"f": fv})
		// A plan written but never published (its swap lost): garbage.
		lost, err := r.g.PlanAppend(r.ctx, graph.CommitSpec{Branch: "main", SetPins: map[string]ulid.ULID{table: r.version(table, ulid.ULID{}, r.objects(table, 1), nil)},
			Author: "test", Message: "lost", Time: time.Now().UTC().Truncate(time.Millisecond), Op: r.op("lost")})
		if err != nil {
			t.Fatal(err)
		}
		r.appendOn("main", map[string]ulid.ULID{table: r.version(table, ulid.ULID{}, r.objects(table, 1), nil)}) // seq 8: the head
		if err := r.g.WriteAppend(r.ctx, lost); err != nil {
			t.Fatal(err)
		}
		// A plan on the head, written and not published yet (by a writer without a
		// workflow, so nothing pins it).
		pending, err := r.g.PlanAppend(r.ctx, graph.CommitSpec{Branch: "main", SetPins: map[string]ulid.ULID{"u": r.version("u", ulid.ULID{}, r.objects("u", 1), nil)},
			Author: "test", Message: "pending", Time: time.Now().UTC().Truncate(time.Millisecond), Op: r.op("pending")})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.g.WriteAppend(r.ctx, pending); err != nil {
			t.Fatal(err)
		}
		// An in-flight operation pins main's seq-3 commit.
		opID := ulid.Make().String()
		if _, err := r.cat.OperationInsert(r.ctx, catalog.OperationInsertParams{ID: opID, Kind: catalog.OpRestore, Graph: r.graph}); err != nil {
			t.Fatal(err)
		}
		if err := r.cat.PinsRegister(r.ctx, catalog.PinsRegisterParams{OpID: opID,
			Pins: []catalog.Pin{{Kind: catalog.ObjectCommit, Key: format.CommitIDKey(r.graph, pinned.ID)}}}); err != nil {
			t.Fatal(err)
		}
		mainHead := r.head("main")

		// Inside the guard window the plan above the head may still be published: a dry
		// run keeps it. The lost plan, at the head's own seq, can never be: it goes.
		guarded := r.cleanup(client.CleanupRequest{KeepNewest: 1, Mode: workflows.CleanupModeDryRun})
		if slices.Contains(guarded.PlanKeys, pending.CommitKey) || !slices.Contains(guarded.PlanKeys, lost.CommitKey) {
			t.Fatalf("dry run inside the guard window: kept %+v, plan %v; want the plan above the head kept, the lost one planned",
				guarded.Kept, guarded.PlanKeys)
		}
		res := r.cleanup(client.CleanupRequest{KeepNewest: 1, Mode: workflows.CleanupModeSweep, GuardWindow: noGuard()})
		keep := map[string]graph.Commit{"tag": tagged, "fork source": forkSrc, "pinned": pinned}
		for seq := 4; seq <= 6; seq++ {
			keep[fmt.Sprintf("chain above the pin (seq %d)", seq+1)] = mainCommits[seq]
		}
		for what, c := range keep {
			if !r.exists(format.CommitIDKey(r.graph, c.ID)) {
				t.Fatalf("%s commit %s was deleted (result kept %+v)", what, c.ID, res.Kept)
			}
		}
		for _, c := range []graph.Commit{mainCommits[2]} {
			if r.exists(format.CommitIDKey(r.graph, c.ID)) {
				t.Fatalf("commit %s, below every window and not a root, survived", c.ID)
			}
			if r.exists(format.CommitIDKey(r.graph, r.root)) {
				t.Fatal("main's root commit survived")
			}
		}
		if r.exists(fork.CommitKey) {
			t.Fatal("the branch's fork commit, outside its window, survived")
		}
		if r.exists(lost.CommitKey) || r.exists(pending.CommitKey) {
			t.Fatal("the unpublished plan's commit survived")
		}
		if res.Kept.Head != 2 || res.Kept.Tag != 1 || res.Kept.MergeBase != 1 || res.Kept.Pin < 4 {
			t.Fatalf("kept %+v: want two heads, the tag, the fork point as merge base, the pinned commit and the chain above it", res.Kept)
		}
		// main's root and seq 3, the two plans (no guard now), and the branch's fork commit
		// (outside its window; a merge reads the fork's source in main, not the fork commit).
		if res.Condemned.Commits != 5 || res.Deleted != res.Condemned {
			t.Fatalf("condemned %+v, deleted %+v", res.Condemned, res.Deleted)
		}
		r.checkRetained(pinned.ID)

		// The branch still finds its merge base with main, and merges.
		bs, err := r.g.FindBases(r.ctx, r.head("feature"), mainHead)
		if err != nil || len(bs.Bases) != 1 || bs.Bases[0].ID != forkSrc.ID {
			t.Fatalf("merge bases after cleanup: %+v, %v; want %s", bs, err, forkSrc.ID)
		}
		if _, err := r.g.Merge(r.ctx, "feature", "main", graph.MergeSpec{NewVersionID: func(string) ulid.ULID { return ulid.Make() },
			Time: time.Now().UTC().Truncate(time.Millisecond), Op: r.op("merge")}, "test", "merge"); err != nil {
			t.Fatalf("merge after cleanup: %v", err)
		}
		if err := r.cat.PinsRelease(r.ctx, catalog.PinsReleaseParams{OpID: opID}); err != nil {
			t.Fatal(err)
		}
		r.checkRetained()
	})
}

// A mark run persists a plan that includes chunks and deletes nothing; a sweep of that
// plan deletes exactly it, chunks after commits, versions before their chunks and objects.
func TestCleanup_MarkThenSweepThePlan_ChunksIncluded(t *testing.T) {
	t.Parallel()
	r := newStackRigWithWorker(t, "localfs")
	const table = "events"
	ents := r.objects(table, 600)
	v1 := r.version(table, ulid.ULID{}, ents, nil)
	r.appendOn("main", map[string]ulid.ULID{table: v1})
	v2 := r.version(table, v1, r.objects(table, 5), []string{ents[0].Name})
	r.appendOn("main", map[string]ulid.ULID{table: v2})
	before := r.etags()

	mark := r.cleanup(client.CleanupRequest{KeepNewest: 1, Mode: workflows.CleanupModeMark, GuardWindow: noGuard()})
	if mark.Deleted.Keys() != 0 || mark.Objects.ManifestChunks == 0 || mark.Condemned.Versions != 1 {
		t.Fatalf("mark: condemned %+v deleted %+v v2 %+v; want a plan with the old version and its chunks, nothing deleted",
			mark.Condemned, mark.Deleted, mark.Objects)
	}
	if !maps.Equal(r.etags(), before) {
		t.Fatal("a mark run changed the bucket")
	}
	sweep := r.cleanup(client.CleanupRequest{SweepRunID: mark.RunID, KeepNewest: 1, GuardWindow: noGuard()})
	if sweep.Deleted != mark.Condemned || sweep.PlanDropped != 0 || sweep.NotInPlan != 0 {
		t.Fatalf("sweep of the plan: deleted %+v of %+v planned (dropped %d, not in plan %d)",
			sweep.Deleted, mark.Condemned, sweep.PlanDropped, sweep.NotInPlan)
	}
	if r.exists(format.TableVersionKey(r.graph, table, v1)) || r.exists(format.ObjectKey(r.graph, table, ents[0].Object)) {
		t.Fatal("the planned version or object survived the sweep")
	}
	r.checkRetained()
}

// A tree written by hand — a fork commit with no ref and no witness, as a create
// leaves it when its clone landed after its ref could no longer — is reclaimed only once
// the collector wins a fence at its ref key; a late ref put for it then fails.
// A live branch forked beside it is kept whole.
func TestCleanup_RefLessTreeWithoutWitness_CollectorFenceWins_TreeReclaimedAndLateRefFails(t *testing.T) {
	eachStackStore(t, func(t *testing.T, r *stackRig) {
		fork := func(branch string) graph.ForkPlan {
			t.Helper()
			p, err := r.g.PlanFork(r.ctx, graph.ForkSpec{Branch: branch, Tree: ulid.Make(), Source: r.root.String(),
				Author: "test", Message: "by hand", Time: time.Now().UTC().Truncate(time.Millisecond), Op: r.op("hand")})
			if err != nil {
				t.Fatalf("plan fork of %s: %v", branch, err)
			}
			if err := r.g.WriteFork(r.ctx, p); err != nil {
				t.Fatalf("write fork of %s: %v", branch, err)
			}
			return p
		}
		orphan, kept := fork("orphan"), fork("kept")
		if put, err := r.g.PutForkRef(r.ctx, kept); err != nil || put.Outcome == graph.PutTaken {
			t.Fatalf("live ref of kept: %+v, %v", put, err)
		}

		res := r.cleanup(client.CleanupRequest{KeepNewest: 1, Mode: workflows.CleanupModeSweep, GuardWindow: noGuard()})
		if !slices.Equal(res.Fenced, []string{orphan.Ref.Native}) {
			t.Fatalf("fenced %v, want [%s] alone", res.Fenced, orphan.Ref.Native)
		}
		if r.exists(orphan.CommitKey) {
			t.Fatalf("the fenced tree's fork commit %s survived the sweep", orphan.CommitKey)
		}
		got, err := r.store.Get(r.ctx, orphan.RefKey)
		if err != nil {
			t.Fatalf("read the orphan's ref key: %v", err)
		}
		ref, err := format.DecodeBranchRef(got.Body)
		if err != nil || ref.State != format.RefFence || ref.Reason != "cleanup" || ref.Op != res.RunID {
			t.Fatalf("ref key holds %+v (%v), want this run's cleanup fence", ref, err)
		}
		if put, err := r.g.PutForkRef(r.ctx, orphan); err != nil || put.Outcome != graph.PutTaken {
			t.Fatalf("late ref put of the orphan: %+v, %v; want the key taken by the fence", put, err)
		}
		if !r.exists(kept.CommitKey) {
			t.Fatalf("the live branch's fork commit %s was reclaimed", kept.CommitKey)
		}
		if h := r.head("kept"); h.ID != kept.Commit.ID {
			t.Fatalf("kept's head %s, want its fork %s", h.ID, kept.Commit.ID)
		}
		r.checkRetained()
	})
}

// etags lists every key of the bucket under the graph with its ETag.
func (r *stackRig) etags() map[string]string {
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

// Sweep throughput on the real S3 server (versitygw): a graph of 16 tables holding 1,000
// live objects (one version per table, committed on main) and 100,000 garbage objects
// that no version lists, cleaned by one worker and by two. Run it with
//
//	go test -run '^$' -bench BenchmarkSweep -benchtime 1x ./workflows/
//
// It reports the sweep's deletions per second (objects/s, from the workflow's own sweep
// duration), the whole cleanup's wall time, and the mark phase's requests and duration.
const (
	benchTables  = 16
	benchLive    = 1000
	benchGarbage = 100_000
)

func BenchmarkSweep(b *testing.B) {
	for _, workers := range []int{1, 2} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				s := newBenchStack(b)
				for range workers {
					s.startWorker()
				}
				b.StartTimer()
				started := time.Now()
				res, err := s.gc.Cleanup(s.ctx, client.CleanupRequest{Graph: s.graph, KeepNewest: 1, Mode: workflows.CleanupModeSweep,
					GuardWindow: noGuard(), Tuning: &workflows.CleanupTuning{Parallelism: benchTables}})
				wall := time.Since(started)
				b.StopTimer()
				if err != nil {
					b.Fatalf("cleanup: %v", err)
				}
				if res.Deleted.Objects != benchGarbage {
					b.Fatalf("deleted %+v, want %d objects", res.Deleted, benchGarbage)
				}
				if left := s.count(); left != benchLive+benchTables {
					b.Fatalf("%d keys left under tables/, want the %d live objects and %d versions", left, benchLive, benchTables)
				}
				b.ReportMetric(float64(res.Deleted.Objects)/res.Sweep.Duration.Seconds(), "objects/s")
				b.ReportMetric(wall.Seconds(), "wall-s")
				b.ReportMetric(res.Mark.Duration.Seconds(), "mark-s")
				b.ReportMetric(float64(res.Mark.Requests.Total()), "mark-requests")
				b.ReportMetric(float64(res.Mark.Requests.List), "mark-lists")
				b.ReportMetric(res.Sweep.Duration.Seconds(), "sweep-s")
				b.Logf("workers=%d: %+v; mark %s (%+v); sweep %s, %d activities; wall %s; seeded at %.0f objects/s",
					workers, res.Deleted, res.Mark.Duration, res.Mark.Requests, res.Sweep.Duration, res.Sweep.Activities, wall, s.seedRate)
			}
		})
	}
}

// benchStack is the real stack for one benchmark iteration (the test rig needs a *testing.T).
type benchStack struct {
	b         *testing.B
	ctx       context.Context
	store     storage.Store
	cat       *catalog.Catalog
	tc        sdkclient.Client
	gc        *client.Client
	taskQueue string
	graph     string
	seedRate  float64
}

func newBenchStack(b *testing.B) *benchStack {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	b.Cleanup(cancel)
	srv := testenv.VersityGW(b)
	store, err := s3.New(ctx, s3.Config{Endpoint: srv.Endpoint, Region: srv.Region, Bucket: srv.NewBucket(b), PathStyle: true,
		AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey})
	if err != nil {
		b.Fatalf("s3 store: %v", err)
	}
	s := &benchStack{b: b, ctx: ctx, store: store, cat: catalogtest.Open(b), taskQueue: randomName("graft-bench-"), graph: randomName("g")}
	ts := testenv.Temporal(b)
	if s.tc, err = sdkclient.DialContext(ctx, sdkclient.Options{HostPort: ts.HostPort, Namespace: ts.Namespace, Logger: quietLogger()}); err != nil {
		b.Fatalf("dial temporal: %v", err)
	}
	b.Cleanup(s.tc.Close)
	s.gc = client.New(s.tc, client.Options{TaskQueue: s.taskQueue})
	s.seed()
	return s
}

// seed writes the graph: main with one version per table listing its live objects, and
// the garbage objects beside them.
func (s *benchStack) seed() {
	b, ctx := s.b, s.ctx
	now := time.Now().UTC().Truncate(time.Millisecond)
	if _, err := graph.Init(ctx, s.store, graph.InitParams{Graph: s.graph, MainTree: ulid.Make(), Op: "init", Time: now}); err != nil {
		b.Fatalf("init graph: %v", err)
	}
	g, err := graph.Open(s.store, s.graph)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := s.cat.GraphInsert(ctx, catalog.GraphInsertParams{Name: s.graph, Locator: "bench"}); err != nil {
		b.Fatalf("ledger graph: %v", err)
	}
	pins := map[string]ulid.ULID{}
	for i := range benchTables {
		table := fmt.Sprintf("t%02d", i)
		var entries []format.ManifestEntry
		bodies := map[string][]byte{}
		sum := sha256.Sum256([]byte("live"))
		for j := i; j < benchLive; j += benchTables {
			id := ulid.Make()
			entries = append(entries, format.ManifestEntry{Name: id.String(), Object: id, Size: 4, SHA256: hex.EncodeToString(sum[:])})
			bodies[format.ObjectKey(s.graph, table, id)] = []byte("live")
		}
		if _, err := storagetest.PutMany(ctx, s.store, bodies, 32); err != nil {
			b.Fatalf("put objects: %v", err)
		}
		v, err := g.PutVersion(ctx, graph.VersionSpec{Table: table, VersionID: ulid.Make(), Put: entries, Op: "seed", Time: now})
		if err != nil {
			b.Fatalf("write table: %v", err)
		}
		pins[table] = v.Version.ID
	}
	if _, err := g.Append(ctx, graph.CommitSpec{Branch: graph.DefaultBranch, SetPins: pins, Author: "bench", Message: "seed", Time: now, Op: "seed"}); err != nil {
		b.Fatalf("append commit: %v", err)
	}
	garbage := make(map[string][]byte, benchGarbage)
	for i := range benchGarbage {
		garbage[format.ObjectKey(s.graph, fmt.Sprintf("t%02d", i%benchTables), ulid.Make())] = []byte("garbage")
	}
	started := time.Now()
	if _, err := storagetest.PutMany(ctx, s.store, garbage, 32); err != nil {
		b.Fatalf("seed garbage: %v", err)
	}
	s.seedRate = float64(benchGarbage) / time.Since(started).Seconds()
}

func (s *benchStack) startWorker() {
	w := worker.New(s.tc, s.taskQueue, &activities.Activities{Store: s.store, Catalog: s.cat}, sdkworker.Options{})
	if err := w.Start(); err != nil {
		s.b.Fatalf("start worker: %v", err)
	}
	s.b.Cleanup(w.Stop)
}

// count counts the keys under the graph's tables/.
func (s *benchStack) count() int {
	n := 0
	if err := storage.ListAll(s.ctx, s.store, s.graph+"/tables/", func(storage.ObjectInfo) error { n++; return nil }); err != nil {
		s.b.Fatalf("list: %v", err)
	}
	return n
}
