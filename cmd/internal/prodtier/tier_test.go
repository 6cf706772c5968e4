package prodtier

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/temporal"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/workflows"
)

// TestProd_CreatesMergesScheduledCleanupAndVisibility: on the server, with
// three worker processes on one queue, a graph is initialised and written,
// six branches are created at once, one is written and merged into main, a
// cleanup runs from its Temporal Schedule, and visibility queries on graft's
// search attributes find each of them — as on the dev server. The work is
// shared between the workers.
func TestProd_CreatesMergesScheduledCleanupAndVisibility(t *testing.T) {
	st := newStack(t, stackOptions{Workers: 3, Limit: 10 * time.Minute})
	g := st.initGraph("vis")

	const creates = 6
	res := make([]workflows.CreateBranchResult, creates)
	errs := make([]error, creates)
	var wg sync.WaitGroup
	for i := range creates {
		wg.Go(func() {
			res[i], errs[i] = st.gc.CreateBranch(st.ctx, client.CreateBranchRequest{Graph: g, Branch: fmt.Sprintf("feature/b%d", i)})
		})
	}
	wg.Wait()
	for i := range creates {
		if errs[i] != nil || res[i].Outcome != outcome.Created {
			t.Fatalf("create feature/b%d: %+v, %v; want created", i, res[i], errs[i])
		}
	}

	wrote := st.writeTable(g, "feature/b0", "scores", 1)
	m, err := st.gc.Merge(st.ctx, client.MergeRequest{Graph: g, Source: "feature/b0", Target: "main"})
	if err != nil || (m.Outcome != outcome.Merged && m.Outcome != outcome.Adopted) {
		t.Fatalf("merge feature/b0 into main: %+v, %v; want merged or adopted", m, err)
	}
	mainHead, err := client.NewReader(st.store).ShowBranch(st.ctx, g, "main")
	if err != nil || mainHead.Head != m.Commit || !slices.ContainsFunc(mainHead.Pins, func(p client.TablePin) bool {
		return p.Table == "scores" && p.Version == wrote.Version
	}) {
		t.Fatalf("main after the merge: %+v, %v; want head %s pinning scores %s", mainHead, err, m.Commit, wrote.Version)
	}

	// Visibility: SQL visibility on Postgres answers graft's queries.
	found := st.waitVisible(fmt.Sprintf(`GraftGraph = %q AND GraftOperation = "create_branch" AND GraftOutcome = "created"`, g), creates)
	var ids []string
	for _, e := range found {
		if e.Type != workflows.CreateBranchName || e.Status != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
			t.Errorf("visibility lists %+v as a create", e)
		}
		ids = append(ids, e.ID)
	}
	sort.Strings(ids)
	for i := range creates {
		if want := client.CreateBranchWorkflowID(g, fmt.Sprintf("feature/b%d", i)); !slices.Contains(ids, want) {
			t.Errorf("visibility lists %v, without %s", ids, want)
		}
	}
	merges := st.waitVisible(fmt.Sprintf(`GraftGraph = %q AND GraftOperation = "merge" AND GraftOutcome = %q`, g, m.Outcome), 1)
	if merges[0].Type != workflows.MergeName {
		t.Errorf("visibility lists %+v as the merge", merges[0])
	}
	count, err := st.tc.CountWorkflow(st.ctx, &workflowservice.CountWorkflowExecutionsRequest{
		Query: fmt.Sprintf(`GraftGraph = %q AND GraftOperation = "create_branch"`, g)})
	if err != nil || count.GetCount() != creates {
		t.Errorf("count of the graph's creates: %d (%v), want %d", count.GetCount(), err, creates)
	}

	// A cleanup from the graph's Schedule: the server's scheduler starts it.
	zero := time.Duration(0)
	sched := client.CleanupScheduleRequest{Graph: g, Every: time.Hour, KeepNewest: 1, GuardWindow: &zero, Mode: workflows.CleanupModeSweep}
	if err := st.gc.CleanupScheduleCreate(st.ctx, sched); err != nil {
		t.Fatalf("create cleanup schedule: %v", err)
	}
	t.Cleanup(func() { _ = st.gc.CleanupScheduleDelete(context.Background(), g) })
	if err := st.gc.CleanupScheduleTrigger(st.ctx, g); err != nil {
		t.Fatalf("trigger the schedule: %v", err)
	}
	scheduled := st.waitVisible(fmt.Sprintf(`TemporalScheduledById = %q AND ExecutionStatus = "Completed" AND GraftOutcome = "done"`,
		client.CleanupScheduleID(g)), 1)
	if scheduled[0].Type != workflows.CleanupName {
		t.Fatalf("the schedule started %+v, want a %s", scheduled[0], workflows.CleanupName)
	}
	runs, err := st.cat.CleanupRunList(st.ctx, catalog.CleanupRunListParams{Graph: g})
	if err != nil || len(runs) != 1 || runs[0].State != catalog.CleanupDone || runs[0].Mode != catalog.CleanupSweep {
		t.Fatalf("the ledger's cleanup runs: %+v, %v; want one finished sweep", runs, err)
	}
	var info client.CleanupScheduleInfo
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err = st.gc.CleanupScheduleDescribe(st.ctx, g)
		if err == nil && len(info.RecentRuns) == 1 && info.RecentRuns[0].WorkflowID == scheduled[0].ID {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("schedule %+v (%v) does not record the run %s", info, err, scheduled[0].ID)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if err := st.gc.CleanupScheduleDelete(st.ctx, g); err != nil {
		t.Fatalf("delete the schedule: %v", err)
	}
	if _, err := st.gc.CleanupScheduleDescribe(st.ctx, g); !errors.Is(err, outcome.ErrNotFound) {
		t.Fatalf("describe after delete: %v, want not_found", err)
	}

	st.checkInvariants(g)

	// The three processes shared the work.
	var per []float64
	busy := 0
	for _, w := range st.workers {
		n, err := metric(st.ctx, w, "graft_operations_total")
		if err != nil {
			t.Fatalf("%s /metrics: %v", w, err)
		}
		per = append(per, n)
		if n > 0 {
			busy++
		}
	}
	t.Logf("operations finished per worker: %v", per)
	if busy < 2 {
		t.Errorf("operations per worker %v: one process did all the work", per)
	}
}

// loadResult is one operation the load started and how it ended.
type loadResult struct {
	kind           string
	name           string
	out            outcome.Outcome
	opID           string
	err            error
	started, ended time.Time
}

// runLoad runs creates from creators goroutines and a chain of create, table
// write and merge into main from one more, until stop is closed; it returns
// every operation's result. dir holds the files the writes upload.
func runLoad(st *stack, g, dir string, creators int, stop <-chan struct{}) []loadResult {
	var mu sync.Mutex
	var out []loadResult
	record := func(r loadResult) {
		r.ended = time.Now()
		mu.Lock()
		out = append(out, r)
		mu.Unlock()
	}
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	var wg sync.WaitGroup
	for c := range creators {
		wg.Go(func() {
			for i := 0; !stopped(); i++ {
				name := fmt.Sprintf("load/c%d-%d", c, i)
				r := loadResult{kind: "create", name: name, started: time.Now()}
				ctx, cancel := context.WithTimeout(st.ctx, 3*time.Minute)
				h, err := st.gc.StartCreateBranch(ctx, client.CreateBranchRequest{Graph: g, Branch: name})
				if err == nil {
					var res workflows.CreateBranchResult
					res, err = h.WaitFinal(ctx)
					r.out, r.opID = res.Outcome, res.OpID
				}
				cancel()
				r.err = err
				record(r)
			}
		})
	}
	wg.Go(func() {
		for i := 0; !stopped(); i++ {
			branch := fmt.Sprintf("merge/m%d", i)
			ctx, cancel := context.WithTimeout(st.ctx, 3*time.Minute)
			began := time.Now()
			res, err := st.gc.CreateBranch(ctx, client.CreateBranchRequest{Graph: g, Branch: branch})
			record(loadResult{kind: "create", name: branch, out: res.Outcome, opID: res.OpID, err: err, started: began})
			if err == nil {
				file := filepath.Join(dir, fmt.Sprintf("m%d.csv", i))
				err = os.WriteFile(file, []byte(fmt.Sprintf("id,value\n%d,%s\n", i, randomHex(4))), 0o644)
				began = time.Now()
				var w workflows.WriteTableResult
				if err == nil {
					w, err = st.gc.WriteTable(ctx, st.store, client.WriteTableRequest{Graph: g, Branch: branch,
						Table: fmt.Sprintf("t%d", i%4), Files: []string{file}})
				}
				record(loadResult{kind: "write", name: branch, out: w.Outcome, opID: w.OpID, err: err, started: began})
				if err == nil {
					began = time.Now()
					m, err := st.gc.Merge(ctx, client.MergeRequest{Graph: g, Source: branch, Target: "main"})
					record(loadResult{kind: "merge", name: branch, out: m.Outcome, opID: m.OpID, err: err, started: began})
				}
			}
			cancel()
		}
	})
	wg.Wait()
	return out
}

// spanning counts the operations running at instant at.
func spanning(results []loadResult, at time.Time) int {
	n := 0
	for _, r := range results {
		if r.started.Before(at) && r.ended.After(at) {
			n++
		}
	}
	return n
}

// checkLoad requires every operation of the load to have ended with a
// success, and the ledger to record the same outcome for it.
func checkLoad(t *testing.T, st *stack, results []loadResult, minimum int) {
	t.Helper()
	byKind := map[string]int{}
	for _, r := range results {
		if r.err != nil || !r.out.Success() {
			t.Errorf("%s %s: outcome %q, %v; want a success", r.kind, r.name, r.out, r.err)
			continue
		}
		byKind[r.kind]++
		op, err := st.cat.OperationGet(st.ctx, catalog.OperationGetParams{ID: r.opID})
		if err != nil || op.State != catalog.OperationDone || string(op.Outcome) != string(r.out) {
			t.Errorf("%s %s: ledger has %+v (%v), want done with %s", r.kind, r.name, op, err, r.out)
		}
	}
	t.Logf("operations under load: %v", byKind)
	if len(results) < minimum {
		t.Errorf("the load ran %d operations, want at least %d", len(results), minimum)
	}
	if byKind["merge"] == 0 {
		t.Errorf("no merge ran under load")
	}
}

// TestProd_RollingRestart_LosesNothing: while creates and merges run, each
// worker in turn gets SIGTERM (it exits 0 after finishing what it runs) and
// is started again. Every operation ends with its success outcome, in the
// client and in the ledger, and the graph's invariants hold.
func TestProd_RollingRestart_LosesNothing(t *testing.T) {
	st := newStack(t, stackOptions{Workers: 3, Limit: 15 * time.Minute})
	g := st.initGraph("roll")

	stop := make(chan struct{})
	done := make(chan []loadResult)
	dir := t.TempDir()
	go func() { done <- runLoad(st, g, dir, 3, stop) }()

	time.Sleep(3 * time.Second)
	var sigterms []time.Time
	for i, w := range st.workers {
		// The worker about to stop has been doing the load's work.
		if n, err := metric(st.ctx, w, "graft_operations_total"); err != nil || n == 0 {
			t.Errorf("worker %d before SIGTERM: %v operations finished (%v), want some", i, n, err)
		}
		began := time.Now()
		sigterms = append(sigterms, began)
		if err := w.Terminate(45 * time.Second); err != nil {
			t.Errorf("worker %d after SIGTERM: %v, want exit 0", i, err)
		}
		stopped := time.Since(began)
		if err := w.Start(st.ctx); err != nil {
			close(stop)
			<-done
			t.Fatalf("restart worker %d: %v", i, err)
		}
		t.Logf("worker %d: stopped in %s, polling again after %s", i, stopped.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
		time.Sleep(3 * time.Second)
	}
	close(stop)
	results := <-done
	checkLoad(t, st, results, 20)
	for i, at := range sigterms {
		n := spanning(results, at)
		t.Logf("worker %d got SIGTERM with %d operations running", i, n)
		if n == 0 {
			t.Errorf("no operation was running when worker %d got SIGTERM", i)
		}
	}
	st.checkInvariants(g)
}

// TestProd_KillMidSettle_AnotherWorkerFinishes: a create's ref put answers
// ambiguously, so the create settles, re-issuing the put on a backoff. A
// re-issue's put is held in the front of the worker that sent it, and that
// worker is killed with SIGKILL inside the step; the held put is delivered
// after its sender died. The step, no longer heartbeating, moves to another
// worker, which finishes the create: created, the one branch live in the
// store and the ledger.
func TestProd_KillMidSettle_AnotherWorkerFinishes(t *testing.T) {
	st := newStack(t, stackOptions{Workers: 3, Limit: 10 * time.Minute})
	g := st.initGraph("kill")
	const branch = "doubt"
	h := st.startSettling(g, branch)

	for _, f := range st.fronts {
		f.DelayPuts(format.BranchRefPrefix(g, branch), 10*time.Minute)
	}
	victim := -1
	for deadline := time.Now().Add(2 * time.Minute); victim < 0; time.Sleep(20 * time.Millisecond) {
		for i, f := range st.fronts {
			if f.Holding() > 0 {
				victim = i
			}
		}
		if victim < 0 && time.Now().After(deadline) {
			t.Fatal("no re-issue of the ref put reached a front in 2 minutes")
		}
	}
	for i, f := range st.fronts {
		if i != victim {
			f.Heal()
		}
	}
	vw := st.workers[victim]
	pid := vw.Pid()
	vw.Kill()
	if err := vw.Wait(0); err == nil || !strings.Contains(err.Error(), syscall.SIGKILL.String()) {
		t.Fatalf("victim worker %d: %v, want killed", victim, err)
	}
	killedAt := time.Now()
	st.fronts[victim].Heal() // the held put goes on to the store

	ctx, cancel := context.WithTimeout(st.ctx, 3*time.Minute)
	defer cancel()
	res, err := h.WaitFinal(ctx)
	if err != nil || res.Outcome != outcome.Created {
		t.Fatalf("create after the kill: %+v, %v; want created", res, err)
	}
	t.Logf("worker %d (pid %d) killed inside a re-issue; another finished the create %s later after %d settle attempts",
		victim, pid, time.Since(killedAt).Round(time.Millisecond), res.SettleAttempts)
	if st.fronts[victim].Stored() == 0 {
		t.Errorf("the victim's held ref put was not stored after the kill; want it delivered late")
	}
	if moved := st.stepsMovedOnHeartbeat(h.WorkflowID, h.RunID); moved == 0 {
		t.Errorf("no step of the create was retried after a heartbeat timeout; want the victim's re-issue moved to another worker")
	}
	// Worker identities are the SDK's default, pid@host.
	by, survivor := st.completedBy(h.WorkflowID, h.RunID), false
	for i, w := range st.workers {
		if i != victim && strings.HasPrefix(by, fmt.Sprintf("%d@", w.Pid())) {
			survivor = true
		}
	}
	if !survivor {
		t.Errorf("the create's last workflow task was completed by %q; want one of the surviving workers (victim pid %d)", by, pid)
	}
	b, err := client.NewReader(st.store).ShowBranch(st.ctx, g, branch)
	if err != nil || b.Native != res.Native {
		t.Fatalf("branch %s: %+v, %v; want live as %s", branch, b, err, res.Native)
	}
	op, err := st.cat.OperationGet(st.ctx, catalog.OperationGetParams{ID: res.OpID})
	if err != nil || op.State != catalog.OperationDone || op.Outcome != catalog.Outcome(outcome.Created) {
		t.Fatalf("ledger: %+v, %v; want done, created", op, err)
	}
	if err := vw.Start(st.ctx); err != nil { // the stack stops it with the others
		t.Fatal(err)
	}
	st.checkInvariants(g)
}

// startSettling starts a create of branch whose ref puts every front fails
// ambiguously, and waits until it settles with one re-issue failed.
func (st *stack) startSettling(g, branch string) *client.Handle {
	st.t.Helper()
	faulted := st.faulted()
	for _, f := range st.fronts {
		f.FailPuts(format.BranchRefPrefix(g, branch))
	}
	h, err := st.gc.StartCreateBranch(st.ctx, client.CreateBranchRequest{Graph: g, Branch: branch})
	if err != nil {
		st.t.Fatal(err)
	}
	st.waitSettling(h.WorkflowID, 1, faulted)
	return h
}

// waitSettling waits until a create reports phase settle with n re-issues and
// the fronts have failed its put and those n re-issues' puts (the fronts had
// failed faulted puts before). A write sends one PUT, with no retry.
func (st *stack) waitSettling(workflowID string, n, faulted int) workflows.OperationStatus {
	st.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		s, err := st.gc.Status(st.ctx, workflowID, "")
		if err == nil && s.Phase == "settle" && s.Outcome == outcome.InDoubt && s.SettleAttempts >= n && st.faulted() >= faulted+1+n {
			return s
		}
		if time.Now().After(deadline) {
			st.t.Fatalf("create %s not settling with %d failed re-issues after 2 minutes: %+v, %v; %d puts failed",
				workflowID, n, s, err, st.faulted()-faulted)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// faulted returns how many PUTs the fronts have failed.
func (st *stack) faulted() int {
	n := 0
	for _, f := range st.fronts {
		n += f.Faulted()
	}
	return n
}

// stepsMovedOnHeartbeat counts the activity attempts of a workflow that
// started after the attempt before them timed out on its heartbeat: steps lost
// with their worker and taken up by another.
func (st *stack) stepsMovedOnHeartbeat(id, runID string) int {
	n := 0
	for _, e := range st.history(id, runID) {
		a := e.GetActivityTaskStartedEventAttributes()
		if a == nil || a.GetAttempt() < 2 {
			continue
		}
		if tf := a.GetLastFailure().GetTimeoutFailureInfo(); tf != nil && tf.GetTimeoutType() == enumspb.TIMEOUT_TYPE_HEARTBEAT {
			n++
		}
	}
	return n
}

// completedBy returns the identity of the worker that completed the
// workflow's last workflow task.
func (st *stack) completedBy(id, runID string) string {
	last := ""
	for _, e := range st.history(id, runID) {
		if a := e.GetWorkflowTaskCompletedEventAttributes(); a != nil {
			last = a.GetIdentity()
		}
	}
	return last
}

// history returns a workflow run's events.
func (st *stack) history(id, runID string) []*historypb.HistoryEvent {
	st.t.Helper()
	it := st.tc.GetWorkflowHistory(st.ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var events []*historypb.HistoryEvent
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			st.t.Fatalf("history of %s: %v", id, err)
		}
		events = append(events, e)
	}
	return events
}

// TestProd_ServerRestart_RunningOperationsResume: with creates in flight and
// one create settling on a durable timer, the Temporal server is stopped and
// started again on its Postgres state. The settling create is the same run
// afterwards and finishes once the store answers; every create in flight
// ends created; the workers reconnect by themselves.
func TestProd_ServerRestart_RunningOperationsResume(t *testing.T) {
	st := newStack(t, stackOptions{Workers: 3, Limit: 10 * time.Minute})
	g := st.initGraph("restart")
	const branch = "doubt"
	doubt := st.startSettling(g, branch)

	// The in-flight creates' ref puts are held 4s in the fronts, so every
	// one of them is inside a step on a worker when the server stops.
	const flights = 12
	for _, f := range st.fronts {
		f.DelayPuts(format.BranchRefsPrefix(g)+"flight/", 4*time.Second)
	}
	type started struct{ name, id, runID string }
	var inFlight []started
	for i := range flights {
		name := fmt.Sprintf("flight/f%d", i)
		h, err := st.gc.StartCreateBranch(st.ctx, client.CreateBranchRequest{Graph: g, Branch: name})
		if err != nil {
			t.Fatalf("start %s: %v", name, err)
		}
		inFlight = append(inFlight, started{name, h.WorkflowID, h.RunID})
	}
	deadline := time.Now().Add(time.Minute)
	for held := 0; held < flights; {
		held = 0
		for _, f := range st.fronts {
			held += f.Holding()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d in-flight ref puts held after a minute", held, flights)
		}
		time.Sleep(20 * time.Millisecond)
	}
	began := time.Now()
	if err := st.srv.Restart(st.ctx); err != nil {
		t.Fatalf("restart the server: %v", err)
	}
	t.Logf("server stopped and serving again in %s", time.Since(began).Round(time.Millisecond))
	for _, f := range st.fronts {
		f.Heal()
	}

	for _, f := range inFlight {
		res, err := finalResult[workflows.CreateBranchResult](st, f.id, f.runID)
		if err != nil || res.Outcome != outcome.Created {
			t.Errorf("create %s across the restart: %+v, %v; want created", f.name, res, err)
		}
	}
	res, err := finalResult[workflows.CreateBranchResult](st, doubt.WorkflowID, doubt.RunID)
	if err != nil || res.Outcome != outcome.Created || res.SettleAttempts < 2 {
		t.Fatalf("settling create across the restart: %+v, %v; want created after at least 2 settle attempts", res, err)
	}
	for i, w := range st.workers {
		if w.Exited() {
			t.Errorf("worker %d exited across the server restart: %v", i, w.Wait(0))
		} else if err := healthy(st.ctx, w); err != nil {
			t.Errorf("worker %d not healthy after the server restart: %v", i, err)
		}
	}
	// The workers poll again: a new create goes through.
	if r, err := st.gc.CreateBranch(st.ctx, client.CreateBranchRequest{Graph: g, Branch: "after"}); err != nil || r.Outcome != outcome.Created {
		t.Fatalf("create after the restart: %+v, %v", r, err)
	}
	st.checkInvariants(g)
}

// finalResult waits for a workflow run's result through outages of the
// server, accepting both end shapes: a completion carrying the result, or a
// failure whose ApplicationError carries it as its first detail (README
// contract 2).
func finalResult[R any](st *stack, id, runID string) (R, error) {
	var res R
	ctx, cancel := context.WithTimeout(st.ctx, 3*time.Minute)
	defer cancel()
	for {
		err := st.tc.GetWorkflow(ctx, id, runID).Get(ctx, &res)
		if err == nil {
			return res, nil
		}
		var appErr *temporal.ApplicationError
		if errors.As(err, &appErr) && appErr.HasDetails() {
			if derr := appErr.Details(&res); derr == nil {
				return res, nil
			}
		}
		var unavailable *serviceerror.Unavailable
		var deadline *serviceerror.DeadlineExceeded
		if ctx.Err() == nil && (errors.As(err, &unavailable) || errors.As(err, &deadline) || strings.Contains(err.Error(), "connection refused")) {
			time.Sleep(500 * time.Millisecond)
			continue
		}
		return res, err
	}
}
