package bench

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/storage/faults"
)

// BenchmarkHeadDiscovery measures finding a branch's head from its logical
// name in a format-1 graph (graph.ResolveBranch, then graph.ReadHead) at
// history depth 0, 64 and 1024. BenchmarkHeadDiscoveryV2 is format 2's.
func BenchmarkHeadDiscovery(b *testing.B) {
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			for _, depth := range benchDepths {
				b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) {
					ctx := context.Background()
					st := be.target(b)
					buildGraph(b, st, depth)
					st.reset()
					var lat Latencies
					for b.Loop() {
						start := time.Now()
						head, err := discoverHead(ctx, st)
						lat.Add(time.Since(start))
						if err != nil {
							b.Fatalf("discover head: %v", err)
						}
						checkHead(b, head, depth)
					}
					report(b, st, &lat)
				})
			}
		})
	}
}

// BenchmarkReadHead measures reading the head of a known tree in a format-1
// graph (graph.ReadHead alone) at history depth 0, 64 and 1024: the part of
// head discovery whose LIST sees the tree's whole history.
// BenchmarkReadHeadV2 is format 2's, which lists nothing.
func BenchmarkReadHead(b *testing.B) {
	for _, be := range backends {
		b.Run(be.name, func(b *testing.B) {
			for _, depth := range benchDepths {
				b.Run(fmt.Sprintf("depth=%d", depth), func(b *testing.B) {
					ctx := context.Background()
					st := be.target(b)
					tree := buildGraph(b, st, depth)
					st.reset()
					var lat Latencies
					for b.Loop() {
						start := time.Now()
						head, err := graph.ReadHead(ctx, st, benchGraph, tree)
						lat.Add(time.Since(start))
						if err != nil {
							b.Fatalf("read head: %v", err)
						}
						checkHead(b, head, depth)
					}
					report(b, st, &lat)
				})
			}
		})
	}
}

// TestHeadDiscovery_SameRequestsAtDepth0And64 is the guarantee behind the
// head-discovery figures: on every backend, finding main's head costs exactly
// the documented requests, the same at depth 0 and at depth 64.
func TestHeadDiscovery_SameRequestsAtDepth0And64(t *testing.T) {
	wantDiscover := map[faults.Op]int{faults.OpList: HeadDiscoveryLists, faults.OpGet: HeadDiscoveryGets}
	wantReadHead := map[faults.Op]int{faults.OpList: ReadHeadLists, faults.OpGet: ReadHeadGets}
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			ctx := context.Background()
			discover := map[int]map[faults.Op]int{}
			for _, depth := range historyDepths {
				st := be.target(t)
				tree := buildGraph(t, st, depth)

				st.reset()
				head, err := discoverHead(ctx, st)
				if err != nil {
					t.Fatalf("depth %d: discover head: %v", depth, err)
				}
				checkHead(t, head, depth)
				discover[depth] = st.sent()
				if got := discover[depth]; !maps.Equal(got, wantDiscover) {
					t.Errorf("depth %d: head discovery sent %v, want %v", depth, got, wantDiscover)
				}
				st.requireOneHTTPRequestEach(t)

				st.reset()
				head, err = graph.ReadHead(ctx, st, benchGraph, tree)
				if err != nil {
					t.Fatalf("depth %d: read head: %v", depth, err)
				}
				checkHead(t, head, depth)
				if got := st.sent(); !maps.Equal(got, wantReadHead) {
					t.Errorf("depth %d: read head sent %v, want %v", depth, got, wantReadHead)
				}
				st.requireOneHTTPRequestEach(t)
			}
			if !maps.Equal(discover[0], discover[64]) {
				t.Errorf("head discovery sent %v at depth 0 but %v at depth 64", discover[0], discover[64])
			}
		})
	}
}
