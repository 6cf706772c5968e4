package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	sdkclient "go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog/catalogtest"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/internal/testenv"
	"github.com/graftworks/graft/storage/faults"
	"github.com/graftworks/graft/storage/localfs"
	"github.com/graftworks/graft/worker"
)

// createStack is graft's local stack for branch creates: the embedded
// default store (local directory) counted by faults.Wrap, a ledger schema,
// the Temporal dev server, and a worker in this process sharing the client,
// so eager workflow start applies.
type createStack struct {
	store *faults.Store
	acts  *activities.Activities
	gc    *client.Client
	graph string
	seq   atomic.Int64
}

var stackSeq atomic.Int64

// newCreateStack builds a graph whose main has `tables` tables and `depth`
// commits after the table writes.
func newCreateStack(tb testing.TB, depth, tables int) *createStack {
	tb.Helper()
	ctx := context.Background()
	inner, err := localfs.Open(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	st := &createStack{store: faults.Wrap(inner), graph: fmt.Sprintf("cb%d-%d", time.Now().UnixNano()%1e9, stackSeq.Add(1))}
	st.acts = &activities.Activities{Store: st.store, Catalog: catalogtest.Open(tb)}

	now := time.Now().UTC().Truncate(time.Millisecond)
	init, err := graph.InitGraph(ctx, inner, graph.InitParams{Graph: st.graph, MainTree: ulid.Make(), Op: "init", Time: now})
	if err != nil {
		tb.Fatal(err)
	}
	pins := map[string]ulid.ULID{}
	for i := 0; i < tables; i++ {
		v, err := graph.WriteTableVersion(ctx, inner, graph.WriteTableParams{Graph: st.graph, Table: fmt.Sprintf("t%03d", i),
			VersionID: ulid.Make(), Objects: []graph.ObjectInput{{ID: ulid.Make(), Body: []byte("x")}}, Op: "write", Time: now})
		if err != nil {
			tb.Fatal(err)
		}
		pins[v.Table] = v.ID
	}
	head := init.Root
	for i := 0; i <= depth; i++ { // the table commit, then depth more
		head, err = graph.AppendCommit(ctx, inner, graph.AppendParams{Graph: st.graph, Tree: head.ID.Tree, Branch: "main",
			ExpectedHead: head.ID.String(), Pins: pins, Author: "bench", Message: "c", Time: now, Op: fmt.Sprintf("c%d", i)})
		if err != nil {
			tb.Fatal(err)
		}
	}

	ts := testenv.Temporal(tb)
	tc, err := sdkclient.Dial(sdkclient.Options{HostPort: ts.HostPort, Namespace: ts.Namespace, Logger: quietSDKLogger()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(tc.Close)
	queue := "bench-" + st.graph
	w := sdkworker.New(tc, queue, sdkworker.Options{})
	worker.Register(w, st.acts)
	if err := w.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(w.Stop)
	st.gc = client.New(tc, client.Options{TaskQueue: queue, EagerStart: true, PollInterval: 5 * time.Second})
	return st
}

func (st *createStack) nextBranch() string { return fmt.Sprintf("bn%d", st.seq.Add(1)) }

// createEngine creates one branch through Temporal.
func (st *createStack) createEngine(ctx context.Context) error {
	res, err := st.gc.CreateBranch(ctx, client.CreateBranchRequest{Graph: st.graph, Branch: st.nextBranch()})
	if err == nil && res.Outcome != outcome.Created {
		err = fmt.Errorf("outcome %s", res.Outcome)
	}
	return err
}

// createRaw runs the same steps (prepare, clone, publish, finish) by direct
// calls, without Temporal.
func (st *createStack) createRaw(ctx context.Context) error {
	op := ulid.Make().String()
	owner := activities.Owner{OpID: op, Run: "raw-" + op}
	prep, err := st.acts.PrepareCreate(ctx, activities.PrepareCreateInput{OpID: op, Graph: st.graph, Branch: st.nextBranch(),
		Time: time.Now().UTC(), Attempt: 1, WorkflowID: "raw-" + op, RunID: owner.Run})
	if err != nil || prep.Outcome != "" {
		return fmt.Errorf("prepare: %v %s %s", err, prep.Outcome, prep.Message)
	}
	clone, err := st.acts.CloneTree(ctx, activities.CloneInput{Owner: owner, Graph: st.graph, Native: prep.Native, ForkID: prep.ForkID, ForkBytes: prep.ForkBytes})
	if err != nil || clone.State != activities.CloneCommitted {
		return fmt.Errorf("clone: %v %s", err, clone.State)
	}
	put, err := st.acts.Write(ctx, activities.WriteInput{Owner: owner,
		Spec: activities.WriteSpec{Kind: activities.WriteRef, Graph: st.graph, Body: prep.RefBytes, Landed: outcome.Created}})
	if err != nil || put.State != activities.Landed {
		return fmt.Errorf("put ref: %v %s", err, put.State)
	}
	_, err = st.acts.Finish(ctx, activities.FinishInput{Owner: owner, Kind: "create_branch", Graph: st.graph, Native: prep.Native, Outcome: outcome.Created, Recorded: put.Recorded})
	return err
}

// measure runs n creates over c goroutines and returns sorted latencies and the wall time.
func measure(tb testing.TB, n, c int, create func(context.Context) error) ([]time.Duration, time.Duration) {
	tb.Helper()
	ctx := context.Background()
	lat := make([]time.Duration, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Value
	start := time.Now()
	for g := 0; g < c; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				t := time.Now()
				if err := create(ctx); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				lat[i] = time.Since(t)
			}
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	if err, _ := firstErr.Load().(error); err != nil {
		tb.Fatalf("create: %v", err)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return lat, wall
}

func pct(sorted []time.Duration, p float64) float64 {
	i := int(p*float64(len(sorted)) + 0.5)
	if i >= len(sorted) {
		i = len(sorted) - 1
	}
	return float64(sorted[i].Microseconds()) / 1000
}

func peakRSSMiB() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Maxrss) / 1024 // Linux reports KiB
}

// BenchmarkCreateBranch measures creates through the engine and the same
// steps called directly, in one run, at concurrency 1 and 8, for history
// depth 0 and 64 and 4 and 121 tables. It reports p50/p99 latency (ms),
// creates per second, object-store requests per create, the engine/raw p50
// ratio, and the process's peak RSS (worker, client and harness together).
func BenchmarkCreateBranch(b *testing.B) {
	for _, shape := range []struct{ depth, tables int }{{0, 4}, {64, 4}, {0, 121}, {64, 121}} {
		for _, c := range []int{1, 8} {
			b.Run(fmt.Sprintf("depth=%d/tables=%d/c=%d", shape.depth, shape.tables, c), func(b *testing.B) {
				st := newCreateStack(b, shape.depth, shape.tables)
				n := max(b.N, 2*c)
				// Warm both paths (connections, caches) before measuring.
				measure(b, c, c, st.createEngine)
				measure(b, c, c, st.createRaw)
				b.ResetTimer()

				st.store.ResetCounts()
				raw, rawWall := measure(b, n, c, st.createRaw)
				rawReq := float64(totalRequests(st.store)) / float64(n)

				st.store.ResetCounts()
				eng, engWall := measure(b, n, c, st.createEngine)
				engReq := float64(totalRequests(st.store)) / float64(n)
				b.StopTimer()

				b.ReportMetric(pct(eng, 0.5), "p50-ms")
				b.ReportMetric(pct(eng, 0.99), "p99-ms")
				b.ReportMetric(float64(n)/engWall.Seconds(), "creates/s")
				b.ReportMetric(engReq, "requests/create")
				b.ReportMetric(pct(raw, 0.5), "raw-p50-ms")
				b.ReportMetric(float64(n)/rawWall.Seconds(), "raw-creates/s")
				b.ReportMetric(rawReq, "raw-requests/create")
				b.ReportMetric(pct(eng, 0.5)/pct(raw, 0.5), "engine/raw-p50")
				b.ReportMetric(peakRSSMiB(), "peak-rss-MiB")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
	runtime.GC()
}

func totalRequests(s *faults.Store) int {
	n := 0
	for _, t := range s.Counts() {
		n += t.Attempted
	}
	return n
}

// SuccessPathRequests is what a create from a branch head costs in object-store
// requests when nothing goes wrong, for a new name without '/': resolve the
// source (LIST of its refs, GET of the one ref), read its head (LIST with
// limit 1, GET), LIST the new name's refs (storage is the authority on what
// is live; a name with k '/' costs k more LISTs, one per ancestor), HEAD the
// source commit once it is pinned (proving no finished cleanup reclaimed it
// between the read and the pin), the fork commit's put-if-absent and the
// ref's put-if-absent.
const SuccessPathRequests = 8

// TestCreateBranch_RequestsPerCreate_SameAcrossDepthAndTables proves a create
// costs the same object-store requests whatever the source's history length
// and table count: no table data is copied and no history is walked.
func TestCreateBranch_RequestsPerCreate_SameAcrossDepthAndTables(t *testing.T) {
	for _, shape := range []struct{ depth, tables int }{{0, 4}, {64, 4}, {0, 121}, {64, 121}} {
		t.Run(fmt.Sprintf("depth=%d/tables=%d", shape.depth, shape.tables), func(t *testing.T) {
			st := newCreateStack(t, shape.depth, shape.tables)
			for i := 0; i < 3; i++ {
				st.store.ResetCounts()
				if err := st.createEngine(context.Background()); err != nil {
					t.Fatal(err)
				}
				counts := st.store.Counts()
				if got := totalRequests(st.store); got != SuccessPathRequests {
					t.Fatalf("create %d cost %d requests (%v), want %d", i, got, counts, SuccessPathRequests)
				}
				if p := counts[faults.OpPut].Attempted; p != 2 {
					t.Fatalf("create %d sent %d puts, want 2 (fork commit and ref)", i, p)
				}
			}
		})
	}
}

func quietSDKLogger() sdklog.Logger {
	return sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
}
