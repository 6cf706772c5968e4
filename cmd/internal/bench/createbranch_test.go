package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"go.temporal.io/api/workflowservice/v1"
	sdkclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	sdklog "go.temporal.io/sdk/log"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/grpc"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/catalog/catalogtest"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/internal/testenv"
	"github.com/graftworks/graft/storage"
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
	cat   *catalog.Catalog
	gc    *client.Client
	tc    sdkclient.Client
	queue string
	graph string
	seq   atomic.Int64
	// built is the graph as the harness writes it, straight to the store
	// (untimed, uncounted).
	built *graphFixture
	// rpcs counts the Temporal RPCs the shared client connection sends, by
	// method (the worker's polls and completions too).
	rpcs rpcCounter
	// clock times one operation's phases (BenchmarkEnginePhases).
	clock phaseClock
}

// rpcCounter counts gRPC calls by method name.
type rpcCounter struct {
	mu    sync.Mutex
	n     map[string]int
	clock *phaseClock // marks each RPC but the polls
}

func (c *rpcCounter) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	name := method[strings.LastIndexByte(method, '/')+1:]
	poll := strings.HasPrefix(name, "Poll")
	if !poll {
		c.clock.mark("rpc> " + name)
	}
	err := invoker(ctx, method, req, reply, cc, opts...)
	if !poll {
		c.clock.mark("rpc< " + name)
	}
	c.mu.Lock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[name]++
	// A start answered with the workflow's first task: it runs on this worker at once,
	// without a trip through matching (eager start).
	if r, ok := reply.(*workflowservice.StartWorkflowExecutionResponse); ok && err == nil && r.GetEagerWorkflowTask() != nil {
		c.n[EagerStarts]++
	}
	c.mu.Unlock()
	return err
}

// EagerStarts counts, among rpcCounter's methods, the starts the server answered with
// the workflow's first task.
const EagerStarts = "StartWorkflowExecution(eager)"

// take returns the counts so far and starts again from zero.
func (c *rpcCounter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = map[string]int{}
	return n
}

var stackSeq atomic.Int64

// newCreateStack builds a graph whose main has `tables` tables and
// `depth` commits after the table commit, on the local directory store.
func newCreateStack(tb testing.TB, depth, tables int) *createStack {
	tb.Helper()
	inner, err := localfs.Open(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	return newCreateStackOn(tb, inner, depth, tables)
}

// newCreateStackOn is newCreateStack on the store inner (an in-memory one
// builds deep histories fast for the request-count tests).
func newCreateStackOn(tb testing.TB, inner storage.Store, depth, tables int) *createStack {
	tb.Helper()
	st := &createStack{store: faults.Wrap(inner), graph: fmt.Sprintf("cb%d-%d", time.Now().UnixNano()%1e9, stackSeq.Add(1))}
	st.cat = catalogtest.Open(tb)
	st.acts = &activities.Activities{Store: st.store, Catalog: st.cat}
	st.built = buildGraph(tb, inner, st.graph, depth, tables)
	witnessMain(tb, st.cat, st.built)

	st.rpcs.clock = &st.clock
	ts := testenv.Temporal(tb)
	tc, err := sdkclient.Dial(sdkclient.Options{HostPort: ts.HostPort, Namespace: ts.Namespace, Logger: quietSDKLogger(),
		ConnectionOptions: sdkclient.ConnectionOptions{DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(st.rpcs.intercept)}}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(tc.Close)
	queue := "bench-" + st.graph
	w := worker.New(tc, queue, st.acts, sdkworker.Options{Interceptors: []interceptor.WorkerInterceptor{&stepClock{clock: &st.clock}}})
	w.RegisterWorkflowWithOptions(floorWorkflow, workflow.RegisterOptions{Name: floorWorkflowName})
	w.RegisterWorkflowWithOptions(floorPlusWorkflow, workflow.RegisterOptions{Name: floorPlusName})
	if err := w.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(w.Stop)
	st.gc = client.New(tc, client.Options{TaskQueue: queue, EagerStart: true, PollInterval: 5 * time.Second})
	st.tc, st.queue = tc, queue
	// A first create warms the worker (connections, caches): made here, untimed, so
	// every figure is of a worker that has run an operation on the graph.
	if err := st.createRawNamed(context.Background(), "warm"); err != nil {
		tb.Fatal(err)
	}
	return st
}

// witnessMain records in the ledger what `graft graph init` records beside the graph it
// writes: the init operation and main's incarnation, live — the witness a worker's
// resolve of main reads first (docs/format.md, "Read costs").
func witnessMain(tb testing.TB, cat *catalog.Catalog, b *graphFixture) {
	tb.Helper()
	ctx := context.Background()
	main, err := graph.ResolveBranch(ctx, b.g.S, b.g.Name, graph.DefaultBranch)
	if err != nil {
		tb.Fatal(err)
	}
	op := "init-" + b.g.Name
	if _, err := cat.OperationInsert(ctx, catalog.OperationInsertParams{ID: op, Kind: catalog.OpInitGraph, Graph: b.g.Name}); err != nil {
		tb.Fatal(err)
	}
	if _, err := cat.IncarnationInsert(ctx, catalog.IncarnationInsertParams{Graph: b.g.Name, Logical: graph.DefaultBranch,
		Native: main.Native, Tree: main.Tree.String(), OpID: op}); err != nil {
		tb.Fatal(err)
	}
	if _, err := cat.IncarnationSetState(ctx, catalog.IncarnationSetStateParams{Graph: b.g.Name, Native: main.Native,
		From: catalog.IncarnationIntent, To: catalog.IncarnationLive}); err != nil {
		tb.Fatal(err)
	}
	if _, err := cat.OperationFinish(ctx, catalog.OperationFinishParams{ID: op, Outcome: catalog.OutcomeDone}); err != nil {
		tb.Fatal(err)
	}
}

// floorWorkflowName is the Temporal floor: a workflow of three no-op local
// activities, the least a kernel operation (prepare, write, finish) could
// cost on this server and worker.
const floorWorkflowName = "bench.Floor"

func floorWorkflow(ctx workflow.Context) error {
	ctx = workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: 10 * time.Second})
	for range 3 {
		if err := workflow.ExecuteLocalActivity(ctx, floorStep).Get(ctx, nil); err != nil {
			return err
		}
	}
	return nil
}

func floorStep(context.Context) error { return nil }

// floor runs one floor workflow the way the client runs an operation:
// ExecuteWorkflow with eager start, then Get.
func (st *createStack) floor(ctx context.Context) error {
	run, err := st.tc.ExecuteWorkflow(ctx, sdkclient.StartWorkflowOptions{ID: "bench-floor-" + ulid.Make().String(),
		TaskQueue: st.queue, EnableEagerStart: true}, floorWorkflowName)
	if err != nil {
		return err
	}
	return run.Get(ctx, nil)
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
	return st.createRawNamed(ctx, st.nextBranch())
}

// createRawNamed is createRaw of the branch name: the activities the
// CreateBranch workflow runs on a graph (workflows/createbranch.go),
// with the inputs it gives them.
func (st *createStack) createRawNamed(ctx context.Context, name string) error {
	op := ulid.Make().String()
	owner := activities.Owner{OpID: op, Run: "raw-" + op}
	prep, err := st.acts.PrepareCreate(ctx, activities.PrepareCreateInput{OpID: op, Graph: st.graph, Branch: name,
		Time: time.Now().UTC(), Attempt: 1, WorkflowID: "raw-" + op, RunID: owner.Run})
	if err != nil || prep.Outcome != "" {
		return fmt.Errorf("prepare: %v %s %s", err, prep.Outcome, prep.Message)
	}
	clone, err := st.acts.CloneTree(ctx, activities.CloneInput{Owner: owner, Graph: st.graph, Native: prep.Native,
		ForkID: prep.ForkID, ForkBytes: prep.ForkBytes, ForkChunks: prep.ForkChunks})
	if err != nil || clone.State != activities.CloneCommitted {
		return fmt.Errorf("clone: %v %s", err, clone.State)
	}
	put, err := st.acts.Write(ctx, activities.WriteInput{Owner: owner, Spec: activities.WriteSpec{Kind: activities.WriteRef, Graph: st.graph,
		Body: prep.RefBytes, Branch: name, Landed: outcome.Created, Subject: prep.Native}})
	if err != nil || put.State != activities.Landed {
		return fmt.Errorf("put ref: %v %s", err, put.State)
	}
	if put.Recorded { // the ref write recorded the end, as the engine's create finds
		return nil
	}
	_, err = st.acts.Finish(ctx, activities.FinishInput{Owner: owner, Kind: catalog.OpCreateBranch, Outcome: outcome.Created,
		Graph: st.graph, Branch: name, Native: prep.Native})
	return err
}

// measure runs n operations over c goroutines and returns their latencies
// (unsorted) and the wall time.
func measure(tb testing.TB, n, c int, op func(context.Context) error) ([]time.Duration, time.Duration) {
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
				if err := op(ctx); err != nil {
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
		tb.Fatalf("operation: %v", err)
	}
	return lat, wall
}

// pct is the nearest-rank percentile of sorted, in milliseconds: the
// element at index ceil(p·n)−1, so p50 of 100 is the 50th and p99 the 99th.
func pct(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	i = max(0, min(i, len(sorted)-1))
	return float64(sorted[i].Microseconds()) / 1000
}

// path is one way of running an operation in a benchmark row (through the
// engine, its steps called directly, the Temporal floor), with what its
// operations cost so far.
type path struct {
	name string
	op   func(context.Context) error
	lat  []time.Duration
	wall time.Duration
	// requests are object-store calls, ledger the catalog's round trips and
	// transactions, both summed over the path's operations.
	requests int
	ledger   catalog.Stats
	// cpu is CPU time by process group (cpu_test.go) over the path's
	// operations; busy and total the machine's ticks over them.
	cpu         map[string]time.Duration
	busy, total float64
}

// addCPU accounts the CPU between two samples to p.
func (p *path) addCPU(s0, s1 cpuSample) {
	if p.cpu == nil {
		p.cpu = map[string]time.Duration{}
	}
	for g, d := range s1.Since(s0) {
		p.cpu[g] += d
	}
	p.busy += s1.Busy - s0.Busy
	p.total += s1.Total - s0.Total
}

func (p *path) n() int { return len(p.lat) }

func (p *path) p(q float64) float64 {
	sorted := slices.Clone(p.lat)
	slices.Sort(sorted)
	return pct(sorted, q)
}

func (p *path) perSecond() float64 { return float64(p.n()) / p.wall.Seconds() }

// cpuGroups are the process groups a path's CPU is accounted to (cpu_test.go).
var cpuGroups = []string{"bench", "temporal", "postgres"}

// cpuPerOp is the path's CPU in group per operation, in ms.
func (p *path) cpuPerOp(group string) float64 {
	return float64(p.cpu[group].Microseconds()) / 1000 / float64(p.n())
}

func (p *path) perOp(v int64) float64 { return float64(v) / float64(p.n()) }

// interleave runs n operations of every path at concurrency c so that a
// change in the machine's other load falls on every path alike, and counts
// the store's requests and the ledger's statements per path. At one client
// the paths take turns, one operation each: the figures are latencies, and
// no CPU is sampled (reading /proc around every operation would cost more
// than the operation). At more, in passes: each pass runs n/passes
// operations of each path in turn, with the CPU each path's pass took.
func interleave(tb testing.TB, store *faults.Store, cat *catalog.Catalog, n, c, passes int, paths ...*path) {
	tb.Helper()
	if c == 1 {
		for range n {
			for _, p := range paths {
				p.run(tb, store, cat, 1, 1, false)
			}
		}
		return
	}
	for pass := range passes {
		k := n / passes
		if pass == passes-1 {
			k = n - k*(passes-1)
		}
		for _, p := range paths {
			p.run(tb, store, cat, k, c, true)
		}
	}
}

// run runs k operations of p at concurrency c and adds what they cost to p: latencies,
// wall time, store requests, the ledger's statements and, with sampled, CPU.
func (p *path) run(tb testing.TB, store *faults.Store, cat *catalog.Catalog, k, c int, sampled bool) {
	tb.Helper()
	store.ResetCounts()
	before := cat.Stats()
	var cpu0 cpuSample
	if sampled {
		cpu0 = sampleCPU()
	}
	lat, wall := measure(tb, k, c, p.op)
	if sampled {
		p.addCPU(cpu0, sampleCPU())
	}
	p.ledger = addStats(p.ledger, cat.Stats().Sub(before))
	p.requests += totalRequests(store)
	p.lat = append(p.lat, lat...)
	p.wall += wall
}

func addStats(a, b catalog.Stats) catalog.Stats {
	return catalog.Stats{Statements: a.Statements + b.Statements, Transactions: a.Transactions + b.Transactions,
		Savepoints: a.Savepoints + b.Savepoints, Flushes: a.Flushes + b.Flushes}
}

// rowOps is how many operations a row measures: at least b.N, and at least
// 100 per client (800 at 8 clients).
func rowOps(b *testing.B, c int) int { return max(b.N, 100*c) }

// BenchmarkCreateBranch measures, in one run, interleaved (interleave),
// creates through the engine (client.CreateBranch), the same steps called
// directly (raw), and the Temporal floor (floorWorkflow), at concurrency 1
// and 8, in graphs: history depth 0, 64 and 10,000 at 4 tables,
// depth 0 and 64 at 121 tables (the targets ask for the time at depth 64 and
// 10,000 within 1.2 × depth 0's, and at 121 tables within 1.2 × 4 tables').
// Each row builds its own graph, untimed: depth 10,000 takes seconds
// (appendMany). It reports
// p50/p99 latency (ms, nearest rank), operations per second, object-store
// requests and ledger transactions and statements per create, the
// engine/raw and engine/floor ratios, and the process's peak RSS (worker,
// client and harness together).
func BenchmarkCreateBranch(b *testing.B) {
	for _, shape := range []struct{ depth, tables int }{{0, 4}, {64, 4}, {deepHistory, 4}, {0, 121}, {64, 121}} {
		for _, c := range []int{1, 8} {
			b.Run(fmt.Sprintf("depth=%d/tables=%d/c=%d", shape.depth, shape.tables, c), func(b *testing.B) {
				st := newCreateStack(b, shape.depth, shape.tables)
				n := rowOps(b, c)
				// Warm every path (connections, caches) before measuring.
				for _, op := range []func(context.Context) error{st.createEngine, st.createRaw, st.floor} {
					measure(b, 2*c, c, op)
				}
				b.ResetTimer()
				eng := &path{name: "engine", op: st.createEngine}
				raw := &path{name: "raw", op: st.createRaw}
				floor := &path{name: "floor", op: st.floor}
				interleave(b, st.store, st.cat, n, c, 2, raw, floor, eng)
				b.StopTimer()
				reportPaths(b, "create", eng, raw, floor)
				b.ReportMetric(testenv.PeakRSSMiB(), "peak-rss-MiB")
			})
		}
	}
	runtime.GC()
}

// reportPaths reports a row's figures: the engine's unprefixed, raw and
// floor's prefixed, and the ratios between their p50s.
func reportPaths(b *testing.B, unit string, eng, raw, floor *path) {
	b.ReportMetric(eng.p(0.5), "p50-ms")
	b.ReportMetric(eng.p(0.99), "p99-ms")
	b.ReportMetric(eng.perSecond(), unit+"s/s")
	b.ReportMetric(eng.perOp(int64(eng.requests)), "requests/"+unit)
	b.ReportMetric(eng.perOp(eng.ledger.Transactions), "ledger-tx/"+unit)
	b.ReportMetric(eng.perOp(eng.ledger.Statements), "ledger-stmts/"+unit)
	b.ReportMetric(eng.perOp(eng.ledger.Flushes), "ledger-flushes/"+unit)
	b.ReportMetric(raw.p(0.5), "raw-p50-ms")
	b.ReportMetric(raw.p(0.99), "raw-p99-ms")
	b.ReportMetric(raw.perSecond(), "raw-"+unit+"s/s")
	b.ReportMetric(raw.perOp(int64(raw.requests)), "raw-requests/"+unit)
	b.ReportMetric(eng.p(0.5)/raw.p(0.5), "engine/raw-p50")
	for _, p := range []*path{eng, raw, floor} {
		if p == nil || p.cpu == nil {
			continue
		}
		prefix := ""
		if p != eng {
			prefix = p.name + "-"
		}
		for _, g := range cpuGroups {
			b.ReportMetric(p.cpuPerOp(g), prefix+g+"-cpu-ms/"+unit)
		}
		if p.total > 0 {
			b.ReportMetric(100*p.busy/p.total, prefix+"machine-busy-%")
		}
	}
	if floor != nil {
		b.ReportMetric(floor.p(0.5), "floor-p50-ms")
		b.ReportMetric(floor.p(0.99), "floor-p99-ms")
		b.ReportMetric(floor.perSecond(), "floor-ops/s")
		b.ReportMetric(eng.p(0.5)/floor.p(0.5), "engine/floor-p50")
		b.ReportMetric(eng.p(0.5)/(floor.p(0.5)+raw.p(0.5)), "engine/(floor+raw)-p50")
		b.ReportMetric(eng.perSecond()/floor.perSecond(), "engine/floor-throughput")
	}
	b.ReportMetric(0, "ns/op")
}

func totalRequests(s *faults.Store) int {
	n := 0
	for _, t := range s.Counts() {
		n += t.Attempted
	}
	return n
}

// SuccessPathRequests is what a create from a branch head costs in
// object-store requests when nothing goes wrong, on a graph, for a
// new name without '/', by a worker that knows the graph (its first
// operation of a graph GETs the graph record, whose format decides how refs,
// commits and pins are read; a format only ever moves from 1 to 2, so a
// graph read at 2 is not read again):
//
//   - resolve the source: GET the ref of the incarnation the ledger names
//     as main's open one (`graft graph init` witnessed it; storage confirms
//     it live — no LIST, however many incarnations the name has had);
//   - GET the head commit the ref names (no LIST: a ref is its
//     tree's head pointer); the fork is planned on it (graph.PlanForkOn),
//     not read again;
//   - LIST the new name's refs (storage is the authority on what is live; a
//     name with k '/' costs k more LISTs, one per ancestor);
//   - HEAD the source commit once it is pinned (proving no finished cleanup
//     reclaimed it between the read and the pin);
//   - PUT the fork commit (put-if-absent; no lineage chunk while main's
//     lineage is inline, and the fork names the source's pins map as it
//     stands, so nothing of the tables is read or copied);
//   - PUT the ref (put-if-absent).
//
// 2 GETs, 1 LIST, 1 HEAD, 2 PUTs.
const SuccessPathRequests = 6

// successPathKinds is SuccessPathRequests by kind.
var successPathKinds = map[faults.Op]int{faults.OpGet: 2, faults.OpList: 1, faults.OpHead: 1, faults.OpPut: 2}

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
				if got := totalRequests(st.store); got != SuccessPathRequests {
					t.Fatalf("create %d cost %d requests (%v), want %d", i, got, st.store.Counts(), SuccessPathRequests)
				}
				if got := (target{Store: st.store}).sent(); !maps.Equal(got, successPathKinds) {
					t.Fatalf("create %d sent %v, want %v", i, got, successPathKinds)
				}
			}
		})
	}
}

func quietSDKLogger() sdklog.Logger {
	return sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
}
