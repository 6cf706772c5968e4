package workflows_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	enumspb "go.temporal.io/api/enums/v1"
	sdkclient "go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/catalog/catalogtest"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/internal/oracle"
	"github.com/graftworks/graft/internal/testenv"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/faults"
	"github.com/graftworks/graft/storage/s3"
	"github.com/graftworks/graft/worker"
	"github.com/graftworks/graft/workflows"
)

// childWorkerEnv makes the test binary run as a bare graft worker process
// (for tests that kill a worker mid-workflow) instead of running tests.
const childWorkerEnv = "GRAFT_TEST_CHILD_WORKER"

func TestMain(m *testing.M) {
	if os.Getenv(childWorkerEnv) != "" {
		os.Exit(runChildWorker())
	}
	testenv.Main(m)
}

// rig is one test's real stack: Temporal dev server, a fresh versitygw
// bucket behind the fault wrapper, a fresh ledger schema, a worker on a task
// queue of its own, and a graph with a table on main.
type rig struct {
	t         *testing.T
	ctx       context.Context
	inner     storage.Store
	store     *faults.Store
	cat       *catalog.Catalog
	tc        sdkclient.Client
	gc        *client.Client
	w         sdkworker.Worker
	taskQueue string
	graph     string
	s3cfg     s3.Config
	main      graph.CommitView // main's head after setup: pins table "t"
	// reported lists commits writes reported done; names the branch names used. The
	// oracle checks both when the test ends.
	reported []oracle.ReportedCommit
	names    []string
	// The matrix's per-case state (kernel_matrix_test.go).
	matrixReq, matrixOther   func(opID string) any
	repairKeep, repairRetire string
	// lastReconcile is the workflow id of the last reconcile pass the test ran.
	lastReconcile string
	// observed counts what the rig's workers told their Observer.
	observed *observed
}

// observed is an activities.Observer that counts the operations each outcome finished.
type observed struct {
	mu       sync.Mutex
	finished map[string]int // "kind outcome"
}

func (o *observed) OperationFinished(kind, out string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.finished[kind+" "+out]++
}

func (o *observed) Settled(string, time.Duration) {}

// counts returns a copy of the counts.
func (o *observed) counts() map[string]int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return maps.Clone(o.finished)
}

func randomName(prefix string) string {
	var b [5]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// runningRig is a parallel test's rig with its worker started.
func runningRig(t *testing.T) *rig {
	t.Parallel()
	r := newRig(t)
	r.startWorker()
	return r
}

func newRig(t *testing.T) *rig {
	t.Helper()
	r := newBareRig(t)
	r.setupGraph()
	// After every real-stack test, once its workers stopped: the reconciler, then the oracle.
	t.Cleanup(func() {
		if err := r.oracle(true); err != nil {
			t.Error(err)
		}
	})
	return r
}

// newBareRig is a rig on its own bucket, ledger schema and task queue, with Temporal
// dialled and no graph yet.
func newBareRig(t *testing.T) *rig {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	srv := testenv.VersityGW(t)
	cfg := s3.Config{Endpoint: srv.Endpoint, Region: srv.Region, Bucket: srv.NewBucket(t), PathStyle: true,
		AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey}
	inner, err := s3.New(ctx, cfg)
	if err != nil {
		t.Fatalf("s3 store: %v", err)
	}
	r := &rig{t: t, ctx: ctx, inner: inner, store: faults.Wrap(inner), cat: catalogtest.Open(t),
		taskQueue: randomName("graft-test-"), graph: randomName("g"), s3cfg: cfg, observed: &observed{finished: map[string]int{}}}
	ts := testenv.Temporal(t)
	r.tc, err = sdkclient.DialContext(ctx, sdkclient.Options{HostPort: ts.HostPort, Namespace: ts.Namespace, Logger: quietLogger()})
	if err != nil {
		t.Fatalf("dial temporal: %v", err)
	}
	t.Cleanup(r.tc.Close)
	r.gc = client.New(r.tc, client.Options{TaskQueue: r.taskQueue, PollInterval: 200 * time.Millisecond})
	return r
}

// acts returns the Activities a worker of the rig runs.
func (r *rig) acts() *activities.Activities {
	return &activities.Activities{Store: r.store, Catalog: r.cat, Workflows: worker.TemporalWorkflows(r.tc), Observer: r.observed}
}

// oracle checks the graph and the ledger (internal/oracle); with reconcile it first runs
// a reconciler pass of the graph, as the scheduled reconciler would, and then also checks
// that no unfinished operation's workflow is closed.
func (r *rig) oracle(reconcile bool) error {
	cfg := oracle.Config{Store: r.inner, Catalog: r.cat, Graph: r.graph, Reported: r.reported, Names: r.names}
	if reconcile {
		acts := &activities.Activities{Store: r.inner, Catalog: r.cat, Workflows: worker.TemporalWorkflows(r.tc)}
		if _, err := acts.Reconcile(r.ctx, activities.ReconcileInput{Run: "oracle-" + r.graph, Graph: r.graph}); err != nil {
			return fmt.Errorf("reconcile before the oracle: %w", err)
		}
		cfg.Workflows = worker.TemporalWorkflows(r.tc)
	}
	vs, err := oracle.Check(r.ctx, cfg)
	if err != nil {
		return fmt.Errorf("oracle: %w", err)
	}
	return oracle.Error(vs)
}

// startWorker runs an in-process worker on the rig's task queue.
func (r *rig) startWorker() {
	r.t.Helper()
	w := worker.New(r.tc, r.taskQueue, r.acts(), sdkworker.Options{})
	if err := w.Start(); err != nil {
		r.t.Fatalf("start worker: %v", err)
	}
	r.w = w
	r.t.Cleanup(w.Stop)
}

// setupGraph initialises the graph (main) and commits one table version to main.
func (r *rig) setupGraph() {
	r.t.Helper()
	now := time.Now().UTC().Truncate(time.Millisecond)
	init, err := graph.Init(r.ctx, r.inner, graph.InitParams{Graph: r.graph, MainTree: ulid.Make(), Op: "init-" + r.graph, Time: now})
	if err != nil {
		r.t.Fatalf("init graph: %v", err)
	}
	r.main = r.commitTable(r.view(init.Root.ID), "t", "v1")
	if _, err := r.cat.GraphInsert(r.ctx, catalog.GraphInsertParams{Name: r.graph, Locator: "s3://" + r.s3cfg.Bucket}); err != nil {
		r.t.Fatalf("ledger graph: %v", err)
	}
}

// commitTable writes a one-object version of table and appends a commit pinning it to main.
func (r *rig) commitTable(head graph.CommitView, table, body string) graph.CommitView {
	r.t.Helper()
	return r.commitOn(&head, table, body, time.Now())
}

// graphAPI opens the rig's graph on the bucket (bypassing faults).
func (r *rig) graphAPI() *graph.Graph {
	r.t.Helper()
	g, err := graph.Open(r.inner, r.graph)
	if err != nil {
		r.t.Fatal(err)
	}
	return g
}

// view reads commit id with its pins.
func (r *rig) view(id format.CommitID) graph.CommitView {
	r.t.Helper()
	c, err := graph.ReadCommitView(r.ctx, r.inner, r.graph, id.String())
	if err != nil {
		r.t.Fatalf("read commit %s: %v", id, err)
	}
	return c
}

// refPrefix is the key prefix of every ref of logical branch name.
func (r *rig) refPrefix(branch string) string { return format.BranchRefPrefix(r.graph, branch) }

// isLiveRef selects put bodies that are live refs (not fences).
func isLiveRef(b []byte) bool {
	ref, err := format.DecodeBranchRef(b)
	return err == nil && ref.State == format.RefLive
}

// liveRefPuts counts live-ref puts of branch that reached the store.
func (r *rig) liveRefPuts(branch string) int {
	return r.store.CountMatching(faults.Rule{Op: faults.OpPut, KeyPrefix: r.refPrefix(branch), Body: isLiveRef}).Sent
}

// refs reads every ref of branch straight from the bucket (bypassing faults).
func (r *rig) refs(branch string) map[string]format.BranchRef {
	r.t.Helper()
	out := map[string]format.BranchRef{}
	err := storage.ListAll(r.ctx, r.inner, r.refPrefix(branch), func(o storage.ObjectInfo) error {
		native, err := format.ParseBranchRefKey(r.graph, o.Key)
		if err != nil {
			return nil
		}
		obj, err := r.inner.Get(r.ctx, o.Key)
		if err != nil {
			return err
		}
		ref, err := format.DecodeBranchRef(obj.Body)
		if err != nil {
			return err
		}
		out[native] = ref
		return nil
	})
	if err != nil {
		r.t.Fatalf("list refs: %v", err)
	}
	return out
}

// liveNatives returns the natives of branch whose ref is live.
func (r *rig) liveNatives(branch string) []string {
	var out []string
	for n, ref := range r.refs(branch) {
		if ref.State == format.RefLive {
			out = append(out, n)
		}
	}
	return out
}

// treeCommits lists the commit keys stored in native's tree.
func (r *rig) treeCommits(native string) []string {
	r.t.Helper()
	_, tree, err := format.ParseNative(native)
	if err != nil {
		r.t.Fatalf("parse native %q: %v", native, err)
	}
	var keys []string
	if err := storage.ListAll(r.ctx, r.inner, format.TreeCommitsPrefix(r.graph, tree), func(o storage.ObjectInfo) error {
		keys = append(keys, o.Key)
		return nil
	}); err != nil {
		r.t.Fatalf("list tree: %v", err)
	}
	return keys
}

// incarnations returns the ledger's witnesses of branch.
func (r *rig) incarnations(branch string) []catalog.Incarnation {
	r.t.Helper()
	incs, err := r.cat.IncarnationListByLogical(r.ctx, catalog.IncarnationListByLogicalParams{Graph: r.graph, Logical: branch})
	if err != nil {
		r.t.Fatalf("ledger incarnations: %v", err)
	}
	return incs
}

func (r *rig) incarnation(native string) catalog.Incarnation {
	r.t.Helper()
	inc, err := r.cat.IncarnationGetByNative(r.ctx, catalog.IncarnationGetByNativeParams{Graph: r.graph, Native: native})
	if err != nil {
		r.t.Fatalf("ledger incarnation %s: %v", native, err)
	}
	return inc
}

func (r *rig) operation(id string) catalog.Operation {
	r.t.Helper()
	op, err := r.cat.OperationGet(r.ctx, catalog.OperationGetParams{ID: id})
	if err != nil {
		r.t.Fatalf("ledger operation %s: %v", id, err)
	}
	return op
}

// faultThenSettleSlowly adds rule, then holds the first request after its faults
// for settleHold: the settle re-issue that follows an in-doubt write waits, so a
// caller that polls the status sees in_doubt before the settle ends, however
// late its poll comes (the client's polls back off to five seconds).
func (r *rig) faultThenSettleSlowly(rule faults.Rule) {
	r.store.Add(rule)
	rule.Name, rule.Mode, rule.Delay = "", faults.Delay, settleHold
	rule.Skip, rule.Times = rule.Skip+rule.Times, 1
	r.store.Add(rule)
}

// settleHold is longer than two of the client's longest status polls.
const settleHold = 12 * time.Second

// waitFor polls cond until it holds or the deadline passes.
func (r *rig) waitFor(what string, d time.Duration, cond func() bool) {
	r.t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			r.t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func quietLogger() sdklog.Logger {
	return sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// runChildWorker is the body of a worker subprocess: it serves the task
// queue named in the environment, with a long delay injected before every
// live ref put so the parent can kill it between clone and ref.
func runChildWorker() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	env := func(k string) string { return os.Getenv("GRAFT_CHILD_" + k) }
	inner, err := s3.New(ctx, s3.Config{Endpoint: env("S3_ENDPOINT"), Region: "us-east-1", Bucket: env("S3_BUCKET"), PathStyle: true,
		AccessKeyID: env("S3_ACCESS"), SecretAccessKey: env("S3_SECRET")})
	if err != nil {
		os.Stderr.WriteString("child: s3: " + err.Error() + "\n")
		return 1
	}
	store := faults.Wrap(inner)
	if p := env("REF_PREFIX"); p != "" {
		store.Add(faults.Rule{Name: "stall-ref", Op: faults.OpPut, KeyPrefix: p, Body: isLiveRef, Mode: faults.Delay, Delay: time.Hour})
	}
	if p := env("STALL_PREFIX"); p != "" {
		// Every write under the prefix stalls: the parent kills this worker mid-effect.
		store.Add(faults.Rule{Name: "stall-effect", KeyPrefix: p, Match: func(op faults.Op, _ string) bool {
			return op == faults.OpPut || op == faults.OpDelete || op == faults.OpDeleteBatch
		}, Mode: faults.Delay, Delay: time.Hour})
	}
	cat, err := catalog.Open(ctx, catalog.Config{DatabaseURL: catalogtest.DatabaseURL(), Schema: env("DB_SCHEMA")})
	if err != nil {
		os.Stderr.WriteString("child: catalog: " + err.Error() + "\n")
		return 1
	}
	defer cat.Close()
	tc, err := sdkclient.DialContext(ctx, sdkclient.Options{HostPort: env("TEMPORAL"), Logger: quietLogger()})
	if err != nil {
		os.Stderr.WriteString("child: temporal: " + err.Error() + "\n")
		return 1
	}
	defer tc.Close()
	w := worker.New(tc, env("TASK_QUEUE"), &activities.Activities{Store: store, Catalog: cat, Workflows: worker.TemporalWorkflows(tc)}, sdkworker.Options{})
	if err := w.Run(sdkworker.InterruptCh()); err != nil && !errors.Is(err, context.Canceled) {
		os.Stderr.WriteString("child: worker: " + err.Error() + "\n")
		return 1
	}
	return 0
}

func testenvTemporal(t *testing.T) string { return testenv.Temporal(t).HostPort }

// graphCommit reads commit id as the graph package reads it.
func (r *rig) graphCommit(id format.CommitID) graph.Commit {
	r.t.Helper()
	c, err := r.graphAPI().Commit(r.ctx, id)
	if err != nil {
		r.t.Fatalf("read commit %s: %v", id, err)
	}
	return c
}

// Helpers of the kernel's real-stack tests: start any operation workflow by name, as a
// service in another language would, and read its end in either shape.

// startOp starts the workflow registered as name with input in, under a fresh workflow id.
func (r *rig) startOp(name string, in any) sdkclient.WorkflowRun {
	r.t.Helper()
	run, err := r.tc.ExecuteWorkflow(r.ctx, sdkclient.StartWorkflowOptions{ID: randomName("op-"), TaskQueue: r.taskQueue}, name, in)
	if err != nil {
		r.t.Fatalf("start %s: %v", name, err)
	}
	return run
}

// endOf waits for run's end and decodes its result into res: from the completion, or —
// for a definitive outcome that is not a success — from the ApplicationError the workflow
// failed with, whose type must be the outcome (docs/workflows.md). Other failures are
// returned.
func endOf(r *rig, run sdkclient.WorkflowRun, res any) error {
	r.t.Helper()
	err := run.Get(r.ctx, res)
	var app *temporal.ApplicationError
	if err == nil || !errors.As(err, &app) || !outcome.Outcome(app.Type()).Valid() {
		return err
	}
	if derr := app.Details(res); derr != nil {
		r.t.Fatalf("decode the result of %s from its failure: %v", run.GetID(), derr)
	}
	return nil
}

// upload writes one data object of table straight into the bucket, as the client does
// before a write, and returns its entry.
func (r *rig) upload(table, body string) workflows.TableObject {
	r.t.Helper()
	id := ulid.Make()
	if _, err := r.inner.Put(r.ctx, format.ObjectKey(r.graph, table, id), []byte(body), storage.PutOptions{IfNoneMatch: true}); err != nil {
		r.t.Fatalf("upload: %v", err)
	}
	sum := sha256.Sum256([]byte(body))
	return workflows.TableObject{ID: id.String(), Size: int64(len(body)), SHA256: hex.EncodeToString(sum[:])}
}

// waitOp waits until the operation's ledger row satisfies cond.
func (r *rig) waitOp(opID, what string, cond func(catalog.Operation) bool) catalog.Operation {
	r.t.Helper()
	var op catalog.Operation
	r.waitFor(what, 2*time.Minute, func() bool {
		var err error
		op, err = r.cat.OperationGet(r.ctx, catalog.OperationGetParams{ID: opID})
		return err == nil && cond(op)
	})
	return op
}

// inDoubt reports a row recorded in doubt.
func inDoubt(op catalog.Operation) bool { return op.State == catalog.OperationInDoubt }

// done reports a finished row.
func done(op catalog.Operation) bool { return op.State == catalog.OperationDone }

// reconcile runs one pass of graft.Reconcile through Temporal, as the schedule or `graft
// op reconcile` would, limited to the rig's graph.
func (r *rig) reconcile() workflows.ReconcileResult {
	r.t.Helper()
	run, err := r.tc.ExecuteWorkflow(r.ctx, sdkclient.StartWorkflowOptions{ID: randomName("reconcile-"), TaskQueue: r.taskQueue},
		workflows.ReconcileName, workflows.ReconcileInput{Graph: r.graph})
	if err != nil {
		r.t.Fatalf("start reconcile: %v", err)
	}
	r.lastReconcile = run.GetID()
	var res workflows.ReconcileResult
	if err := run.Get(r.ctx, &res); err != nil {
		r.t.Fatalf("reconcile: %v", err)
	}
	return res
}

// terminate terminates a workflow, as an operator's `temporal workflow terminate` would.
func (r *rig) terminate(run sdkclient.WorkflowRun) {
	r.t.Helper()
	if err := r.tc.TerminateWorkflow(r.ctx, run.GetID(), run.GetRunID(), "test terminates it"); err != nil {
		r.t.Fatalf("terminate %s: %v", run.GetID(), err)
	}
	r.waitFor("the workflow to close", time.Minute, func() bool {
		d, err := r.tc.DescribeWorkflowExecution(r.ctx, run.GetID(), run.GetRunID())
		return err == nil && d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	})
}

// headOfTree reads the head commit of tree straight from the bucket.
func (r *rig) headOfTree(tree ulid.ULID) graph.CommitView {
	r.t.Helper()
	var head format.CommitID
	if err := storage.ListAll(r.ctx, r.inner, format.BranchRefsPrefix(r.graph), func(o storage.ObjectInfo) error {
		obj, err := r.inner.Get(r.ctx, o.Key)
		if err != nil {
			return err
		}
		if ref, err := format.DecodeBranchRef(obj.Body); err == nil && ref.Tree == tree && !ref.Head.IsZero() {
			head = ref.Head
		}
		return nil
	}); err != nil {
		r.t.Fatalf("read refs: %v", err)
	}
	if head.IsZero() {
		r.t.Fatalf("no ref names a head of tree %s", tree)
	}
	return r.view(head)
}

// report records a commit a write reported done, for the oracle.
func (r *rig) report(branch, commit string) {
	r.reported = append(r.reported, oracle.ReportedCommit{Branch: branch, Commit: commit})
}

// pinsOf returns the pins an operation holds.
func (r *rig) pinsOf(opID string) []catalog.PinRecord {
	r.t.Helper()
	pins, err := r.cat.PinsList(r.ctx, catalog.PinsListParams{Graph: r.graph})
	if err != nil {
		r.t.Fatal(err)
	}
	var out []catalog.PinRecord
	for _, p := range pins {
		if p.OpID == opID {
			out = append(out, p)
		}
	}
	return out
}

// wantNoPuts fails the test if any put was sent since the store's counts were reset (by
// what, when named).
func (r *rig) wantNoPuts(what string) {
	r.t.Helper()
	if n := r.store.Count(faults.OpPut).Attempted; n != 0 {
		if what != "" {
			what = " by " + what
		}
		r.t.Fatalf("%d puts sent%s, want none", n, what)
	}
}

// wantMainUnmoved fails the test if main's head is not r.main.
func (r *rig) wantMainUnmoved() {
	r.t.Helper()
	if head := r.headOf("main"); head.ID != r.main.ID {
		r.t.Fatalf("main moved to %s", head.ID)
	}
}

// wantLateRefused releases the held puts, each of which must fail its precondition: what
// it would have written can never land any more.
func wantLateRefused(t testing.TB, ctx context.Context, what string, held []*faults.HeldPut) {
	t.Helper()
	for _, h := range held {
		if _, err := h.Release(ctx); !errors.Is(err, storage.ErrPreconditionFailed) {
			t.Fatalf("%s: %v; want a failed precondition", what, err)
		}
	}
}
