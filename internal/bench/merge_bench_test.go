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
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/faults"
	"github.com/graftworks/graft/workflows"
)

// mergeTables is the table count of the merge shapes (OmniGraph's merge
// campaign graph).
const mergeTables = 121

// mergeStack is createStack's graph (main with mergeTables tables) with a
// second version of every table, so each merge can change any table without
// writing data: a commit toggles a table between its two versions.
type mergeStack struct {
	*createStack
	inner storage.Store
	alt   map[ulid.ULID]ulid.ULID // version → the table's other version
	seq   int
}

func newMergeStack(tb testing.TB) *mergeStack {
	tb.Helper()
	return newMergeStackFrom(tb, newCreateStack(tb, 0, mergeTables))
}

// newMergeStackFrom is newMergeStack on a create stack of mergeTables tables.
func newMergeStackFrom(tb testing.TB, cs *createStack) *mergeStack {
	tb.Helper()
	st := &mergeStack{createStack: cs, alt: map[ulid.ULID]ulid.ULID{}}
	st.inner = st.store.Inner()
	head := st.head(tb, graph.DefaultBranch)
	now := time.Now().UTC().Truncate(time.Millisecond)
	for table, v := range head.Pins {
		w, err := graph.WriteTableVersion(context.Background(), st.inner, graph.WriteTableParams{Graph: st.graph, Table: table,
			VersionID: ulid.Make(), Objects: []graph.ObjectInput{{ID: ulid.Make(), Body: []byte("y")}}, Op: "write-alt", Time: now})
		if err != nil {
			tb.Fatal(err)
		}
		st.alt[v], st.alt[w.ID] = w.ID, v
	}
	return st
}

func (st *mergeStack) head(tb testing.TB, branch string) format.Commit {
	tb.Helper()
	b, err := graph.ResolveBranch(context.Background(), st.inner, st.graph, branch)
	if err != nil {
		tb.Fatal(err)
	}
	c, err := graph.ReadHead(context.Background(), st.inner, st.graph, b.Tree)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// appendCommits appends depth commits that change nothing, then one that
// toggles tables, to head's tree, straight to the store.
func (st *mergeStack) appendCommits(tb testing.TB, head format.Commit, depth int, tables []string) format.Commit {
	tb.Helper()
	now := time.Now().UTC().Truncate(time.Millisecond)
	for i := 0; i <= depth; i++ {
		pins := maps.Clone(head.Pins)
		if i == depth {
			for _, t := range tables {
				pins[t] = st.alt[pins[t]]
			}
		}
		var err error
		head, err = graph.AppendCommit(context.Background(), st.inner, graph.AppendParams{Graph: st.graph, Tree: head.ID.Tree,
			Branch: head.Branch, ExpectedHead: head.ID.String(), Pins: pins, Author: "bench", Message: "c", Time: now, Op: "bench"})
		if err != nil {
			tb.Fatal(err)
		}
	}
	return head
}

// prepare sets up one merge, untimed: a branch forked from main's head, with
// depth commits and then one changing `changed` tables; main gets depth
// commits and one changing a table the branch leaves alone, so the merge
// is a three-way merge, not an adoption. It returns the branch's name.
func (st *mergeStack) prepare(tb testing.TB, depth, changed int) string {
	tb.Helper()
	ctx := context.Background()
	st.seq++
	name := fmt.Sprintf("src%d", st.seq)
	mainHead := st.head(tb, graph.DefaultBranch)
	tree := ulid.Make()
	fork, err := graph.ForkCommit(ctx, st.inner, graph.ForkParams{Graph: st.graph, Tree: tree, Branch: name, Source: mainHead.ID.String(),
		Author: "bench", Message: "fork", Time: time.Now().UTC().Truncate(time.Millisecond), Op: "bench"})
	if err != nil {
		tb.Fatal(err)
	}
	ref, _ := format.EncodeBranchRef(format.BranchRef{State: format.RefLive, Branch: name, Native: format.NativeName(name, tree), Tree: tree, Op: "bench"})
	if _, err := st.inner.Put(ctx, format.BranchRefKey(st.graph, format.NativeName(name, tree)), ref, storage.PutOptions{IfNoneMatch: true}); err != nil {
		tb.Fatal(err)
	}
	var tables []string
	for i := range changed {
		tables = append(tables, fmt.Sprintf("t%03d", i))
	}
	st.appendCommits(tb, fork, depth, tables)
	st.appendCommits(tb, mainHead, depth, []string{fmt.Sprintf("t%03d", mergeTables-1)})
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
	if _, err := st.acts.Finish(ctx, activities.FinishInput{Owner: owner, Kind: catalog.OpMerge, Outcome: p.Kind}); err != nil {
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
// requests when nothing goes wrong: per branch (source and target) one LIST
// and one GET to resolve it and one LIST and one GET for its head; one GET
// of the merge base (found from the heads' lineages); one HEAD of the source
// head once it is pinned; one LIST and one GET of the target's real head just
// before the put — a commit is sent only while its tree's head is its parent,
// so a plan that stalled never lands in a gap cleanup left — and the merge
// commit's put-if-absent.
const MergeSuccessPathRequests = 13

// TestMerge_RequestsPerMerge_SameAcrossDepthAndChangedTables proves a merge
// costs the same requests whatever the history depth and however many
// tables changed: the base comes from lineage, not from walking history,
// and no table data is read.
func TestMerge_RequestsPerMerge_SameAcrossDepthAndChangedTables(t *testing.T) {
	st := newMergeStack(t)
	for _, shape := range []struct{ depth, changed int }{{0, 1}, {0, 29}, {64, 1}, {64, 29}} {
		source := st.prepare(t, shape.depth, shape.changed)
		st.store.ResetCounts()
		st.mergeOnce(t, source, shape.changed)
		if got := totalRequests(st.store); got != MergeSuccessPathRequests {
			t.Fatalf("depth %d, %d changed: %d requests (%v), want %d", shape.depth, shape.changed, got, st.store.Counts(), MergeSuccessPathRequests)
		}
	}
}
