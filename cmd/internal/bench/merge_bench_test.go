package bench

import (
	"context"
	"fmt"
	"maps"
	"runtime"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/storage/faults"
	"github.com/graftworks/graft/workflows"
)

// mergeTables is the table count of the merge shapes (OmniGraph's merge
// campaign graph).
const mergeTables = 121

// mergeStack is createStack's graph (main with mergeTables tables) with a
// second version of every table, so a branch can change any table without
// writing data: its commit toggles a table between its two versions. (main's
// own change in a three-way merge's setup writes a version: see prepare.)
type mergeStack struct {
	*createStack
	alt map[ulid.ULID]ulid.ULID // version → the table's other version
	seq int
	// edits makes a branch change each table by an edit of its version (a version
	// written on it, one object added, its pin recording the change), as an append
	// does, instead of toggling between two whole versions.
	edits bool
}

func newMergeStack(tb testing.TB) *mergeStack {
	tb.Helper()
	return newMergeStackFrom(tb, newCreateStack(tb, 0, mergeTables))
}

// newMergeStackFrom is newMergeStack on a create stack of mergeTables tables.
func newMergeStackFrom(tb testing.TB, cs *createStack) *mergeStack {
	tb.Helper()
	st := &mergeStack{createStack: cs, alt: map[ulid.ULID]ulid.ULID{}}
	head := st.built.head(tb, graph.DefaultBranch)
	err := st.built.g.EachPin(context.Background(), head.Commit, func(p format.PinEntry) error {
		w := st.built.putVersion(tb, p.Table, []byte("y"))
		st.alt[p.Version], st.alt[w] = w, p.Version
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return st
}

// appendCommits appends depth commits that change nothing to branch, then
// one that toggles tables (or edits them: st.edits), straight to the store.
func (st *mergeStack) appendCommits(tb testing.TB, branch string, depth int, tables []string) {
	tb.Helper()
	st.built.appendMany(tb, branch, depth)
	head := st.built.head(tb, branch)
	pins, changes := map[string]ulid.ULID{}, map[string]graph.Change{}
	for _, t := range tables {
		v, ok, err := st.built.g.Pin(context.Background(), head.Commit, t)
		if err != nil || !ok {
			tb.Fatalf("pin of %s on %s: %v %v", t, branch, ok, err)
		}
		if st.edits {
			pins[t], changes[t] = st.built.editVersion(tb, t, v)
		} else {
			pins[t] = st.alt[v]
		}
	}
	st.built.commitChanges(tb, branch, pins, changes)
}

// changedTables names the first n tables.
func changedTables(n int) []string {
	var tables []string
	for i := range n {
		tables = append(tables, fmt.Sprintf("t%03d", i))
	}
	return tables
}

// prepare sets up one merge, untimed: a branch forked from main's head, with
// depth commits and then one changing `changed` tables; main gets depth
// commits and one changing a table the branch leaves alone (to a version
// written for it: main's pins never repeat, so neither does the merge
// commit's pins map, and every merge writes the same number of new pins
// chunks), so the merge is a three-way merge, not an adoption. It returns
// the branch's name.
func (st *mergeStack) prepare(tb testing.TB, depth, changed int) string {
	tb.Helper()
	st.seq++
	name := fmt.Sprintf("src%d", st.seq)
	st.built.fork(tb, name, graph.DefaultBranch)
	st.appendCommits(tb, name, depth, changedTables(changed))
	st.built.appendMany(tb, graph.DefaultBranch, depth)
	last := fmt.Sprintf("t%03d", mergeTables-1)
	st.built.commit(tb, graph.DefaultBranch, map[string]ulid.ULID{last: st.built.putVersion(tb, last, []byte("z"))})
	return name
}

// mergeOnce merges source into main through the engine and checks it merged.
func (st *mergeStack) mergeOnce(tb testing.TB, source string, changed int) workflows.MergeResult {
	tb.Helper()
	res, err := st.gc.Merge(context.Background(), client.MergeRequest{Graph: st.graph, Source: source, Target: graph.DefaultBranch})
	if err != nil || res.Outcome != workflows.OutcomeMerged {
		tb.Fatalf("merge %s: %+v, %v", source, res, err)
	}
	adopted := 0
	for _, t := range res.Tables {
		if t.Action == workflows.MergeAdopt {
			adopted++
		}
	}
	if adopted != changed {
		tb.Fatalf("merge %s adopted %d tables, want %d", source, adopted, changed)
	}
	return res
}

// mergeRaw runs the same steps as the engine (plan, put, finish) by direct
// calls, without Temporal, and returns how long each took.
func (st *mergeStack) mergeRaw(tb testing.TB, source string) (plan, put, finish time.Duration) {
	tb.Helper()
	ctx := context.Background()
	op := ulid.Make().String()
	owner := activities.Owner{OpID: op, Run: "raw-" + op}
	t0 := time.Now()
	p, err := st.acts.PlanMerge(ctx, activities.PlanMergeInput{OpID: op, Graph: st.graph, Source: source, Target: graph.DefaultBranch,
		WorkflowID: "raw-" + op, RunID: owner.Run})
	if err != nil || p.Outcome != "" {
		tb.Fatalf("plan: %v %s %s", err, p.Outcome, p.Message)
	}
	t1 := time.Now()
	r, err := st.acts.Write(ctx, activities.WriteInput{Owner: owner, Spec: p.Spec})
	if err != nil || r.State != activities.Landed {
		tb.Fatalf("put: %v %s", err, r.State)
	}
	t2 := time.Now()
	if _, err := st.acts.Finish(ctx, activities.FinishInput{Owner: owner, Kind: catalog.OpMerge, Outcome: p.Kind, Graph: st.graph, Branch: graph.DefaultBranch}); err != nil {
		tb.Fatal(err)
	}
	return t1.Sub(t0), t2.Sub(t1), time.Since(t2)
}

var mergeShapes = []struct{ depth, changed int }{
	{0, 1}, {0, 8}, {16, 8}, {64, 8}, {0, 29}, {16, 29}, {64, 29}, {64, 1},
}

// BenchmarkMerge measures merges through the engine (client → Temporal →
// worker, local directory store, eager start) of a branch into main in a
// graph of 121 tables, with 1, 8 or 29 tables changed on the branch (and
// one on main), at history depth 0, 16 and 64 on each side of the fork. It
// reports p50/p99 latency and object-store requests per merge, in all and
// per kind. Run with a fixed count, e.g. -benchtime=30x: each iteration
// first builds its own branch (untimed), up to 130 commits at depth 64.
func BenchmarkMerge(b *testing.B) {
	for _, shape := range mergeShapes {
		b.Run(fmt.Sprintf("tables=%d/changed=%d/depth=%d", mergeTables, shape.changed, shape.depth), func(b *testing.B) {
			st := newMergeStack(b)
			st.mergeOnce(b, st.prepare(b, shape.depth, shape.changed), shape.changed) // warm up
			var lat Latencies
			requests := faults.Counts{}
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				source := st.prepare(b, shape.depth, shape.changed)
				st.store.ResetCounts()
				b.StartTimer()
				start := time.Now()
				st.mergeOnce(b, source, shape.changed)
				lat.Add(time.Since(start))
				b.StopTimer()
				for op, t := range st.store.Counts() {
					c := requests[op]
					c.Attempted += t.Attempted
					requests[op] = c
				}
				b.StartTimer()
			}
			// The same steps called directly, for the engine's share.
			var raw, plan, put, finish Latencies
			for range min(b.N, 30) {
				source := st.prepare(b, shape.depth, shape.changed)
				p, u, f := st.mergeRaw(b, source)
				raw.Add(p + u + f)
				plan.Add(p)
				put.Add(u)
				finish.Add(f)
			}
			b.ReportMetric(float64(raw.Percentile(50).Microseconds())/1000, "raw-p50-ms")
			b.ReportMetric(float64(plan.Percentile(50).Microseconds())/1000, "raw-plan-p50-ms")
			b.ReportMetric(float64(put.Percentile(50).Microseconds())/1000, "raw-put-p50-ms")
			b.ReportMetric(float64(finish.Percentile(50).Microseconds())/1000, "raw-finish-p50-ms")
			n := float64(lat.Len())
			total := 0
			for _, op := range faults.Ops {
				if c := requests[op].Attempted; c > 0 {
					total += c
					b.ReportMetric(float64(c)/n, perOpUnit[op])
				}
			}
			b.ReportMetric(float64(total)/n, "requests/merge")
			b.ReportMetric(float64(lat.Percentile(50).Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat.Percentile(99).Microseconds())/1000, "p99-ms")
			b.ReportMetric(0, "ns/op")
		})
	}
	runtime.GC()
}

// MergeSuccessPathRequests is what a three-way merge costs in object-store
// requests when nothing goes wrong, on a graph of 121 tables with 8
// tables changed on the branch (t000–t007) and one on main (t120), the
// shape of BenchmarkMergeInto and of the depth-10,000 test:
//
//   - plan, the heads (both branches at once): main's ref, the incarnation
//     the ledger names (one GET), the branch's refs (one LIST: the harness
//     wrote the branch, so the ledger has no witness of it to read first)
//     and its ref (one GET), and each head commit its ref names — 1 LIST,
//     4 GETs;
//   - the merge base (graph.Graph.FindBases): the branch's fork point on
//     main, read once though it is both a candidate and the branch's fork
//     (the plan keeps the commits it reads) — 1 GET;
//   - the tables (graph.Graph.PlanMerge): the two heads' pins maps walked
//     side by side, reading only the chunks where they differ (each side's
//     root and its leaves holding the changed tables: 6 chunks), and the
//     base's pins root, for the base's version of each differing table —
//     7 GETs;
//   - for each of the 8 tables the merge adopts, its version at main and at
//     the branch, whose entries are diffed to count what the merge adds,
//     removes and replaces (MergeVersionGets each) — 16 GETs;
//   - HEAD the branch's head once it is pinned (a cleanup that finished
//     before the pin may have reclaimed it) — 1 HEAD;
//   - the branch's head as the merge commit's merged parent
//     (graph.Graph.PlanAppendOn): kept from the heads, no request;
//   - write: the merge commit's new pins chunks, put-if-absent — the leaf
//     holding the adopted tables, whose pins record what each adoption
//     changes from main's version, and a new root — 2 PUTs;
//   - the merge commit (PUT, put-if-absent) and the swap of main's ref to
//     it (PUT, If-Match of the ETag the plan read) — 2 PUTs.
//
// 28 GETs, 1 LIST, 1 HEAD, 4 PUTs. The history is never read: the base
// comes from the heads' lineages and forks.
const MergeSuccessPathRequests = 34

// MergeVersionGets is what each table a merge adopts adds to its requests:
// GETs of the table's version at the target and at the source (the
// versions here list their entries inline; a chunked version adds the
// chunks in which the two differ). A merge's cost grows with the tables it
// changes, never with the tables it leaves alone or with history.
const MergeVersionGets = 2

// MergeAdoptSuccessPathRequests is a merge into an unmoved main (adopted:
// main's head is the branch's fork point) of a branch changing 8 of 121
// tables: the heads (1 LIST, 4 GETs, as a three-way merge's); no base to read (main's head is the branch's fork, already read); the
// pins walk (each side's root and the leaf holding the changed tables: 4
// GETs); the 8 adopted tables' versions at main and at the branch (16
// GETs); HEAD the branch's head once pinned; the branch's head as the merged
// parent and as the commit whose pins the merge commit takes (kept from the
// heads, no request); the merge commit (PUT; it names the branch's pins map
// as it stands, so no chunk is written) and the swap of main's ref (PUT).
// 24 GETs, 1 LIST, 1 HEAD, 2 PUTs.
const MergeAdoptSuccessPathRequests = 28

// MergeEditsRequests is a three-way merge of the same shape whose branch
// changed its tables by edits (appends, removals: each a version written on
// the one the branch pinned), whatever the number changed: each pin records
// what its edit changed, so no version is read — the heads (1 LIST, 4 GETs),
// the base (1 GET), the pins walk (7 GETs), HEAD the branch's head; then the
// new pins root, the merge commit and the ref swap (3 PUTs). The leaf holding
// the adopted tables is the branch's own, byte for byte: pinned, not put.
// 12 GETs, 1 LIST, 1 HEAD, 3 PUTs.
const MergeEditsRequests = 17

// MergeAdoptEditsRequests is a merge into an unmoved main of a branch that
// edited 8 of 121 tables: MergeAdoptSuccessPathRequests without the 16
// version GETs. 8 GETs, 1 LIST, 1 HEAD, 2 PUTs.
const MergeAdoptEditsRequests = 12

// mergeRequests is a three-way merge's requests with changed tables
// adopted: t000… share the leaf of the pins map that t000–t007 are in up
// to at least 29 tables, so only the version reads grow.
func mergeRequests(changed int) int {
	return MergeSuccessPathRequests + MergeVersionGets*(changed-8)
}

// TestMerge_RequestsPerMerge_SameAcrossDepthAndChangedTables proves a merge
// costs the same requests, kind by kind, whatever the history depth on
// either side of the fork — the base comes from lineage and forks, not from
// walking history — and that changing more tables costs exactly
// MergeVersionGets more per table: no table the merge does not change is
// read, and no table data is read. Three-way merges at depth 0 and 64 with
// 1, 8 and 29 tables changed, then merges into an unmoved main.
func TestMerge_RequestsPerMerge_SameAcrossDepthAndChangedTables(t *testing.T) {
	st := newMergeStack(t)
	at := map[int]map[faults.Op]int{}
	for _, shape := range []struct{ depth, changed int }{{0, 1}, {0, 8}, {0, 29}, {64, 1}, {64, 8}, {64, 29}} {
		source := st.prepare(t, shape.depth, shape.changed)
		st.store.ResetCounts()
		st.mergeOnce(t, source, shape.changed)
		got := target{Store: st.store}.sent()
		if n := sum(got); n != mergeRequests(shape.changed) {
			t.Errorf("depth %d, %d changed: %d requests (%v), want %d", shape.depth, shape.changed, n, got, mergeRequests(shape.changed))
		}
		if shape.depth == 0 {
			at[shape.changed] = got
		} else if !maps.Equal(got, at[shape.changed]) {
			t.Errorf("%d changed: %v at depth 64, %v at depth 0", shape.changed, got, at[shape.changed])
		}
	}
	unmoved := func(what string, want int) {
		for range 2 {
			source := st.prepareUnmoved(t, 8)
			st.store.ResetCounts()
			if err := st.mergeEngine(source, workflows.OutcomeAdopted); err != nil {
				t.Fatal(err)
			}
			if n := totalRequests(st.store); n != want {
				t.Errorf("%s into an unmoved main: %d requests (%v), want %d", what, n, st.store.Counts(), want)
			}
		}
	}
	unmoved("whole versions", MergeAdoptSuccessPathRequests)

	// Tables changed by edits: each pin records its change, and the merge reads no version.
	st.edits = true
	for _, shape := range []struct{ depth, changed int }{{0, 1}, {0, 8}, {0, 29}, {64, 8}} {
		source := st.prepare(t, shape.depth, shape.changed)
		st.store.ResetCounts()
		st.mergeOnce(t, source, shape.changed)
		got := target{Store: st.store}.sent()
		if sum(got) != MergeEditsRequests {
			t.Errorf("edits, depth %d, %d changed: %d requests (%v), want %d", shape.depth, shape.changed, sum(got), got, MergeEditsRequests)
		}
	}
	unmoved("edits", MergeAdoptEditsRequests)
}

// TestMergePlan_ClaimDurableOnlyWhereTheMergeMayWait: planning a merge into an
// unprotected main flushes the ledger once — the write it records, which flushes
// the claim before it — while planning one into a protected main, which ends
// waiting for approval with nothing recorded after the claim, flushes the claim
// itself.
func TestMergePlan_ClaimDurableOnlyWhereTheMergeMayWait(t *testing.T) {
	st := newMergeStack(t)
	ctx := context.Background()
	plan := func(source string) (activities.PlanMergeResult, catalog.Stats) {
		t.Helper()
		op := ulid.Make().String()
		before := st.cat.Stats()
		p, err := st.acts.PlanMerge(ctx, activities.PlanMergeInput{OpID: op, Graph: st.graph, Source: source, Target: graph.DefaultBranch,
			WorkflowID: "raw-" + op, RunID: "raw-" + op})
		if err != nil || p.Outcome != "" {
			t.Fatalf("plan: %v %s %s", err, p.Outcome, p.Message)
		}
		return p, st.cat.Stats().Sub(before)
	}
	p, stats := plan(st.prepareUnmoved(t, 8))
	if !p.PendingRecorded || p.Gate != nil || stats.Flushes != 1 {
		t.Fatalf("into an unprotected main: recorded %v, gate %v, %d flushes; want the write recorded in the one flush", p.PendingRecorded, p.Gate, stats.Flushes)
	}
	if _, err := st.cat.BranchRuleSet(ctx, catalog.BranchRule{Graph: st.graph, Branch: graph.DefaultBranch, Approvals: 1, SetBy: "bench"}); err != nil {
		t.Fatal(err)
	}
	p, stats = plan(st.prepareUnmoved(t, 8))
	if p.PendingRecorded || p.Gate == nil || stats.Flushes != 1 {
		t.Fatalf("into a protected main: recorded %v, gate %v, %d flushes; want to wait, the claim flushed", p.PendingRecorded, p.Gate, stats.Flushes)
	}
}

// MergeWarmAdoptRequests and MergeWarmRequests bound what a merge of a branch
// that edited 8 of 121 tables costs on a long-lived main (merged into 65 times,
// its lineage chunked) when the worker keeps the pins and lineage chunks it has
// read or written (activities.Activities.Chunks) and wrote the branch itself:
// into an unmoved main, the refs and head commits (4 GETs, 1 LIST), the HEAD of
// the branch's head, the merge commit's new lineage chunks (one or two, by where
// the branch's tree id falls among main's lineage), the commit and the ref swap
// (3 or 4 PUTs); three-way, besides those, the merge base's commit and a new pins
// root (the pins leaf it shares with the branch is pinned, not put). No chunk is
// read from the store.
const (
	MergeWarmAdoptRequests = 10
	MergeWarmRequests      = 12
)

// TestMerge_OnAWarmWorker_ReadsNoChunkItHasSeen: a worker keeping the chunks it has
// read or written merges a branch it wrote into a long-lived main reading none of
// them again (without the cache they read main's lineage and pins chunks), and main's head
// then names only chunks the store holds.
func TestMerge_OnAWarmWorker_ReadsNoChunkItHasSeen(t *testing.T) {
	st := newMergeStack(t)
	st.edits = true
	st.acts.Chunks = graph.NewChunkCache(graph.DefaultChunkCacheBytes)
	st.built.g.ShareChunks(st.acts.Chunks) // the branches are written as the worker would write them
	for range mergesBefore {
		if err := st.mergeRawOp(st.prepareUnmoved(t, 8), workflows.OutcomeAdopted); err != nil {
			t.Fatal(err)
		}
	}
	for _, shape := range []struct {
		prepare func(testing.TB) string
		want    outcome.Outcome
		n       int
	}{
		{func(tb testing.TB) string { return st.prepareUnmoved(tb, 8) }, workflows.OutcomeAdopted, MergeWarmAdoptRequests},
		{func(tb testing.TB) string { return st.prepare(tb, 0, 8) }, workflows.OutcomeMerged, MergeWarmRequests},
	} {
		for i := range 2 { // the second of each: the first three-way merge reads a base not seen yet
			source := shape.prepare(t)
			st.store.ResetCounts()
			if err := st.mergeEngine(source, shape.want); err != nil {
				t.Fatal(err)
			}
			reads := st.store.CountMatching(faults.Rule{Op: faults.OpGet, KeyPrefix: format.ChunksPrefix(st.graph)}).Attempted
			if n := totalRequests(st.store); i == 1 && (n > shape.n || reads > 0) {
				t.Errorf("%s on a warm worker: %d requests (%v), %d of them chunk reads; want at most %d, and none",
					shape.want, n, st.store.Counts(), reads, shape.n)
			}
			// Whatever was not put, main's head has every chunk it names, read without the cache.
			fresh, err := graph.Open(st.store, st.graph)
			if err != nil {
				t.Fatal(err)
			}
			head, err := fresh.BranchHead(context.Background(), graph.DefaultBranch)
			if err == nil {
				err = fresh.EachPin(context.Background(), head.Commit, func(format.PinEntry) error { return nil })
			}
			if err == nil {
				err = fresh.EachLineage(context.Background(), head.Commit, func(format.LineageEntry) error { return nil })
			}
			if err != nil {
				t.Fatalf("main's head after a %s merge: %v", shape.want, err)
			}
		}
	}
}
