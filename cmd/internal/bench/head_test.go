package bench

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/faults"
	"github.com/graftworks/graft/storage/memstore"
)

// Head reads (docs/format.md, "Read costs"): a live ref names its tree's
// head, so reading a branch's head never lists its tree.

// Request counts of finding a branch's head; the tests assert them at depth
// 0, 64 and 10,000.
const (
	// ReadHeadGets is the cost of reading the head of a known incarnation
	// (graph.Graph.RefHead): one GET of its ref and one GET of the commit
	// the ref names. No LIST.
	ReadHeadGets = 2
	// HeadDiscoveryLists and HeadDiscoveryGets are the cost of finding
	// it from the logical name (graph.Graph.BranchHead) for a branch with
	// one incarnation: ResolveBranch lists the name's refs (one LIST) and
	// GETs the one ref, then one GET of the commit the ref names.
	HeadDiscoveryLists, HeadDiscoveryGets = 1, 2
)

// headDepths are the history depths the head reads are
// benchmarked at: the targets ask for the same requests, and a time within
// 1.2 ×, at depth 64 and 10,000 as at depth 0.
var headDepths = []int{0, 64, deepHistory}

// buildHeadGraph builds benchGraph on s (3 tables, committed
// to main, then depth commits) and returns main's native name and head.
func buildHeadGraph(tb testing.TB, s storage.Store, depth int) (string, format.CommitID) {
	tb.Helper()
	h := buildGraph(tb, s, benchGraph, depth, 3).head(tb, graph.DefaultBranch)
	if h.Commit.ID.Seq != int64(depth+1) {
		tb.Fatalf("main's head %s, want seq %d", h.Commit.ID, depth+1)
	}
	return h.Native, h.Commit.ID
}

// BenchmarkReadHead measures reading main's head from its known
// incarnation (graph.Graph.RefHead: GET the ref, GET the commit
// it names) at history depth 0, 64 and 10,000, on both backends.
func BenchmarkReadHead(b *testing.B) {
	benchHead(b, func(ctx context.Context, g *graph.Graph, native string) (format.CommitID, error) {
		_, c, err := g.RefHead(ctx, native)
		return c.ID, err
	})
}

// BenchmarkHeadDiscovery measures finding main's head from its name
// (graph.Graph.BranchHead: LIST the name's refs, GET the ref, GET
// the commit it names) at history depth 0, 64 and 10,000, on both backends.
func BenchmarkHeadDiscovery(b *testing.B) {
	benchHead(b, func(ctx context.Context, g *graph.Graph, _ string) (format.CommitID, error) {
		h, err := g.BranchHead(ctx, graph.DefaultBranch)
		return h.Commit.ID, err
	})
}

func benchHead(b *testing.B, read func(ctx context.Context, g *graph.Graph, native string) (format.CommitID, error)) {
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			for _, depth := range headDepths {
				b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) {
					ctx := context.Background()
					st := be.target(b)
					native, want := buildHeadGraph(b, st, depth)
					g, err := graph.Open(st, benchGraph)
					if err != nil {
						b.Fatal(err)
					}
					st.reset()
					var lat Latencies
					for b.Loop() {
						start := time.Now()
						head, err := read(ctx, g, native)
						lat.Add(time.Since(start))
						if err != nil {
							b.Fatalf("read head: %v", err)
						}
						if head != want {
							b.Fatalf("head = %s, want %s", head, want)
						}
					}
					report(b, st, &lat)
				})
			}
		})
	}
}

// TestHeadRead_SameRequestsAtEveryDepth is the guarantee behind the
// head-read figures: on every backend, at depth 0 and 64, and on
// the in-memory store at depth 10,000 too, reading main's head costs exactly
// ReadHeadGets GETs from its known incarnation and HeadDiscoveryLists
// LIST and HeadDiscoveryGets GETs from its name — the same at every
// depth, and on versitygw one HTTP request per store call.
func TestHeadRead_SameRequestsAtEveryDepth(t *testing.T) {
	wantRead := map[faults.Op]int{faults.OpGet: ReadHeadGets}
	wantFind := map[faults.Op]int{faults.OpList: HeadDiscoveryLists, faults.OpGet: HeadDiscoveryGets}
	mem := backend{"memstore", func(testing.TB) (storage.Store, *wireCounter) { return memstore.New(), nil }}
	for _, be := range append(backends[:len(backends):len(backends)], mem) {
		t.Run(be.name, func(t *testing.T) {
			ctx := context.Background()
			depths := historyDepths
			if be.name == mem.name {
				depths = headDepths
			}
			for _, depth := range depths {
				st := be.target(t)
				native, want := buildHeadGraph(t, st, depth)
				g, err := graph.Open(st, benchGraph)
				if err != nil {
					t.Fatal(err)
				}

				st.reset()
				_, head, err := g.RefHead(ctx, native)
				if err != nil || head.ID != want {
					t.Fatalf("depth %d: read head: %s, %v; want %s", depth, head.ID, err, want)
				}
				if got := st.sent(); !maps.Equal(got, wantRead) {
					t.Errorf("depth %d: read head sent %v, want %v", depth, got, wantRead)
				}
				st.requireOneHTTPRequestEach(t)

				st.reset()
				found, err := g.BranchHead(ctx, graph.DefaultBranch)
				if err != nil || found.Commit.ID != want {
					t.Fatalf("depth %d: find head: %s, %v; want %s", depth, found.Commit.ID, err, want)
				}
				if got := st.sent(); !maps.Equal(got, wantFind) {
					t.Errorf("depth %d: find head sent %v, want %v", depth, got, wantFind)
				}
				st.requireOneHTTPRequestEach(t)
			}
		})
	}
}
