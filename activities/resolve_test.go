package activities

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/catalog/catalogtest"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/faults"
	"github.com/graftworks/graft/storage/memstore"
)

// resolveRig runs the create and delete activities against an in-memory store that counts
// requests (faults.Wrap, no rules) and a real, migrated ledger, the way the workflows
// call them, so a name can be deleted and re-created a thousand times in seconds.
type resolveRig struct {
	t     *testing.T
	ctx   context.Context
	cat   *catalog.Catalog
	store *faults.Store
	a     *Activities
	graph string
	n     int // operations started, for fresh op ids
}

func newResolveRig(t *testing.T) *resolveRig {
	t.Helper()
	r := &resolveRig{t: t, ctx: context.Background(), cat: catalogtest.Open(t), store: faults.Wrap(memstore.New()), graph: "g"}
	r.a = &Activities{Store: r.store, Catalog: r.cat}
	init, err := r.a.InitGraph(r.ctx, InitGraphInput{OpID: "op-init", Graph: r.graph, WorkflowID: "wf-init", RunID: "run-init"})
	if err != nil || init.Outcome != outcome.Done {
		t.Fatalf("init graph: %+v, %v", init, err)
	}
	r.finish(Owner{OpID: "op-init", Run: "run-init"}, catalog.OpInitGraph, outcome.Done)
	return r
}

func (r *resolveRig) op(kind string) (opID, wf, run string) {
	r.n++
	return fmt.Sprintf("op-%s-%d", kind, r.n), fmt.Sprintf("wf-%s-%d", kind, r.n), fmt.Sprintf("run-%s-%d", kind, r.n)
}

func (r *resolveRig) finish(o Owner, kind catalog.OperationKind, out outcome.Outcome) {
	r.t.Helper()
	if fin, err := r.a.Finish(r.ctx, FinishInput{Owner: o, Kind: kind, Outcome: out, Graph: r.graph}); err != nil || !fin.Owned {
		r.t.Fatalf("finish %s: %+v, %v", o.OpID, fin, err)
	}
}

// create runs a create of branch from main to the end, as the workflow does: prepare,
// clone, the ref's put (which records the witness live and finishes the operation).
func (r *resolveRig) create(branch string) string {
	r.t.Helper()
	opID, wf, run := r.op("create")
	prep, err := r.a.PrepareCreate(r.ctx, PrepareCreateInput{OpID: opID, Graph: r.graph, Branch: branch, Time: time.Now().UTC(), Attempt: 1, WorkflowID: wf, RunID: run})
	if err != nil || prep.Outcome != "" || !prep.Owned {
		r.t.Fatalf("prepare create of %s: %+v, %v", branch, prep, err)
	}
	o := Owner{OpID: opID, Run: run}
	clone, err := r.a.CloneTree(r.ctx, CloneInput{Owner: o, Graph: r.graph, Native: prep.Native, ForkID: prep.ForkID, ForkBytes: prep.ForkBytes, ForkChunks: prep.ForkChunks})
	if err != nil || clone.State != CloneCommitted {
		r.t.Fatalf("clone %s: %+v, %v", prep.Native, clone, err)
	}
	v, err := r.a.Write(r.ctx, WriteInput{Owner: o, Spec: WriteSpec{Kind: WriteRef, Graph: r.graph, Body: prep.RefBytes, Branch: branch, Landed: outcome.Created, Subject: prep.Native}})
	if err != nil || v.State != Landed || !v.Recorded {
		r.t.Fatalf("publish %s: %+v, %v", prep.Native, v, err)
	}
	return prep.Native
}

// delete runs a delete of branch to the end: prepare, the retire, the finish.
func (r *resolveRig) delete(branch string) string {
	r.t.Helper()
	opID, wf, run := r.op("delete")
	prep, err := r.a.PrepareDeleteBranch(r.ctx, PrepareDeleteBranchInput{OpID: opID, Graph: r.graph, Branch: branch, WorkflowID: wf, RunID: run})
	if err != nil || prep.Outcome != "" || !prep.Owned {
		r.t.Fatalf("prepare delete of %s: %+v, %v", branch, prep, err)
	}
	o := Owner{OpID: opID, Run: run}
	v, err := r.a.Write(r.ctx, WriteInput{Owner: o, Spec: prep.Spec})
	if err != nil || v.State != Landed {
		r.t.Fatalf("retire %s: %+v, %v", prep.Native, v, err)
	}
	r.finish(o, catalog.OpDeleteBranch, outcome.Deleted)
	return prep.Native
}

func (r *resolveRig) witness(native string) catalog.Incarnation {
	r.t.Helper()
	w, err := r.cat.IncarnationGetByNative(r.ctx, catalog.IncarnationGetByNativeParams{Graph: r.graph, Native: native})
	if err != nil {
		r.t.Fatalf("witness of %s: %v", native, err)
	}
	return w
}

// requests counts the requests each op kind sent while f ran.
func (r *resolveRig) requests(f func()) map[faults.Op]int {
	r.store.ResetCounts()
	f()
	out := map[faults.Op]int{}
	for op, tally := range r.store.Counts() {
		out[op] = tally.Attempted
	}
	return out
}

// refGets counts the GETs of branch ref keys while f ran.
func (r *resolveRig) refGets(f func()) int {
	r.store.ResetCounts()
	f()
	return r.store.CountMatching(faults.Rule{Op: faults.OpGet, KeyPrefix: format.BranchRefsPrefix(r.graph)}).Attempted
}

// A name deleted and re-created 1,000 times resolves on the worker — the resolve
// of a write's plan, of a merge's and a restore's heads, of a create's source branch, and
// the delete's — in exactly the requests of a name created once; and the create's name
// check of a name with 1,000 dead incarnations reads none of their refs.
func TestWorkerResolve_NameRecreated1000Times_CostsTheRequestsOfANameCreatedOnce(t *testing.T) {
	r := newResolveRig(t)
	const cycles = 1000
	once := r.create("once")
	hot := r.create("hot")
	for range cycles {
		r.delete("hot")
		hot = r.create("hot")
	}
	// Storage's own resolve, a reader's without a ledger,
	// reads every incarnation.
	full := r.requests(func() {
		if b, err := graph.ResolveBranch(r.ctx, r.store, r.graph, "hot"); err != nil || b.Native != hot {
			t.Fatalf("storage's own resolve of hot: %+v, %v; want %s", b, err, hot)
		}
	})
	if want := map[faults.Op]int{faults.OpList: 2, faults.OpGet: cycles + 1}; !maps.Equal(full, want) {
		t.Fatalf("the full resolve of a name with %d incarnations sent %v; want %v", cycles+1, full, want)
	}

	type path struct {
		name string
		run  func(branch string) string // the native it resolved, or "" when it does not say
	}
	paths := []path{
		{"write plan (resolveWriteBranch)", func(branch string) string {
			b, o, msg, err := r.a.resolveWriteBranch(r.ctx, r.graph, branch)
			if err != nil || o != "" {
				t.Fatalf("resolve %s: %s %s %v", branch, o, msg, err)
			}
			return b.Native
		}},
		{"merge, restore and tag heads (readBranchHead)", func(branch string) string {
			h, o, msg, err := r.a.readBranchHead(r.ctx, r.graph, branch)
			if err != nil || o != "" {
				t.Fatalf("read head of %s: %s %s %v", branch, o, msg, err)
			}
			return h.Native
		}},
		{"merge plan (preview)", func(branch string) string {
			res, err := r.a.PlanMerge(r.ctx, PlanMergeInput{Graph: r.graph, Source: branch, Target: "main", Preview: true})
			if err != nil || res.Outcome == outcome.NotFound || res.Outcome == outcome.Conflict {
				t.Fatalf("plan merge of %s: %+v, %v", branch, res, err)
			}
			return ""
		}},
		{"create from the branch (PrepareCreate)", func(branch string) string {
			opID, wf, run := r.op("create-from")
			res, err := r.a.PrepareCreate(r.ctx, PrepareCreateInput{OpID: opID, Graph: r.graph, Branch: "from/" + opID, SourceBranch: branch,
				Time: time.Now().UTC(), Attempt: 1, WorkflowID: wf, RunID: run})
			if err != nil || res.Outcome != "" {
				t.Fatalf("prepare create from %s: %+v, %v", branch, res, err)
			}
			return ""
		}},
		{"delete (PrepareDeleteBranch)", func(branch string) string {
			opID, wf, run := r.op("delete-prep")
			res, err := r.a.PrepareDeleteBranch(r.ctx, PrepareDeleteBranchInput{OpID: opID, Graph: r.graph, Branch: branch, WorkflowID: wf, RunID: run})
			if err != nil || res.Outcome != "" {
				t.Fatalf("prepare delete of %s: %+v, %v", branch, res, err)
			}
			return res.Native
		}},
	}
	for _, p := range paths {
		var gotOnce, gotHot string
		costOnce := r.requests(func() { gotOnce = p.run("once") })
		costHot := r.requests(func() { gotHot = p.run("hot") })
		if gotOnce != "" && gotOnce != once || gotHot != "" && gotHot != hot {
			t.Errorf("%s resolved %s and %s, want %s and %s", p.name, gotOnce, gotHot, once, hot)
		}
		if !maps.Equal(costOnce, costHot) {
			t.Errorf("%s: %v for a name created once, %v for one re-created %d times; want the same", p.name, costOnce, costHot, cycles)
		}
		t.Logf("%s: %v for either name", p.name, costHot)
	}

	// The create's name check, once hot is deleted too: its 1,001 refs cost their
	// listings, and no GET, since the ledger has witnessed every one retired.
	r.delete("hot")
	var res PrepareCreateResult
	cost := r.requests(func() {
		var err error
		if res, err = r.a.checkNameFree(r.ctx, r.graph, "hot", ""); err != nil {
			t.Fatalf("check name: %v", err)
		}
	})
	if res.Outcome != "" {
		t.Fatalf("check name of a deleted branch: %+v, want free", res)
	}
	if want := map[faults.Op]int{faults.OpList: 2}; !maps.Equal(cost, want) {
		t.Fatalf("the name check of %d dead incarnations sent %v; want %v (two pages of refs, no GET)", cycles+1, cost, want)
	}
	// Its descendants' and ancestors' dead refs are not read either.
	if n := r.refGets(func() {
		if res, err := r.a.checkNameFree(r.ctx, r.graph, "hot/child", ""); err != nil || res.Outcome != "" {
			t.Fatalf("check name hot/child: %+v, %v", res, err)
		}
	}); n != 0 {
		t.Fatalf("the name check of hot/child read %d refs of hot; want none", n)
	}
	// And a name created again after all that is one more create.
	if again := r.create("hot"); r.witness(again).State != catalog.IncarnationLive {
		t.Fatalf("re-created hot: witness %+v", r.witness(again))
	}
}

// A create reset after its ref landed and before the ledger heard of it (its worker lost,
// then an operator's reset: a new run of the same workflow, the same start time, so the
// same native name) finds its own live ref, not another branch: it goes on and ends
// created. It used to end conflict and settle its witness unpublished while its ref was
// live — a live branch whose witness says it can never be.
func TestPrepareCreate_ResetAfterItsRefLanded_FindsItsOwnRef_EndsCreated(t *testing.T) {
	r := newResolveRig(t)
	r.create("feat")
	r.delete("feat")

	in := PrepareCreateInput{OpID: "op-reset", Graph: r.graph, Branch: "feat", Time: time.Now().UTC(), Attempt: 1, WorkflowID: "wf-reset", RunID: "run-1"}
	prep, err := r.a.PrepareCreate(r.ctx, in)
	if err != nil || prep.Outcome != "" {
		t.Fatalf("prepare: %+v, %v", prep, err)
	}
	o := Owner{OpID: in.OpID, Run: "run-1"}
	if clone, err := r.a.CloneTree(r.ctx, CloneInput{Owner: o, Graph: r.graph, Native: prep.Native, ForkID: prep.ForkID, ForkBytes: prep.ForkBytes, ForkChunks: prep.ForkChunks}); err != nil || clone.State != CloneCommitted {
		t.Fatalf("clone: %+v, %v", clone, err)
	}
	// The ref put lands; the worker is lost before the ledger hears of it.
	if _, err := r.store.Inner().Put(r.ctx, format.BranchRefKey(r.graph, prep.Native), prep.RefBytes, storage.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	in.RunID = "run-2" // an operator's reset: a new run of the same workflow
	again, err := r.a.PrepareCreate(r.ctx, in)
	if err != nil || again.Outcome != "" || !again.Owned || again.Native != prep.Native {
		t.Fatalf("prepare after the reset: %+v, %v; want the same incarnation, %s, to go on", again, err, prep.Native)
	}
	o2 := Owner{OpID: in.OpID, Run: "run-2"}
	if clone, err := r.a.CloneTree(r.ctx, CloneInput{Owner: o2, Graph: r.graph, Native: again.Native, ForkID: again.ForkID, ForkBytes: again.ForkBytes, ForkChunks: again.ForkChunks}); err != nil || clone.State != CloneCommitted {
		t.Fatalf("clone after the reset: %+v, %v", clone, err)
	}
	v, err := r.a.Write(r.ctx, WriteInput{Owner: o2, Spec: *again.RefSpec, PendingRecorded: true})
	if err != nil || v.State != Landed || !v.Recorded {
		t.Fatalf("ref after the reset: %+v, %v; want landed (its own bytes) and recorded", v, err)
	}
	if w := r.witness(prep.Native); w.State != catalog.IncarnationLive {
		t.Fatalf("witness %+v, want live", w)
	}
	if b, err := graph.ResolveBranch(r.ctx, r.store, r.graph, "feat"); err != nil || b.Native != prep.Native {
		t.Fatalf("storage: %+v, %v; want %s live", b, err, prep.Native)
	}
	// The name check still refuses the name to anyone else.
	if res, err := r.a.checkNameFree(r.ctx, r.graph, "feat", ""); err != nil || res.Outcome != outcome.Conflict || !strings.Contains(res.Message, prep.Native) {
		t.Fatalf("name check: %+v, %v; want conflict naming the live %s", res, err, prep.Native)
	}
}

// A hint that is stale — the ledger says live, storage says retired (the retire landed and
// its witness is not recorded yet) — falls back and answers what storage says: not found,
// or the incarnation storage has live.
func TestWorkerResolve_StaleLiveHint_AnswersWhatStorageSays(t *testing.T) {
	r := newResolveRig(t)
	native := r.create("stale")
	b, err := graph.ResolveBranch(r.ctx, r.store, r.graph, "stale")
	if err != nil {
		t.Fatal(err)
	}
	// The retire lands; the finish that records it has not run.
	if _, err := graph.RetireRef(r.ctx, r.store, r.graph, native, b.ETag, "op-retire-unrecorded"); err != nil {
		t.Fatal(err)
	}
	if w := r.witness(native); w.State != catalog.IncarnationLive {
		t.Fatalf("witness %+v, want still live", w)
	}
	if _, o, _, err := r.a.resolveWriteBranch(r.ctx, r.graph, "stale"); err != nil || o != outcome.NotFound {
		t.Fatalf("write resolve with a stale hint: %s, %v; want not_found", o, err)
	}
	if _, err := r.a.resolveBranch(r.ctx, r.graph, "stale"); !errors.Is(err, graph.ErrBranchNotFound) {
		t.Fatalf("resolve with a stale hint: %v, want ErrBranchNotFound", err)
	}
	opID, wf, run := r.op("delete")
	if res, err := r.a.PrepareDeleteBranch(r.ctx, PrepareDeleteBranchInput{OpID: opID, Graph: r.graph, Branch: "stale", WorkflowID: wf, RunID: run}); err != nil || res.Outcome != outcome.NotFound {
		t.Fatalf("delete with a stale hint: %+v, %v; want not_found", res, err)
	}

	// Another writer (outside this ledger) makes a new incarnation live: that is the answer.
	other := r.handWrittenLive("stale")
	if b, o, msg, err := r.a.resolveWriteBranch(r.ctx, r.graph, "stale"); err != nil || o != "" || b.Native != other {
		t.Fatalf("resolve: %+v, %s %s %v; want storage's %s", b, o, msg, err, other)
	}
}

// handWrittenLive writes a live ref of logical forked from main's root, with no witness.
func (r *resolveRig) handWrittenLive(logical string) string {
	r.t.Helper()
	main, err := graph.ResolveBranch(r.ctx, r.store, r.graph, "main")
	if err != nil {
		r.t.Fatal(err)
	}
	g, err := graph.Open(r.a.Store, r.graph)
	if err != nil {
		r.t.Fatal(err)
	}
	opID, _, _ := r.op("hand")
	tree := nativeULID(opID, 1, time.Now())
	plan, err := g.PlanFork(r.ctx, graph.ForkSpec{Branch: logical, Tree: tree, Source: main.Ref.Head.String(), Author: "old-tool", Message: "fork", Time: time.Now().UTC(), Op: opID})
	if err != nil {
		r.t.Fatal(err)
	}
	for _, c := range plan.Chunks {
		if _, err := graph.PutIfAbsent(r.ctx, r.store, c.Key, c.Body); err != nil {
			r.t.Fatal(err)
		}
	}
	if _, err := graph.PutIfAbsent(r.ctx, r.store, plan.CommitKey, plan.CommitBody); err != nil {
		r.t.Fatal(err)
	}
	if _, err := graph.PutIfAbsent(r.ctx, r.store, plan.RefKey, plan.RefBody); err != nil {
		r.t.Fatal(err)
	}
	return format.NativeName(logical, tree)
}

// An undecodable ref at an old incarnation's key beside the live one: the worker resolves
// the live one (through the hint, and through storage alone when the ledger has no
// witness), and a delete goes ahead; with no live ref it is a conflict, not not_found.
func TestWorkerResolve_UndecodableOldRef_DoesNotMakeTheBranchUnresolvable(t *testing.T) {
	r := newResolveRig(t)
	r.create("x")
	r.delete("x")
	r.create("x")
	r.delete("x")
	live := r.create("x")
	// An old incarnation's ref key holds garbage (a broken tool, a bad restore).
	garbled := format.NativeName("x", nativeULID("op-garbage", 1, time.Now()))
	if _, err := r.store.Inner().Put(r.ctx, format.BranchRefKey(r.graph, garbled), []byte("\x00garbage"), storage.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	if b, o, msg, err := r.a.resolveWriteBranch(r.ctx, r.graph, "x"); err != nil || o != "" || b.Native != live {
		t.Fatalf("worker resolve: %+v, %s %s %v; want %s", b, o, msg, err, live)
	}
	b, err := graph.ResolveBranch(r.ctx, r.store, r.graph, "x")
	if err != nil || b.Native != live || len(b.Unreadable) != 1 || b.Unreadable[0] != format.BranchRefKey(r.graph, garbled) {
		t.Fatalf("storage resolve: %+v, %v; want %s with the garbled key reported", b, err, live)
	}

	// A live ref the ledger does not know (no hint) beside the garbage: the full read.
	r.delete("x")
	hand := r.handWrittenLive("x")
	if b, o, msg, err := r.a.resolveWriteBranch(r.ctx, r.graph, "x"); err != nil || o != "" || b.Native != hand {
		t.Fatalf("worker resolve without a hint: %+v, %s %s %v; want %s", b, o, msg, err, hand)
	}
	opID, wf, run := r.op("delete")
	res, err := r.a.PrepareDeleteBranch(r.ctx, PrepareDeleteBranchInput{OpID: opID, Graph: r.graph, Branch: "x", WorkflowID: wf, RunID: run})
	if err != nil || res.Outcome != "" || res.Native != hand {
		t.Fatalf("delete beside the garbage: %+v, %v; want it to retire %s", res, err, hand)
	}
	if v, err := r.a.Write(r.ctx, WriteInput{Owner: Owner{OpID: opID, Run: run}, Spec: res.Spec}); err != nil || v.State != Landed {
		t.Fatalf("retire: %+v, %v", v, err)
	}
	r.finish(Owner{OpID: opID, Run: run}, catalog.OpDeleteBranch, outcome.Deleted)

	// Nothing live, the garbage unreadable: it might be the live one.
	if _, o, msg, err := r.a.resolveWriteBranch(r.ctx, r.graph, "x"); err != nil || o != outcome.Conflict || !strings.Contains(msg, garbled) {
		t.Fatalf("worker resolve with no live ref: %s %s %v; want conflict naming %s", o, msg, err, garbled)
	}
	opID, wf, run = r.op("delete")
	if res, err := r.a.PrepareDeleteBranch(r.ctx, PrepareDeleteBranchInput{OpID: opID, Graph: r.graph, Branch: "x", WorkflowID: wf, RunID: run}); err != nil || res.Outcome != outcome.Conflict {
		t.Fatalf("delete with no live ref and an unreadable one: %+v, %v; want conflict", res, err)
	}
}

// A delete whose retire landed and was recorded, run again under a new run of its
// workflow (an operator's reset) after a later create made the name live again, reports
// its own retire and leaves the later incarnation alone: once the operation has a pending
// write, the delete reads every ref rather than trusting the hint.
func TestPrepareDelete_RepeatedAfterItsRetireLanded_LeavesALaterIncarnationAlone(t *testing.T) {
	r := newResolveRig(t)
	first := r.create("d")
	in := PrepareDeleteBranchInput{OpID: "op-del-reset", Graph: r.graph, Branch: "d", WorkflowID: "wf-del-reset", RunID: "run-1"}
	prep, err := r.a.PrepareDeleteBranch(r.ctx, in)
	if err != nil || prep.Outcome != "" || prep.Native != first {
		t.Fatalf("prepare: %+v, %v", prep, err)
	}
	if v, err := r.a.Write(r.ctx, WriteInput{Owner: Owner{OpID: in.OpID, Run: "run-1"}, Spec: prep.Spec}); err != nil || v.State != Landed {
		t.Fatalf("retire: %+v, %v", v, err)
	}
	if w := r.witness(first); w.State != catalog.IncarnationRetired {
		t.Fatalf("witness %+v, want retired", w)
	}
	later := r.create("d") // the ledger lets it: the first incarnation is retired
	in.RunID = "run-2"
	again, err := r.a.PrepareDeleteBranch(r.ctx, in)
	if err != nil || again.Outcome != "" || !again.Retired || again.Native != first {
		t.Fatalf("the repeated prepare: %+v, %v; want its own retire of %s reported", again, err, first)
	}
	if b, err := graph.ResolveBranch(r.ctx, r.store, r.graph, "d"); err != nil || b.Native != later {
		t.Fatalf("after: %+v, %v; want %s still live", b, err, later)
	}
}

// A delete whose retire landed but whose worker was killed before it recorded the witness
// retired, run again (its workflow's next task on another worker repeats the prepare),
// reports its own retire — and records the witness now. It used to end deleted with the
// witness still live, so the ledger refused every later create of the name as "already
// exists" while storage had no live ref (soak, versitygw seed 900959).
func TestPrepareDelete_RetireLandedWitnessNotRecorded_RepeatedPrepareRecordsIt_NameReusable(t *testing.T) {
	r := newResolveRig(t)
	native := r.create("w")
	in := PrepareDeleteBranchInput{OpID: "op-del-killed", Graph: r.graph, Branch: "w", WorkflowID: "wf-del-killed", RunID: "run-1"}
	prep, err := r.a.PrepareDeleteBranch(r.ctx, in)
	if err != nil || prep.Outcome != "" || prep.Native != native || !prep.PendingRecorded {
		t.Fatalf("prepare: %+v, %v", prep, err)
	}
	// The retire lands; the worker dies before the witness's transaction.
	if _, err := graph.RetireRef(r.ctx, r.store, r.graph, native, prep.Spec.ETag, in.OpID); err != nil {
		t.Fatal(err)
	}
	if w := r.witness(native); w.State != catalog.IncarnationLive {
		t.Fatalf("witness %+v; this test needs it still live", w)
	}
	again, err := r.a.PrepareDeleteBranch(r.ctx, in) // the same run's task, repeated on another worker
	if err != nil || again.Outcome != "" || !again.Retired || again.Native != native {
		t.Fatalf("the repeated prepare: %+v, %v; want its own retire of %s reported", again, err, native)
	}
	if w := r.witness(native); w.State != catalog.IncarnationRetired {
		t.Fatalf("witness %+v, want retired once the repeated prepare saw the retire", w)
	}
	r.finish(Owner{OpID: in.OpID, Run: "run-1"}, catalog.OpDeleteBranch, outcome.Deleted)
	if later := r.create("w"); later == native {
		t.Fatalf("re-created %s, want a new incarnation", later)
	}
}
