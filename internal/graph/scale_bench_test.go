package graph

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage/faults"
	"github.com/graftworks/graft/storage/memstore"
)

// Scale benchmarks beside bench_test.go's (benchmark tier only:
// go test -run '^$' -bench 'Tables|Merges' -benchtime 1x ./internal/graph),
// and the mark-cost flatness test that runs in the suite.
//
//	GRAFT_BENCH_TABLES tables of the big graph (default 10,000)
//	GRAFT_BENCH_MERGES merges into one main (default 10,000)

// The cleanup mark of a version appended to one already marked reads only
// the chunks the append rewrote: appending 100 entries to a table of 10,000
// or of 100,000 costs the mark the same reads ± the extra tree level, and the
// marker's memory holds chunks, not entries.
func TestMarkCost_FlatAt10kAnd100k(t *testing.T) {
	type cost struct{ base, appended, chunks int }
	measure := func(n int) cost {
		ctx := context.Background()
		s := faults.Wrap(memstore.New())
		g, _ := mustInitGraph(t, s)
		put := make([]format.ManifestEntry, n)
		for i := range put {
			put[i] = objEntry(i)
		}
		if _, err := g.PutVersion(ctx, VersionSpec{Table: "events", VersionID: vid(1), Put: put, Time: t0, Op: "op-v1"}); err != nil {
			t.Fatal(err)
		}
		var more []format.ManifestEntry
		for i := n; i < n+100; i++ {
			more = append(more, objEntry(i))
		}
		if _, err := g.PutVersion(ctx, VersionSpec{Table: "events", VersionID: vid(2), Base: vid(1), Put: more, Time: t0, Op: "op-v2"}); err != nil {
			t.Fatal(err)
		}
		g2, _ := Open(s, "sales") // cold cache
		objects := 0
		chunks := 0
		m := g2.NewMarker(func(mk Mark) error {
			switch mk.Kind {
			case MarkObject:
				objects++
			case MarkManifestChunk:
				chunks++
			}
			return nil
		})
		if err := m.Version(ctx, "events", vid(1)); err != nil {
			t.Fatal(err)
		}
		base := m.Reads
		s.ResetCounts()
		if err := m.Version(ctx, "events", vid(2)); err != nil {
			t.Fatal(err)
		}
		if gets := s.Count(faults.OpGet).Attempted; gets != m.Reads-base {
			t.Fatalf("marker reads %d, store GETs %d", m.Reads-base, gets)
		}
		if objects < n+100 {
			t.Fatalf("marked %d objects of %d", objects, n+100)
		}
		return cost{base: base, appended: m.Reads - base, chunks: chunks}
	}
	small, large := measure(10000), measure(100000)
	t.Logf("mark: 10k entries %+v; 100k entries %+v", small, large)
	if d := large.appended - small.appended; d < -1 || d > 1 {
		t.Fatalf("marking the appended version reads %d at 10k, %d at 100k; want equal ± 1", small.appended, large.appended)
	}
	if small.appended > 6 {
		t.Fatalf("marking an append of 100 read %d objects", small.appended)
	}
	if large.chunks > large.base+large.appended || large.chunks > 100000/64 {
		t.Fatalf("the marker visited %d chunks for 100k entries", large.chunks)
	}
}

// benchHead is the head of branch, failing the benchmark on an error.
func benchHead(b *testing.B, g *Graph, branch string) Head {
	b.Helper()
	h, err := g.BranchHead(context.Background(), branch)
	if err != nil {
		b.Fatalf("head of %s: %v", branch, err)
	}
	return h
}

// BenchmarkTablesCreateMerge: a graph of 4 and of GRAFT_BENCH_TABLES tables
// (default 10,000): create a branch, append on both sides, merge — the create
// and merge request counts, bytes and time.
func BenchmarkTablesCreateMerge(b *testing.B) {
	big := int(envInt("GRAFT_BENCH_TABLES", 10000))
	for _, be := range benchBackends() {
		b.Run(be.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				fmt.Printf("\n%s, create and merge\n| %-28s | %9s | %13s | %10s | %13s |\n", be.name, "step", "requests", "bytes written", "ms", "peak RSS MiB")
				for _, tables := range []int{4, big} {
					benchTables(b, be, tables)
				}
			}
		})
	}
}

func benchTables(b *testing.B, be backend, tables int) {
	ctx := context.Background()
	m := &meter{Store: be.open(b)}
	if _, err := Init(ctx, m, initParams()); err != nil {
		b.Fatal(err)
	}
	g, _ := Open(m, "sales")
	for _, n := range []int{1, 2, 3} {
		for _, table := range []string{"table_00001", "table_00002"} {
			if _, err := g.PutVersion(ctx, VersionSpec{Table: table, VersionID: vid(n), Put: []format.ManifestEntry{objEntry(n)}, Time: t0, Op: "op-v"}); err != nil {
				b.Fatal(err)
			}
		}
	}
	pins := map[string]ulid.ULID{}
	for i := 0; i < tables; i++ {
		pins[fmt.Sprintf("table_%05d", i)] = vid(1)
	}
	if _, err := g.Append(ctx, spec("main", 1, pins)); err != nil {
		b.Fatal(err)
	}
	src := benchHead(b, g, "main").Commit
	g, _ = Open(m, "sales")
	step(b, m, fmt.Sprintf("create (%d tables)", tables), func() error {
		_, err := g.CreateBranch(ctx, ForkSpec{Branch: "feature", Tree: treeFeature, Source: src.ID.String(), Author: "a", Message: "f", Time: t0, Op: "op-f"})
		return err
	})
	if _, err := g.Append(ctx, spec("feature", 2, map[string]ulid.ULID{"table_00001": vid(2)})); err != nil {
		b.Fatal(err)
	}
	if _, err := g.Append(ctx, spec("main", 3, map[string]ulid.ULID{"table_00002": vid(3)})); err != nil {
		b.Fatal(err)
	}
	g, _ = Open(m, "sales")
	step(b, m, fmt.Sprintf("merge (%d tables)", tables), func() error {
		res, err := g.Merge(ctx, "feature", "main", MergeSpec{Time: t0, Op: "op-m"}, "a", "merge")
		if err == nil && (res.Plan.Conflicts != 0 || res.Plan.Unchanged != int64(tables-2)) {
			err = fmt.Errorf("merge plan %+v", res.Plan)
		}
		return err
	})
}

// BenchmarkMergesIntoMain: GRAFT_BENCH_MERGES (default 10,000) branches, each
// forked from main's head, written once and merged back: the requests, bytes
// and time of the 10th, 100th, 1,000th and last merge (and of its create).
func BenchmarkMergesIntoMain(b *testing.B) {
	merges := int(envInt("GRAFT_BENCH_MERGES", 10000))
	for _, be := range benchBackends()[:2] { // memstore and localfs: 30,000 operations
		b.Run(be.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				benchMerges(b, be, merges)
			}
		})
	}
}

func benchMerges(b *testing.B, be backend, merges int) {
	ctx := context.Background()
	m := &meter{Store: be.open(b)}
	if _, err := Init(ctx, m, initParams()); err != nil {
		b.Fatal(err)
	}
	g, _ := Open(m, "sales")
	fmt.Printf("\n%s, %d merges into main\n| %-28s | %9s | %13s | %10s | %13s |\n", be.name, merges, "step", "requests", "bytes written", "ms", "peak RSS MiB")
	measured := map[int]bool{10: true, 100: true, 1000: true, merges: true}
	started := time.Now()
	for i := 1; i <= merges; i++ {
		branch := fmt.Sprintf("b%05d", i)
		at := t0.Add(time.Duration(i) * time.Second)
		if _, err := g.PutVersion(ctx, VersionSpec{Table: "t", VersionID: vid(10 + i), Put: []format.ManifestEntry{objEntry(i)}, Time: at, Op: "op-v-" + branch}); err != nil {
			b.Fatal(err)
		}
		create := func() error {
			h, err := g.BranchHead(ctx, "main")
			if err != nil {
				return err
			}
			_, err = g.CreateBranch(ctx, ForkSpec{Branch: branch, Tree: treeN(i), Source: h.Commit.ID.String(), Author: "a", Message: "f", Time: at, Op: "op-f-" + branch})
			return err
		}
		merge := func() error {
			res, err := g.Merge(ctx, branch, "main", MergeSpec{Time: at, Op: "op-m-" + branch}, "a", "merge "+branch)
			if err == nil && (res.Plan.Conflicts != 0 || res.Append.Publish.Outcome != Published) {
				err = fmt.Errorf("merge %d: %+v", i, res.Plan)
			}
			return err
		}
		if measured[i] {
			g, _ = Open(m, "sales") // cold caches for the measured steps
			step(b, m, fmt.Sprintf("create #%d", i), create)
		} else if err := create(); err != nil {
			b.Fatal(err)
		}
		if _, err := g.Append(ctx, CommitSpec{Branch: branch, SetPins: map[string]ulid.ULID{"t": vid(10 + i)}, Author: "a", Message: "w", Time: at, Op: "op-w-" + branch}); err != nil {
			b.Fatal(err)
		}
		if measured[i] {
			g, _ = Open(m, "sales")
			step(b, m, fmt.Sprintf("merge #%d", i), merge)
		} else if err := merge(); err != nil {
			b.Fatal(err)
		}
	}
	fmt.Printf("  (%d creates, writes and merges in %s)\n", merges, time.Since(started).Round(time.Millisecond))
}
