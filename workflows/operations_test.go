package workflows_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	sdkclient "go.temporal.io/sdk/client"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/faults"
	"github.com/graftworks/graft/workflows"
)

// Operations on graphs (docs/format.md), on the real stack: Temporal dev server,
// versitygw behind the fault wrapper, Postgres.

// rig2 is a rig with the graph API at hand: main pins table "t" after setup.
type rig2 struct {
	*rig
	g    *graph.Graph
	head graph.Commit // main's head as this test last wrote it
}

// newRig2 is a rig whose graph it builds through the graph API, main pinning table "t".
func newRig2(t *testing.T) *rig2 {
	t.Helper()
	r := newBareRig(t)
	ctx, inner, cfg := r.ctx, r.inner, r.s3cfg
	var err error
	r2 := &rig2{rig: r}
	r2.g, err = graph.Open(inner, r.graph)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	init, err := graph.Init(ctx, inner, graph.InitParams{Graph: r.graph, MainTree: ulid.Make(), Op: "init-" + r.graph, Time: now})
	if err != nil {
		t.Fatalf("init graph: %v", err)
	}
	r2.head, err = r2.g.Commit(ctx, init.Root.ID)
	if err != nil {
		t.Fatal(err)
	}
	r2.commit("main", "t", "v1", now)
	if _, err := r.cat.GraphInsert(ctx, catalog.GraphInsertParams{Name: r.graph, Locator: "s3://" + cfg.Bucket}); err != nil {
		t.Fatalf("ledger graph: %v", err)
	}
	t.Cleanup(func() {
		if err := r.oracle(true); err != nil {
			t.Error(err)
		}
	})
	return r2
}

// commit writes a one-object version of table and appends a commit pinning it to branch
// (straight to the bucket, as another writer would); on main it moves r.head.
func (r *rig2) commit(branch, table, body string, at time.Time) graph.Commit {
	r.t.Helper()
	at = at.UTC().Truncate(time.Millisecond)
	id := ulid.Make()
	if _, err := r.inner.Put(r.ctx, format.ObjectKey(r.graph, table, id), []byte(body), storage.PutOptions{IfNoneMatch: true}); err != nil {
		r.t.Fatalf("upload: %v", err)
	}
	sum := sha256.Sum256([]byte(body))
	v, err := r.g.PutVersion(r.ctx, graph.VersionSpec{Table: table, VersionID: ulid.Make(), Time: at, Op: "write-" + body,
		Put: []format.ManifestEntry{{Name: id.String(), Object: id, Size: int64(len(body)), SHA256: hex.EncodeToString(sum[:])}}})
	if err != nil {
		r.t.Fatalf("put version: %v", err)
	}
	res, err := r.g.Append(r.ctx, graph.CommitSpec{Branch: branch, SetPins: map[string]ulid.ULID{table: v.Version.ID},
		Author: "test", Message: "write " + table, Time: at, Op: "commit-" + body})
	if err != nil {
		r.t.Fatalf("append: %v", err)
	}
	c, err := r.g.Commit(r.ctx, res.Plan.Commit.ID)
	if err != nil {
		r.t.Fatal(err)
	}
	if branch == "main" {
		r.head = c
	}
	return c
}

// branchHead reads a branch's head straight from the bucket.
// writeInDoubt starts a write of a new object body to table u on main (expecting main's
// head when expect) whose head swap meets mode, and waits for the write in doubt; undo
// lifts the fault.
func (r *rig2) writeInDoubt(opPrefix, body string, mode faults.Mode, expect bool) (opID string, start graph.Head, run sdkclient.WorkflowRun, undo func()) {
	obj := r.upload("u", body)
	start = r.branchHead("main")
	opID = randomName(opPrefix)
	swap := func(b []byte) bool {
		ref, err := format.DecodeBranchRef(b)
		return err == nil && ref.Op == opID && ref.Head != start.Commit.ID
	}
	undo = r.store.Add(faults.Rule{Op: faults.OpPut, KeyPrefix: format.BranchRefKey(r.graph, start.Native), Body: swap, Mode: mode})
	in := workflows.WriteTableInput{Graph: r.graph, Branch: "main", Table: "u", Objects: []workflows.TableObject{obj}, OpID: opID}
	if expect {
		in.ExpectedHead = start.Commit.ID.String()
	}
	run = r.startOp(workflows.WriteTableName, in)
	r.waitOp(opID, "the write in doubt", inDoubt)
	return opID, start, run, undo
}

func (r *rig2) branchHead(branch string) graph.Head {
	r.t.Helper()
	h, err := r.g.BranchHead(r.ctx, branch)
	if err != nil {
		r.t.Fatalf("head of %s: %v", branch, err)
	}
	return h
}

// reclaim deletes commits from the bucket, as a cleanup that reclaimed them would.
func (r *rig2) reclaim(cs ...graph.Commit) {
	r.t.Helper()
	for _, c := range cs {
		if err := r.inner.Delete(r.ctx, format.CommitIDKey(r.graph, c.ID)); err != nil {
			r.t.Fatalf("reclaim %s: %v", c.ID, err)
		}
	}
}

// treeSeqs counts the commit keys of tree at each seq.
func (r *rig2) treeSeqs(tree ulid.ULID) map[int64]int {
	r.t.Helper()
	out := map[int64]int{}
	if err := storage.ListAll(r.ctx, r.inner, format.TreeCommitsPrefix(r.graph, tree), func(o storage.ObjectInfo) error {
		id, err := format.ParseCommitKey(r.graph, o.Key)
		if err != nil {
			return err
		}
		out[id.Seq]++
		return nil
	}); err != nil {
		r.t.Fatalf("list tree: %v", err)
	}
	return out
}

func TestWriteTable_PublishesOnTheRealHead_Done(t *testing.T) {
	t.Parallel()
	r := newRig2(t)
	r.startWorker()
	before := r.branchHead("main")
	res, err := r.gc.WriteTable(r.ctx, r.inner, client.WriteTableRequest{Graph: r.graph, Branch: "main", Table: "u",
		Files: writeFiles(t, "a", "bb"), ExpectedHead: before.Commit.ID.String()})
	if err != nil || res.Outcome != outcome.Done {
		t.Fatalf("write: %+v, %v; want done", res, err)
	}
	head := r.branchHead("main")
	if head.Commit.ID.String() != res.Commit || head.Commit.FirstParent() != before.Commit.ID || head.Commit.ID.Digest.IsZero() {
		t.Fatalf("head %s (parent %s), want the reported commit %s on %s", head.Commit.ID, head.Commit.FirstParent(), res.Commit, before.Commit.ID)
	}
	v, err := r.g.TableAt(r.ctx, head.Commit, "u")
	if err != nil || v.Len() != 2 || v.Bytes != 3 {
		t.Fatalf("table u at the head: %+v, %v; want a version of 2 entries, 3 bytes", v, err)
	}
	if _, err := r.g.TableAt(r.ctx, head.Commit, "t"); err != nil {
		t.Fatalf("table t is no longer pinned: %v", err)
	}
	r.report("main", res.Commit)
}

// A stale expected head after cleanup emptied keys below it: main at seq 8, a live branch forked at seq 2, a cleanup
// with keep_newest=2 reclaiming seqs 1 and 3…6, then a write whose expected head is the
// commit at seq 2. The plan compares the expected head with the head main's ref names, so
// the write is a conflict; no commit key of main's tree is refilled and nothing is lost.
// No put could refill the gap even if a plan did not: see the settle variant below.
func TestStaleExpectedHeadAfterCleanupGap_ConflictNoRefill(t *testing.T) {
	t.Parallel()
	r := newRig2(t)
	r.startWorker()
	at := time.Now().Add(-time.Hour)
	chain := []graph.Commit{r.head} // seq 1
	for i := 0; i < 7; i++ {
		chain = append(chain, r.commit("main", "t", "v"+string(rune('a'+i)), at.Add(time.Duration(i)*time.Second)))
	}
	if r.head.ID.Seq != 8 {
		t.Fatalf("main at seq %d, want 8", r.head.ID.Seq)
	}
	fork := chain[1] // seq 2
	if _, err := r.g.CreateBranch(r.ctx, graph.ForkSpec{Branch: "side", Tree: ulid.Make(), Source: fork.ID.String(),
		Author: "test", Message: "side", Time: at, Op: "hand-side"}); err != nil {
		t.Fatalf("create side: %v", err)
	}
	r.reclaim(chain[0], chain[2], chain[3], chain[4], chain[5])
	before := r.treeSeqs(r.head.ID.Tree)
	if before[3] != 0 {
		t.Fatalf("the test needs seq 3 reclaimed: %v", before)
	}
	head := r.branchHead("main")
	res, err := r.gc.WriteTable(r.ctx, r.inner, client.WriteTableRequest{Graph: r.graph, Branch: "main", Table: "u",
		Files: writeFiles(t, "late"), ExpectedHead: fork.ID.String()})
	if !errors.Is(err, outcome.ErrConflict) {
		t.Fatalf("write with stale expected head %s: %+v, %v; want conflict", fork.ID, res, err)
	}
	if after := r.treeSeqs(r.head.ID.Tree); after[3] != 0 || len(after) != len(before) {
		t.Fatalf("commit keys of main's tree changed: %v → %v (a refilled key)", before, after)
	}
	if now := r.branchHead("main"); now.Commit.ID != head.Commit.ID || now.ETag != head.ETag {
		t.Fatalf("main moved to %s, want %s untouched", now.Commit.ID, head.Commit.ID)
	}
	if side := r.branchHead("side"); side.Commit.FirstParent() != fork.ID {
		t.Fatalf("side's fork is %s, want %s", side.Commit.FirstParent(), fork.ID)
	}
}

// The settle variant: the write's head swap is held in flight (ambiguous)
// and the write goes in doubt; another writer then appends twice and a cleanup reclaims the
// contested seq; the held swap is released late. It can never land — the ref moved, so its
// If-Match fails — and the settle re-issue reads the ref, finds another head whose first
// parents do not pass through our commit, and ends the write conflict (it named an expected
// head): never done, never a commit behind the head.
func TestInDoubtPublishBehindMovedHead_ConflictNeverBehindTheHead(t *testing.T) {
	t.Parallel()
	r := newRig2(t)
	r.startWorker()
	opID, _, run, unhold := r.writeInDoubt("settle-", "settle", faults.Hold, true)
	held := r.store.Held()
	if len(held) == 0 {
		t.Fatal("no head swap held")
	}
	// Another writer takes the seq and the next; cleanup reclaims the contested seq.
	past := time.Now().Add(-time.Hour)
	other1 := r.commit("main", "t", "other-1", past)
	other2 := r.commit("main", "t", "other-2", past.Add(time.Second))
	r.reclaim(other1)
	wantLateRefused(t, r.ctx, "the held swap, released after the ref moved", r.store.Held())
	unhold()
	var res workflows.WriteTableResult
	if err := endOf(r.rig, run, &res); err != nil || res.Outcome != outcome.Conflict {
		t.Fatalf("write: %+v, %v; want conflict", res, err)
	}
	head := r.branchHead("main")
	if head.Commit.ID != other2.ID {
		t.Fatalf("main's head is %s, want the other writer's %s", head.Commit.ID, other2.ID)
	}
	if head.Commit.FirstParent() != other1.ID {
		t.Fatalf("main's head %s has first parent %s, want the other writer's %s", head.Commit.ID, head.Commit.FirstParent(), other1.ID)
	}
	if r.exists(format.CommitIDKey(r.graph, other1.ID)) {
		t.Fatalf("the reclaimed commit %s was refilled", other1.ID)
	}
	if op := r.operation(opID); op.Outcome != catalog.Outcome(outcome.Conflict) {
		t.Fatalf("ledger outcome %s, want conflict", op.Outcome)
	}
}

// The settle variant without an expected head: the write plans again on the real head and
// lands on top of it, once.
func TestInDoubtPublishBehindMovedHead_ReplannedOnTheRealHead(t *testing.T) {
	t.Parallel()
	r := newRig2(t)
	r.startWorker()
	obj := r.upload("u", "settle")
	start := r.branchHead("main")
	opID := randomName("settle-")
	ours := func(b []byte) bool {
		ref, err := format.DecodeBranchRef(b)
		return err == nil && ref.Op == opID && ref.Head.Seq == start.Commit.ID.Seq+1
	}
	unhold := r.store.Add(faults.Rule{Op: faults.OpPut, KeyPrefix: format.BranchRefKey(r.graph, start.Native), Body: ours, Mode: faults.Hold})
	run := r.startOp(workflows.WriteTableName, workflows.WriteTableInput{Graph: r.graph, Branch: "main", Table: "u",
		Objects: []workflows.TableObject{obj}, OpID: opID})
	r.waitOp(opID, "the write in doubt", inDoubt)
	past := time.Now().Add(-time.Hour)
	other1 := r.commit("main", "t", "other-1", past)
	other2 := r.commit("main", "t", "other-2", past.Add(time.Second))
	r.reclaim(other1)
	for _, h := range r.store.Held() {
		h.Drop()
	}
	unhold()
	var res workflows.WriteTableResult
	if err := endOf(r.rig, run, &res); err != nil || res.Outcome != outcome.Done {
		t.Fatalf("write: %+v, %v; want done on top of the real head", res, err)
	}
	head := r.branchHead("main")
	if head.Commit.ID.String() != res.Commit || head.Commit.FirstParent() != other2.ID || res.HeadRetries != 1 {
		t.Fatalf("head %s (parent %s), result %+v: want the write re-planned once on %s", head.Commit.ID, head.Commit.FirstParent(), res, other2.ID)
	}
	recordHistory(t, r.rig, run.GetID(), run.GetRunID(), "writetable_in_doubt_stale_replanned")
	r.report("main", res.Commit)
}

// A graph initialised through graft.InitGraph: main's root is a commit
// named by main's ref, and a write lands on it.
func TestInitGraphFormat2_ThenWrite_Done(t *testing.T) {
	r := runningRig(t)
	name := randomName("g")
	init, err := r.gc.InitGraph(r.ctx, client.InitGraphRequest{Graph: name})
	if err != nil || init.Outcome != outcome.Done {
		t.Fatalf("init: %+v, %v", init, err)
	}
	if _, err := graph.ReadGraph(r.ctx, r.inner, name); err != nil {
		t.Fatalf("graph record: %v", err)
	}
	g, err := graph.Open(r.inner, name)
	if err != nil {
		t.Fatal(err)
	}
	root, err := g.BranchHead(r.ctx, "main")
	if err != nil || root.Commit.ID.String() != init.Root {
		t.Fatalf("main: %+v, %v; want the reported root %s", root, err, init.Root)
	}
	res, err := r.gc.WriteTable(r.ctx, r.inner, client.WriteTableRequest{Graph: name, Branch: "main", Table: "u", Files: writeFiles(t, "x")})
	if err != nil || res.Outcome != outcome.Done {
		t.Fatalf("write: %+v, %v", res, err)
	}
	if h, err := g.BranchHead(r.ctx, "main"); err != nil || h.Commit.ID.String() != res.Commit || h.Commit.FirstParent() != root.Commit.ID {
		t.Fatalf("main after the write: %+v, %v", h.Commit.ID, err)
	}
}

// Branch create from a head, a commit and a tag, a write on the new branch, tags, delete and
// the fence of a merge or restore request, on a graph: every ref, fork commit and
// tag is written, and each create's head is its fork commit, first parent the source.
func TestBranchesAndTags_CreateFromHeadCommitTag_WriteDelete(t *testing.T) {
	t.Parallel()
	r := newRig2(t)
	r.startWorker()
	main := r.branchHead("main")
	created := func(req client.CreateBranchRequest, source format.CommitID) graph.Head {
		t.Helper()
		req.Graph = r.graph
		res, err := r.gc.CreateBranch(r.ctx, req)
		if err != nil || res.Outcome != outcome.Created {
			t.Fatalf("create %+v: %+v, %v", req, res, err)
		}
		h := r.branchHead(req.Branch)
		if h.Commit.ID.String() != res.Head || h.Commit.FirstParent() != source || h.Commit.Fork != source {
			t.Fatalf("branch %s: head %s (parent %s, fork %s); want the fork %s of %s", req.Branch, h.Commit.ID,
				h.Commit.FirstParent(), h.Commit.Fork, res.Head, source)
		}
		r.names = append(r.names, req.Branch)
		return h
	}
	feat := created(client.CreateBranchRequest{Branch: "feat"}, main.Commit.ID)
	w, err := r.gc.WriteTable(r.ctx, r.inner, client.WriteTableRequest{Graph: r.graph, Branch: "feat", Table: "u", Files: writeFiles(t, "f")})
	if err != nil || w.Outcome != outcome.Done {
		t.Fatalf("write on feat: %+v, %v", w, err)
	}
	r.report("feat", w.Commit)
	if h := r.branchHead("feat"); h.Commit.ID.String() != w.Commit || h.Commit.FirstParent() != feat.Commit.ID {
		t.Fatalf("feat's head %s, want the write %s on the fork", h.Commit.ID, w.Commit)
	}
	if h := r.branchHead("main"); h.Commit.ID != main.Commit.ID {
		t.Fatalf("main moved to %s", h.Commit.ID)
	}
	created(client.CreateBranchRequest{Branch: "from-commit", FromCommit: w.Commit}, mustID(t, w.Commit))

	tag, err := r.gc.CreateTag(r.ctx, client.CreateTagRequest{Graph: r.graph, Name: "v1", Branch: "feat"})
	if err != nil || tag.Outcome != outcome.Created {
		t.Fatalf("tag: %+v, %v", tag, err)
	}
	te, err := graph.ReadTag(r.ctx, r.inner, r.graph, "v1")
	if err != nil || te.Tag.Commit.String() != w.Commit {
		t.Fatalf("tag v1: %+v, %v; want it naming %s", te.Tag, err, w.Commit)
	}
	if obj, err := r.inner.Get(r.ctx, format.TagKey(r.graph, "v1")); err != nil {
		t.Fatalf("read tag v1: %v", err)
	} else if _, err := format.DecodeTag(obj.Body); err != nil {
		t.Fatalf("tag v1 does not decode: %v", err)
	}
	created(client.CreateBranchRequest{Branch: "from-tag", FromTag: "v1"}, mustID(t, w.Commit))

	del, err := r.gc.DeleteBranch(r.ctx, client.DeleteBranchRequest{Graph: r.graph, Branch: "from-commit"})
	if err != nil || del.Outcome != outcome.Deleted {
		t.Fatalf("delete: %+v, %v", del, err)
	}
	incs, err := graph.ReadBranchIncarnations(r.ctx, r.inner, r.graph, "from-commit")
	if err != nil || len(incs) != 1 || incs[0].Ref.State != format.RefRetired || incs[0].Ref.Head.String() != del.Head {
		t.Fatalf("from-commit after delete: %+v, %v; want one retired ref keeping head %s", incs, err, del.Head)
	}
	if dt, err := r.gc.DeleteTag(r.ctx, client.DeleteTagRequest{Graph: r.graph, Name: "v1"}); err != nil || dt.Outcome != outcome.Deleted {
		t.Fatalf("delete tag: %+v, %v", dt, err)
	}
}

func mustID(t *testing.T, s string) format.CommitID {
	t.Helper()
	id, err := format.ParseCommitID(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// Repair on a graph: two live refs of one name (written by hand, as a bug or an
// operator might), the repair keeps one and retires the other, which keeps its head.
func TestRepairTwoLiveRefs_KeepsOneRetiresTheOther(t *testing.T) {
	t.Parallel()
	r := newRig2(t)
	r.startWorker()
	at := time.Now().UTC().Truncate(time.Millisecond)
	var natives []string
	for i := 0; i < 2; i++ {
		p, err := r.g.CreateBranch(r.ctx, graph.ForkSpec{Branch: "dup", Tree: ulid.Make(), Source: r.head.ID.String(),
			Author: "test", Message: "dup", Time: at, Op: randomName("hand-")})
		if err != nil {
			t.Fatalf("hand create: %v", err)
		}
		natives = append(natives, p.Ref.Native)
	}
	res, err := r.gc.RepairBranch(r.ctx, client.RepairBranchRequest{Graph: r.graph, Branch: "dup", Keep: natives[0]})
	if err != nil || res.Outcome != outcome.Done || res.Kept != natives[0] || len(res.Retired) != 1 || res.Retired[0] != natives[1] {
		t.Fatalf("repair: %+v, %v; want %s kept, %s retired", res, err, natives[0], natives[1])
	}
	if h := r.branchHead("dup"); h.Native != natives[0] {
		t.Fatalf("dup resolves to %s, want %s", h.Native, natives[0])
	}
	incs, err := graph.ReadBranchIncarnations(r.ctx, r.inner, r.graph, "dup")
	if err != nil {
		t.Fatal(err)
	}
	for _, inc := range incs {
		if inc.Native == natives[1] && (inc.Ref.State != format.RefRetired || inc.Ref.Head.IsZero()) {
			t.Fatalf("%s after the repair: %+v; want a retired ref keeping its head", inc.Native, inc.Ref)
		}
	}
	r.names = append(r.names, "dup")
}

// An in-doubt write abandoned by signal is fenced: the ref is rewritten, If-Match
// the plan's ETag, to the same head with the write's operation as its op, so the planned
// swap can never land; the write ends unpublished, main keeps its head, the pins are released.
func TestPublishInDoubt_OperatorAbandons_RefFencedSameHeadUnpublished(t *testing.T) {
	t.Parallel()
	r := newRig2(t)
	r.startWorker()
	opID, start, run, lose := r.writeInDoubt("abandon-", "abandon me", faults.FailBeforeSend, false)
	if err := r.tc.SignalWorkflow(r.ctx, run.GetID(), run.GetRunID(), workflows.AbandonSignalName, workflows.AbandonRequest{Reason: "operator"}); err != nil {
		t.Fatal(err)
	}
	var res workflows.WriteTableResult
	if err := endOf(r.rig, run, &res); err != nil || res.Outcome != outcome.Unpublished || res.Commit != "" {
		t.Fatalf("abandoned write: %+v, %v; want unpublished", res, err)
	}
	lose()
	recordHistory(t, r.rig, run.GetID(), run.GetRunID(), "writetable_abandoned_fenced")
	head := r.branchHead("main")
	if head.Commit.ID != start.Commit.ID || head.Ref.Op != opID || head.ETag == start.ETag {
		t.Fatalf("main after the fence: head %s, op %s; want head %s kept, op %s (the fence)", head.Commit.ID, head.Ref.Op, start.Commit.ID, opID)
	}
	if op := r.operation(opID); op.Outcome != catalog.OutcomeUnpublished || len(r.pinsOf(opID)) != 0 {
		t.Fatalf("ledger %s, pins %v; want unpublished and no pins", op.Outcome, r.pinsOf(opID))
	}
	// The branch is writable after the fence.
	w, err := r.gc.WriteTable(r.ctx, r.inner, client.WriteTableRequest{Graph: r.graph, Branch: "main", Table: "u", Files: writeFiles(t, "after")})
	if err != nil || w.Outcome != outcome.Done {
		t.Fatalf("write after the fence: %+v, %v", w, err)
	}
	r.report("main", w.Commit)
}

// Restore on a graph: the backup tag names the head replaced, and the
// restore commit — first parent that head — pins exactly the target's tables, restored_from
// the target.
func TestRestore_BackupTagThenCommitWithTheTargetsPins(t *testing.T) {
	t.Parallel()
	r := newRig2(t)
	r.startWorker()
	target := r.branchHead("main").Commit // pins t
	w, err := r.gc.WriteTable(r.ctx, r.inner, client.WriteTableRequest{Graph: r.graph, Branch: "main", Table: "u", Files: writeFiles(t, "later")})
	if err != nil || w.Outcome != outcome.Done {
		t.Fatalf("write: %+v, %v", w, err)
	}
	res, err := r.gc.Restore(r.ctx, client.RestoreRequest{Graph: r.graph, Branch: "main", ToCommit: target.ID.String(), ExpectedHead: w.Commit})
	if err != nil || res.Outcome != outcome.Done || res.PreviousHead != w.Commit {
		t.Fatalf("restore: %+v, %v", res, err)
	}
	head := r.branchHead("main").Commit
	if head.ID.String() != res.Commit || head.FirstParent().String() != w.Commit || head.RestoredFrom != target.ID {
		t.Fatalf("head %s (parent %s, restored from %s); want the restore %s on %s from %s", head.ID, head.FirstParent(), head.RestoredFrom, res.Commit, w.Commit, target.ID)
	}
	if head.Pins.Root != target.Pins.Root || len(head.Pins.Entries) != len(target.Pins.Entries) {
		t.Fatalf("restored pins %+v, want the target's %+v", head.Pins, target.Pins)
	}
	if _, err := r.g.TableAt(r.ctx, head, "u"); !errors.Is(err, graph.ErrTableNotPinned) {
		t.Fatalf("table u after the restore: %v; want not pinned", err)
	}
	tag, err := graph.ReadTag(r.ctx, r.inner, r.graph, res.BackupTag)
	if err != nil || tag.Tag.Commit.String() != w.Commit {
		t.Fatalf("backup tag %s: %+v, %v; want it naming %s", res.BackupTag, tag.Tag, err, w.Commit)
	}
	r.report("main", res.Commit)
	// A stale expected head is a conflict and writes nothing.
	if _, err := r.gc.Restore(r.ctx, client.RestoreRequest{Graph: r.graph, Branch: "main", ToCommit: target.ID.String(), ExpectedHead: w.Commit, NoBackup: true}); !errors.Is(err, outcome.ErrConflict) {
		t.Fatalf("restore on a stale expected head: %v; want conflict", err)
	}
	if now := r.branchHead("main").Commit; now.ID != head.ID {
		t.Fatalf("main moved to %s", now.ID)
	}
}

// edit writes a version of table on branch that edits the version the branch's head pins:
// put adds or replaces entries by name (each a fresh uploaded object with body name+tag),
// del removes names; then a commit pinning it. Straight to the bucket, as another writer.
func (r *rig2) edit(branch, table, tag string, put []string, del []string) graph.Commit {
	r.t.Helper()
	h := r.branchHead(branch)
	base, _, err := r.g.Pin(r.ctx, h.Commit, table)
	if err != nil {
		r.t.Fatal(err)
	}
	var entries []format.ManifestEntry
	for _, name := range put {
		id := ulid.Make()
		body := []byte(name + "@" + tag)
		if _, err := r.inner.Put(r.ctx, format.ObjectKey(r.graph, table, id), body, storage.PutOptions{IfNoneMatch: true}); err != nil {
			r.t.Fatal(err)
		}
		sum := sha256.Sum256(body)
		entries = append(entries, format.ManifestEntry{Name: name, Object: id, Size: int64(len(body)), SHA256: hex.EncodeToString(sum[:])})
	}
	at := time.Now().UTC().Truncate(time.Millisecond)
	v, err := r.g.PutVersion(r.ctx, graph.VersionSpec{Table: table, VersionID: ulid.Make(), Base: base, Put: entries, Delete: del, Time: at, Op: "edit-" + tag})
	if err != nil {
		r.t.Fatalf("edit %s on %s: %v", table, branch, err)
	}
	res, err := r.g.Append(r.ctx, graph.CommitSpec{Branch: branch, SetPins: map[string]ulid.ULID{table: v.Version.ID},
		Author: "test", Message: "edit " + tag, Time: at, Op: "commit-" + tag})
	if err != nil {
		r.t.Fatalf("append on %s: %v", branch, err)
	}
	c, err := r.g.Commit(r.ctx, res.Plan.Commit.ID)
	if err != nil {
		r.t.Fatal(err)
	}
	return c
}

// names lists the entry names of table at c.
func (r *rig2) entryNames(c graph.Commit, table string) []string {
	r.t.Helper()
	v, err := r.g.TableAt(r.ctx, c, table)
	if err != nil {
		r.t.Fatal(err)
	}
	var out []string
	if err := r.g.EachEntry(r.ctx, v, func(e format.ManifestEntry) error { out = append(out, e.Name); return nil }); err != nil {
		r.t.Fatal(err)
	}
	return out
}

// Object-level merge: both sides appended different objects to one table
// since their fork → merged with the union; the preview's per-table counts are what the
// merge then does.
func TestMerge_BothSidesAppend_MergedWithTheUnion_PreviewMatches(t *testing.T) {
	t.Parallel()
	r := newRig2(t)
	r.startWorker()
	r.edit("main", "ev", "0", []string{"part-a"}, nil)
	if _, err := r.gc.CreateBranch(r.ctx, client.CreateBranchRequest{Graph: r.graph, Branch: "side"}); err != nil {
		t.Fatal(err)
	}
	r.names = append(r.names, "side")
	r.edit("side", "ev", "s", []string{"part-b"}, nil)
	r.edit("main", "ev", "m", []string{"part-c"}, nil)
	before := r.branchHead("main")

	pre, err := r.gc.Merge(r.ctx, client.MergeRequest{Graph: r.graph, Source: "side", Target: "main", Preview: true})
	if err != nil || pre.Outcome != outcome.Merged || len(pre.Tables) != 1 {
		t.Fatalf("preview: %+v, %v; want merged, one table", pre, err)
	}
	line := pre.Tables[0]
	if line.Table != "ev" || line.Action != workflows.MergeMerged || line.Added != 1 || line.Removed != 0 || line.Replaced != 0 {
		t.Fatalf("preview line %+v; want ev merged, 1 added", line)
	}
	if now := r.branchHead("main"); now.ETag != before.ETag {
		t.Fatal("the preview wrote main's ref")
	}
	res, err := r.gc.Merge(r.ctx, client.MergeRequest{Graph: r.graph, Source: "side", Target: "main"})
	if err != nil || res.Outcome != outcome.Merged || len(res.Tables) != 1 || res.Tables[0].Added != line.Added || res.Tables[0].Action != line.Action {
		t.Fatalf("merge: %+v, %v; want merged as previewed (%+v)", res, err, line)
	}
	head := r.branchHead("main").Commit
	side := r.branchHead("side").Commit
	if head.ID.String() != res.Commit || head.FirstParent() != before.Commit.ID || head.MergedParent() != side.ID {
		t.Fatalf("main's head %s (parents %v); want the merge %s of %s into %s", head.ID, head.Parents, res.Commit, side.ID, before.Commit.ID)
	}
	if got := r.entryNames(head, "ev"); strings.Join(got, ",") != "part-a,part-b,part-c" {
		t.Fatalf("ev after the merge: %v; want the union part-a,part-b,part-c", got)
	}
	if _, err := r.g.TableAt(r.ctx, head, "t"); err != nil {
		t.Fatalf("table t lost: %v", err)
	}
	r.report("main", res.Commit)
	// Merged again: nothing new.
	if again, err := r.gc.Merge(r.ctx, client.MergeRequest{Graph: r.graph, Source: "side", Target: "main"}); err != nil || again.Outcome != outcome.AlreadyUpToDate {
		t.Fatalf("merge again: %+v, %v; want already_up_to_date", again, err)
	}
}

// The same object removed on one side and replaced on the other is a conflict that
// names it; nothing is written. A table only one side changed is adopted meanwhile.
func TestMerge_RemovedOnOneSideReplacedOnTheOther_ConflictNamesTheObject(t *testing.T) {
	t.Parallel()
	r := newRig2(t)
	r.startWorker()
	r.edit("main", "ev", "0", []string{"part-a", "part-b"}, nil)
	if _, err := r.gc.CreateBranch(r.ctx, client.CreateBranchRequest{Graph: r.graph, Branch: "side"}); err != nil {
		t.Fatal(err)
	}
	r.names = append(r.names, "side")
	r.edit("side", "ev", "s", nil, []string{"part-a"})
	r.edit("main", "ev", "m", []string{"part-a"}, nil) // replaced: a new object under the name
	before := r.branchHead("main")
	pre, err := r.gc.Merge(r.ctx, client.MergeRequest{Graph: r.graph, Source: "side", Target: "main", Preview: true})
	if !errors.Is(err, outcome.ErrConflict) || len(pre.Tables) != 1 || pre.Tables[0].Action != workflows.MergeConflict ||
		strings.Join(pre.Tables[0].Conflicts, ",") != "part-a" {
		t.Fatalf("preview: %+v, %v; want a conflict naming part-a", pre, err)
	}
	res, err := r.gc.Merge(r.ctx, client.MergeRequest{Graph: r.graph, Source: "side", Target: "main"})
	if !errors.Is(err, outcome.ErrConflict) || len(res.Tables) != 1 || strings.Join(res.Tables[0].Conflicts, ",") != "part-a" ||
		!strings.Contains(res.Message, "part-a") {
		t.Fatalf("merge: %+v, %v; want a conflict naming part-a", res, err)
	}
	if now := r.branchHead("main"); now.ETag != before.ETag {
		t.Fatalf("main moved to %s after a conflict", now.Commit.ID)
	}
}

// The client's read surfaces on a graph: branch list and show, log, tags, diff
// and table objects read the heads the refs name and the pins and manifest maps.
func TestClientReaders_ListShowLogDiffObjects(t *testing.T) {
	t.Parallel()
	r := newRig2(t)
	r.startWorker()
	root := r.branchHead("main").Commit
	w, err := r.gc.WriteTable(r.ctx, r.inner, client.WriteTableRequest{Graph: r.graph, Branch: "main", Table: "u", Files: writeFiles(t, "one", "three")})
	if err != nil || w.Outcome != outcome.Done {
		t.Fatalf("write: %+v, %v", w, err)
	}
	r.report("main", w.Commit)
	rd := client.NewReader(r.inner)
	bs, err := rd.ListBranches(r.ctx, r.graph)
	if err != nil || len(bs) != 1 || bs[0].Head != w.Commit || bs[0].Tables != 2 {
		t.Fatalf("branches: %+v, %v; want main at %s with 2 tables", bs, err, w.Commit)
	}
	d, err := rd.ShowBranch(r.ctx, r.graph, "main")
	if err != nil || d.Head != w.Commit || len(d.Pins) != 2 || len(d.Parents) != 1 || d.Parents[0] != root.ID.String() {
		t.Fatalf("show: %+v, %v", d, err)
	}
	log, err := rd.Log(r.ctx, r.graph, "main", 0)
	if err != nil || len(log.Entries) != 3 || log.Entries[0].Commit != w.Commit || log.Entries[1].Commit != root.ID.String() {
		t.Fatalf("log: %+v, %v; want the write, the setup commit and the root", log, err)
	}
	diff, err := rd.Diff(r.ctx, r.graph, root.ID.String(), "main")
	if err != nil || len(diff.Tables) != 1 || diff.Tables[0].Table != "u" || diff.Unchanged != 1 {
		t.Fatalf("diff: %+v, %v; want u added, t unchanged", diff, err)
	}
	objs, err := rd.TableObjects(r.ctx, r.graph, "main", "u")
	if err != nil || len(objs.Objects) != 2 || objs.Bytes != 8 {
		t.Fatalf("table objects: %+v, %v; want 2 objects, 8 bytes", objs, err)
	}
	if _, err := r.gc.CreateTag(r.ctx, client.CreateTagRequest{Graph: r.graph, Name: "t1"}); err != nil {
		t.Fatal(err)
	}
	td, err := rd.ShowTag(r.ctx, r.graph, "t1")
	if err != nil || !td.Retained || len(td.Pins) != 2 {
		t.Fatalf("show tag: %+v, %v", td, err)
	}
}

// A table write to a graph whose file is above the upload threshold: a multipart
// upload to versitygw (three parts of S3's 5 MiB minimum), then the write commits it.
func TestWriteTable_MultipartObject_Done(t *testing.T) {
	t.Parallel()
	r := newRig2(t)
	r.startWorker()
	dir := t.TempDir()
	path := dir + "/big.bin"
	body := make([]byte, 11<<20)
	for i := range body {
		body[i] = byte(i / 4096)
	}
	if err := os.WriteFile(path, body, 0o644); err != nil {
		t.Fatal(err)
	}
	r.store.ResetCounts()
	w, err := r.gc.WriteTable(r.ctx, r.store, client.WriteTableRequest{Graph: r.graph, Branch: "main", Table: "big", Files: []string{path},
		Upload: client.UploadOptions{Threshold: 5 << 20, PartSize: 5 << 20}})
	if err != nil || w.Outcome != outcome.Done || w.Bytes != int64(len(body)) {
		t.Fatalf("write: %+v, %v", w, err)
	}
	if n := r.store.Count(faults.OpUploadPart).Sent; n != 3 {
		t.Fatalf("%d parts sent, want 3", n)
	}
	objs, err := client.NewReader(r.inner).TableObjects(r.ctx, r.graph, "main", "big")
	if err != nil || len(objs.Objects) != 1 || objs.Bytes != int64(len(body)) {
		t.Fatalf("table objects: %+v, %v", objs, err)
	}
	r.report("main", w.Commit)
}

// Editing a table on a graph: --append adds to the head's version, --remove drops
// an entry by name, --import registers an object already in the bucket by reference (zero
// copy: the version names its key; nothing is written under it). Bad edits are typed.
func TestWriteTable_AppendRemoveImport(t *testing.T) {
	t.Parallel()
	r := newRig2(t)
	r.startWorker()
	write := func(req client.WriteTableRequest) workflows.WriteTableResult {
		t.Helper()
		req.Graph, req.Branch, req.Table = r.graph, "main", "u"
		res, err := r.gc.WriteTable(r.ctx, r.inner, req)
		if err != nil || res.Outcome != outcome.Done {
			t.Fatalf("write %+v: %+v, %v", req, res, err)
		}
		r.report("main", res.Commit)
		return res
	}
	whole := write(client.WriteTableRequest{Files: writeFiles(t, "a", "b")})
	first := r.entryNames(r.branchHead("main").Commit, "u")
	write(client.WriteTableRequest{Files: writeFiles(t, "c"), Append: true})
	appended := r.entryNames(r.branchHead("main").Commit, "u")
	if len(appended) != 3 || appended[0] != first[0] || appended[1] != first[1] {
		t.Fatalf("after append: %v; want %v plus one", appended, first)
	}
	// The append's pin records what it changed from the version it was written on.
	var pin format.PinEntry
	if err := r.g.EachPin(r.ctx, r.branchHead("main").Commit, func(p format.PinEntry) error {
		if p.Table == "u" {
			pin = p
		}
		return nil
	}); err != nil || pin.Base.String() != whole.Version || pin.Added != 1 || pin.Removed != 0 || pin.Replaced != 0 {
		t.Fatalf("the append's pin %+v, %v; want base %s, +1 -0 ~0", pin, err, whole.Version)
	}
	res := write(client.WriteTableRequest{Remove: []string{first[0]}})
	if got := r.entryNames(r.branchHead("main").Commit, "u"); len(got) != 2 || got[0] != first[1] {
		t.Fatalf("after removing %s: %v", first[0], got)
	}
	if res.Version == "" {
		t.Fatal("no version reported")
	}
	ext := "external/landing/part-0001.parquet"
	if _, err := r.inner.Put(r.ctx, ext, []byte("parquet bytes"), storage.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	before := r.bucket()
	write(client.WriteTableRequest{Import: []string{ext}, Append: true})
	head := r.branchHead("main").Commit
	v, err := r.g.TableAt(r.ctx, head, "u")
	if err != nil {
		t.Fatal(err)
	}
	e, ok, err := r.g.Entry(r.ctx, v, ext)
	if err != nil || !ok || e.External != ext || e.Size != int64(len("parquet bytes")) || e.ETag == "" {
		t.Fatalf("imported entry %+v, %v, %v", e, ok, err)
	}
	for k := range r.bucket() {
		if _, had := before[k]; !had && strings.HasPrefix(k, format.TableObjectsPrefix(r.graph, "u")) {
			t.Fatalf("the import wrote a data object %s; it must copy nothing", k)
		}
	}
	// Typed errors: a name the head's version lacks, an import under the graph's prefix.
	if _, err := r.gc.WriteTable(r.ctx, r.inner, client.WriteTableRequest{Graph: r.graph, Branch: "main", Table: "u", Remove: []string{"no-such-entry"}}); !errors.Is(err, outcome.ErrInvalid) {
		t.Fatalf("remove of a missing name: %v; want invalid", err)
	}
	if _, err := r.gc.WriteTable(r.ctx, r.inner, client.WriteTableRequest{Graph: r.graph, Branch: "main", Table: "u",
		Import: []string{format.GraphPrefix(r.graph) + "tables/u/x"}}); !errors.Is(err, outcome.ErrInvalid) {
		t.Fatalf("import under the graph's prefix: %v; want invalid", err)
	}
	if _, err := r.gc.WriteTable(r.ctx, r.inner, client.WriteTableRequest{Graph: r.graph, Branch: "main", Table: "u", Import: []string{"external/none"}}); !errors.Is(err, outcome.ErrNotFound) {
		t.Fatalf("import of a missing key: %v; want not_found", err)
	}
}

// A write terminated while its head swap is held in flight leaves nothing behind
// once the reconciler ran: it fences the publish (the ref rewritten at the same head), the
// operation ends unpublished with its pins released, and the late swap fails.
func TestWriteTerminatedInDoubt_ReconcilerFencesThePublish(t *testing.T) {
	t.Parallel()
	r := newRig2(t)
	r.startWorker()
	opID, start, run, hold := r.writeInDoubt("orphan-", "orphan", faults.Hold, false)
	r.terminate(run)
	res := r.reconcile()
	if len(res.Settled) != 1 || res.Settled[0].OpID != opID || res.Settled[0].Outcome != outcome.Unpublished {
		t.Fatalf("reconcile %+v, want %s settled unpublished", res, opID)
	}
	op := r.operation(opID)
	if op.State != catalog.OperationDone || op.Outcome != catalog.OutcomeUnpublished || len(r.pinsOf(opID)) != 0 {
		t.Fatalf("ledger %s/%s, pins %v; want done/unpublished, no pins", op.State, op.Outcome, r.pinsOf(opID))
	}
	head := r.branchHead("main")
	if head.Commit.ID != start.Commit.ID || head.Ref.Op != opID {
		t.Fatalf("main: head %s, op %s; want head %s kept under the fence of %s", head.Commit.ID, head.Ref.Op, start.Commit.ID, opID)
	}
	hold()
	wantLateRefused(t, r.ctx, "late head swap after the reconciler's fence", r.store.Held())
	if now := r.branchHead("main"); now.Commit.ID != start.Commit.ID {
		t.Fatalf("main moved to %s after the late swap", now.Commit.ID)
	}
}
