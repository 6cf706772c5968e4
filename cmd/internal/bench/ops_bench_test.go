package bench

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/workflows"
)

// names is a pool of live branch names for deletes, filled untimed.
type names struct {
	mu   sync.Mutex
	list []string
}

func (p *names) push(n string) {
	p.mu.Lock()
	p.list = append(p.list, n)
	p.mu.Unlock()
}

func (p *names) pop() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.list[len(p.list)-1]
	p.list = p.list[:len(p.list)-1]
	return n
}

// createNamed creates a branch by the raw steps and adds it to pool.
func (st *createStack) createNamed(pool *names) func(context.Context) error {
	return func(ctx context.Context) error {
		name := st.nextBranch()
		if err := st.createRawNamed(ctx, name); err != nil {
			return err
		}
		pool.push(name)
		return nil
	}
}

// deleteEngine deletes a branch of pool through Temporal.
func (st *createStack) deleteEngine(pool *names) func(context.Context) error {
	return func(ctx context.Context) error {
		res, err := st.gc.DeleteBranch(ctx, client.DeleteBranchRequest{Graph: st.graph, Branch: pool.pop()})
		if err == nil && res.Outcome != workflows.OutcomeDeleted {
			err = fmt.Errorf("outcome %s", res.Outcome)
		}
		return err
	}
}

// deleteRaw runs a delete's steps (prepare, retire the ref, finish) by
// direct calls, without Temporal.
func (st *createStack) deleteRaw(pool *names) func(context.Context) error {
	return func(ctx context.Context) error {
		name := pool.pop()
		op := ulid.Make().String()
		owner := activities.Owner{OpID: op, Run: "raw-" + op}
		prep, err := st.acts.PrepareDeleteBranch(ctx, activities.PrepareDeleteBranchInput{OpID: op, Graph: st.graph, Branch: name,
			WorkflowID: "raw-" + op, RunID: owner.Run})
		if err != nil || prep.Outcome != "" || prep.Retired {
			return fmt.Errorf("prepare delete: %v %s %s", err, prep.Outcome, prep.Message)
		}
		v, err := st.acts.Write(ctx, activities.WriteInput{Owner: owner, Spec: prep.Spec})
		if err != nil || v.State != activities.Landed {
			return fmt.Errorf("retire ref: %v %s", err, v.State)
		}
		_, err = st.acts.Finish(ctx, activities.FinishInput{Owner: owner, Kind: catalog.OpDeleteBranch, Graph: st.graph, Branch: name,
			Outcome: workflows.OutcomeDeleted})
		return err
	}
}

// BenchmarkDeleteBranch measures branch deletes through the engine
// (client.DeleteBranch), the same steps called directly, and the Temporal
// floor, interleaved in one run, at concurrency 1 and 8, in a graph of 4
// tables. Every deleted branch was created untimed by the raw create steps.
func BenchmarkDeleteBranch(b *testing.B) {
	for _, c := range []int{1, 8} {
		b.Run(fmt.Sprintf("tables=4/c=%d", c), func(b *testing.B) {
			st := newCreateStack(b, 0, 4)
			n := rowOps(b, c)
			engPool, rawPool := &names{}, &names{}
			measure(b, n+2*c, 8, st.createNamed(engPool))
			measure(b, n+2*c, 8, st.createNamed(rawPool))
			measure(b, 2*c, c, st.deleteEngine(engPool))
			measure(b, 2*c, c, st.deleteRaw(rawPool))
			measure(b, 2*c, c, st.floor)
			b.ResetTimer()
			eng := &path{name: "engine", op: st.deleteEngine(engPool)}
			raw := &path{name: "raw", op: st.deleteRaw(rawPool)}
			floor := &path{name: "floor", op: st.floor}
			interleave(b, st.store, st.cat, n, c, 2, raw, floor, eng)
			b.StopTimer()
			reportPaths(b, "delete", eng, raw, floor)
		})
	}
	runtime.GC()
}

// prepareUnmoved sets up a merge into an unmoved main, untimed: a branch
// forked from main's head with one commit changing `changed` tables, main
// left alone, so the merge adopts the branch's head. It returns the
// branch's name.
func (st *mergeStack) prepareUnmoved(tb testing.TB, changed int) string {
	tb.Helper()
	st.seq++
	name := fmt.Sprintf("src%d", st.seq)
	st.built.fork(tb, name, graph.DefaultBranch)
	st.appendCommits(tb, name, 0, changedTables(changed))
	return name
}

// mergeShape is one kind of merge into main: how to set it up and the
// outcome it must end with.
type mergeShape struct {
	name    string
	prepare func(tb testing.TB) string
	want    outcome.Outcome
}

// mergeEngine merges source into main through the engine.
func (st *mergeStack) mergeEngine(source string, want outcome.Outcome) error {
	res, err := st.gc.Merge(context.Background(), client.MergeRequest{Graph: st.graph, Source: source, Target: graph.DefaultBranch})
	if err == nil && res.Outcome != want {
		err = fmt.Errorf("merge %s: outcome %s, want %s", source, res.Outcome, want)
	}
	return err
}

// mergeRawOp runs a merge's steps (plan, put, finish) by direct calls.
func (st *mergeStack) mergeRawOp(source string, want outcome.Outcome) error {
	ctx := context.Background()
	op := ulid.Make().String()
	owner := activities.Owner{OpID: op, Run: "raw-" + op}
	p, err := st.acts.PlanMerge(ctx, activities.PlanMergeInput{OpID: op, Graph: st.graph, Source: source, Target: graph.DefaultBranch,
		WorkflowID: "raw-" + op, RunID: owner.Run})
	if err != nil || p.Outcome != "" || p.Kind != want {
		return fmt.Errorf("plan: %v %s %s (kind %s, want %s)", err, p.Outcome, p.Message, p.Kind, want)
	}
	r, err := st.acts.Write(ctx, activities.WriteInput{Owner: owner, Spec: p.Spec})
	if err != nil || r.State != activities.Landed {
		return fmt.Errorf("put: %v %s", err, r.State)
	}
	_, err = st.acts.Finish(ctx, activities.FinishInput{Owner: owner, Kind: catalog.OpMerge, Outcome: p.Kind, Graph: st.graph, Branch: graph.DefaultBranch})
	return err
}

// BenchmarkMergeInto measures merges of a branch into main — one into an
// unmoved main (adopted) and one three-way (merged, main moved by one
// commit) — through the engine, by the same steps called directly, and the
// Temporal floor, taking turns one merge each (timedSerial), one at a time, in a
// graph of 121 tables with 8 changed on the branch, with main's
// history 0, 64 and 10,000 commits deep (the targets ask for the time at
// depth 64 and 10,000 within 1.2 × depth 0's), the branch writing whole
// versions of its tables; and at depth 0 the branch editing them, each pin
// recording its change (whole and edited). The worker keeps the chunks it
// reads and writes, as graft-worker does. Each merge's branch — forked
// from main's head, one commit — is built untimed just before it. Before
// measuring, a row merges mergesBefore branches of its kind, untimed.
func BenchmarkMergeInto(b *testing.B) {
	type row struct {
		kind  string
		edits bool // the branch edits its tables (edited) instead of writing whole versions (whole)
		depth int
	}
	var rows []row
	for _, kind := range []string{"unmoved-main", "three-way"} {
		for _, depth := range []int{0, 64, deepHistory} {
			rows = append(rows, row{kind, false, depth})
		}
		rows = append(rows, row{kind, true, 0})
	}
	for _, r := range rows {
		kind, depth, tables := r.kind, r.depth, map[bool]string{false: "whole", true: "edited"}[r.edits]
		b.Run(fmt.Sprintf("%s/%s/depth=%d/tables=%d/changed=8", kind, tables, depth, mergeTables), func(b *testing.B) {
			st := newMergeStackFrom(b, newCreateStack(b, depth, mergeTables))
			st.edits = r.edits
			// As graft-worker runs: keeping the pins and lineage chunks it reads and
			// writes. The branches are written by the harness, as by another worker.
			st.acts.Chunks = graph.NewChunkCache(graph.DefaultChunkCacheBytes)
			shape := mergeShape{name: kind, want: workflows.OutcomeAdopted, prepare: func(tb testing.TB) string { return st.prepareUnmoved(tb, 8) }}
			if kind == "three-way" {
				shape = mergeShape{name: kind, want: workflows.OutcomeMerged, prepare: func(tb testing.TB) string { return st.prepare(tb, 0, 8) }}
			}
			eng := &path{name: "engine", op: func(context.Context) error { return st.mergeEngine(shape.prepare(b), shape.want) }}
			raw := &path{name: "raw", op: func(context.Context) error { return st.mergeRawOp(shape.prepare(b), shape.want) }}
			floor := &path{name: "floor", op: st.floor}
			for range mergesBefore {
				if err := st.mergeRawOp(shape.prepare(b), shape.want); err != nil {
					b.Fatal(err)
				}
			}
			for _, p := range []*path{eng, raw, floor} { // warm up
				if err := p.op(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
			n := max(b.N, 100)
			b.ResetTimer()
			timedSerial(b, st, n, shape, eng, raw, floor)
			b.StopTimer()
			reportPaths(b, "merge", eng, raw, floor)
		})
	}
	runtime.GC()
}

// mergesBefore is how many branches a BenchmarkMergeInto row merges into
// main, untimed, before it measures. Each merge adds its branch's tree to
// main's lineage, which is inline up to format.MapInlineMaxEntries (64)
// entries and a chunked map after; a merge reads and writes lineage chunks
// once it is chunked (measured: 40 requests for a three-way merge of 8 of
// 121 tables before, 43–47 after, and 33 against 36–40 for one into an
// unmoved main, depending on where the chunk boundaries fall among the
// trees' random ids). Merging this many first puts every measured merge,
// of every path, past the switch, where a long-lived main is — otherwise
// the paths measured later in a pass would pay for lineage chunks that
// earlier ones did not.
const mergesBefore = format.MapInlineMaxEntries + 1

// timedSerial runs n merges of each path one at a time, the paths taking
// turns one merge each (as interleave does at one client), building each
// merge's branch untimed first, and counts what only the merge sends.
// It reports no CPU: sampling /proc around every merge would cost more CPU
// than the merge.
func timedSerial(b *testing.B, st *mergeStack, n int, shape mergeShape, eng, raw, floor *path) {
	b.Helper()
	ops := map[*path]func(string) error{
		eng: func(s string) error { return st.mergeEngine(s, shape.want) },
		raw: func(s string) error { return st.mergeRawOp(s, shape.want) },
	}
	for range n {
		for _, p := range []*path{raw, floor, eng} {
			source := ""
			if p != floor {
				source = shape.prepare(b)
			}
			st.store.ResetCounts()
			before := st.cat.Stats()
			start := time.Now()
			var err error
			if p == floor {
				err = st.floor(context.Background())
			} else {
				err = ops[p](source)
			}
			d := time.Since(start)
			if err != nil {
				b.Fatal(err)
			}
			p.lat = append(p.lat, d)
			p.wall += d
			p.requests += totalRequests(st.store)
			p.ledger = addStats(p.ledger, st.cat.Stats().Sub(before))
		}
	}
}
