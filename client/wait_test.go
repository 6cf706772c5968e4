package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	sdkclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/testenv"
	"github.com/graftworks/graft/workflows"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// stubStack is the Temporal dev server with a worker on a queue of its own
// that runs stand-in workflows under graft's registered names, so a test
// decides how each "operation" ends. calls counts the client's requests.
type stubStack struct {
	tc    sdkclient.Client
	queue string
	calls *callCounter
}

// callCounter counts the client's outbound Temporal calls by kind.
type callCounter struct {
	interceptor.ClientInterceptorBase
	queries, describes atomic.Int64
}

func (c *callCounter) InterceptClient(next interceptor.ClientOutboundInterceptor) interceptor.ClientOutboundInterceptor {
	return &countingOutbound{ClientOutboundInterceptorBase: interceptor.ClientOutboundInterceptorBase{Next: next}, c: c}
}

type countingOutbound struct {
	interceptor.ClientOutboundInterceptorBase
	c *callCounter
}

func (o *countingOutbound) QueryWorkflow(ctx context.Context, in *interceptor.ClientQueryWorkflowInput) (converter.EncodedValue, error) {
	o.c.queries.Add(1)
	return o.Next.QueryWorkflow(ctx, in)
}

func newStubStack(t *testing.T, register func(w sdkworker.Worker)) *stubStack {
	t.Helper()
	ts := testenv.Temporal(t)
	calls := &callCounter{}
	tc := dialQuiet(t, sdkclient.Options{HostPort: ts.HostPort, Namespace: ts.Namespace, Interceptors: []interceptor.ClientInterceptor{calls}})
	queue := fmt.Sprintf("graft-client-%d", time.Now().UnixNano())
	if register != nil {
		w := sdkworker.New(tc, queue, sdkworker.Options{})
		register(w)
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
	}
	return &stubStack{tc: tc, queue: queue, calls: calls}
}

// dialQuiet dials Temporal with o and a logger that drops the SDK's lines, and
// closes the client when the test ends.
func dialQuiet(t *testing.T, o sdkclient.Options) sdkclient.Client {
	t.Helper()
	o.Logger = sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	tc, err := sdkclient.Dial(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)
	return tc
}

func (s *stubStack) client(o Options) *Client {
	o.TaskQueue = s.queue
	return New(s.tc, o)
}

func registerCreate(w sdkworker.Worker, fn func(workflow.Context, workflows.CreateBranchInput) (workflows.CreateBranchResult, error)) {
	w.RegisterWorkflowWithOptions(fn, workflow.RegisterOptions{Name: workflows.CreateBranchName})
}

// TestCreateBranch_WorkflowFails_ReturnsAtOnceWithTheFailure is the
// regression of the dead "workflow failed" branch: a create whose workflow
// fails on an infrastructure error returns that failure as soon as the
// workflow has failed — briefly, naming the dependency — instead of polling
// forever.
func TestCreateBranch_WorkflowFails_ReturnsAtOnceWithTheFailure(t *testing.T) {
	s := newStubStack(t, func(w sdkworker.Worker) {
		registerCreate(w, func(ctx workflow.Context, in workflows.CreateBranchInput) (workflows.CreateBranchResult, error) {
			_ = workflow.Sleep(ctx, 2*time.Second)
			return workflows.CreateBranchResult{}, fmt.Errorf("prepare: %w", temporal.NewApplicationError(
				`read graph: storage get "g/graph.json": unavailable: dial tcp 127.0.0.1:1: connect: connection refused`, "", true, nil))
		})
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	began := time.Now()
	_, err := s.client(Options{PollInterval: 50 * time.Millisecond}).CreateBranch(ctx, CreateBranchRequest{Graph: "g", Branch: "fails"})
	took := time.Since(began)
	var we *WorkflowError
	if !errors.As(err, &we) {
		t.Fatalf("err %v (%T), want a *WorkflowError", err, err)
	}
	if we.Status != "failed" || we.Dependency != "the store" || !strings.Contains(we.Cause, "connection refused") || we.OpID == "" {
		t.Fatalf("workflow error %+v", we)
	}
	if len(err.Error()) > 500 || strings.Count(err.Error(), "connection refused") != 1 {
		t.Fatalf("error is not brief: %q", err)
	}
	if took > 10*time.Second {
		t.Fatalf("returned %s after start; the workflow failed after 2s", took)
	}
	// The wait did not poll hot: queries back off from 50ms to at most 5s.
	if q := s.calls.queries.Load(); q > 10 {
		t.Fatalf("%d status queries in %s", q, took)
	}
}

// TestWorkflowError_AStepThatTimedOut_FailedTheRun: a step whose every attempt
// timed out fails its run; the caller is told the run failed, naming the step and
// its timeout, not that the run itself timed out.
func TestWorkflowError_AStepThatTimedOut_FailedTheRun(t *testing.T) {
	const step = "graft.SlowStep"
	s := newStubStack(t, func(w sdkworker.Worker) {
		w.RegisterActivityWithOptions(func(ctx context.Context) error {
			<-ctx.Done()
			return ctx.Err()
		}, activity.RegisterOptions{Name: step})
		registerCreate(w, func(ctx workflow.Context, in workflows.CreateBranchInput) (workflows.CreateBranchResult, error) {
			ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 200 * time.Millisecond,
				RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1}})
			return workflows.CreateBranchResult{}, workflow.ExecuteActivity(ctx, step).Get(ctx, nil)
		})
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := s.client(Options{PollInterval: 50 * time.Millisecond}).CreateBranch(ctx, CreateBranchRequest{Graph: "g", Branch: "slow"})
	var we *WorkflowError
	if !errors.As(err, &we) {
		t.Fatalf("err %v (%T), want a *WorkflowError", err, err)
	}
	if we.Status != "failed" || !strings.Contains(we.Cause, step) || !strings.Contains(we.Cause, "StartToClose") {
		t.Fatalf("workflow error %+v, want failed naming %s and its StartToClose timeout", we, step)
	}
}

// TestWait_NonSuccessOutcome_DecodedFromEitherEndShape: a definitive
// outcome other than success arrives the same to the caller whether the
// workflow completed with it (older histories) or failed with an
// ApplicationError whose type is the outcome and whose first detail is the
// result (docs/workflows.md, contract 2).
func TestWait_NonSuccessOutcome_DecodedFromEitherEndShape(t *testing.T) {
	conflict := func(in workflows.CreateBranchInput) workflows.CreateBranchResult {
		return workflows.CreateBranchResult{Outcome: outcome.Conflict, OpID: in.OpID, Graph: in.Graph, Branch: in.Branch,
			Native: in.Branch + ".01J00000000000000000000000", Message: "branch is live already"}
	}
	s := newStubStack(t, func(w sdkworker.Worker) {
		registerCreate(w, func(ctx workflow.Context, in workflows.CreateBranchInput) (workflows.CreateBranchResult, error) {
			res := conflict(in)
			if in.Branch == "completed" {
				return res, nil
			}
			return workflows.CreateBranchResult{}, temporal.NewNonRetryableApplicationError(res.Message, string(res.Outcome), nil, res)
		})
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := s.client(Options{PollInterval: 50 * time.Millisecond})
	for _, branch := range []string{"completed", "failed"} {
		res, err := c.CreateBranch(ctx, CreateBranchRequest{Graph: "g", Branch: branch, IdempotencyKey: "op-" + branch})
		if !errors.Is(err, outcome.ErrConflict) {
			t.Fatalf("%s: err %v, want conflict", branch, err)
		}
		var oe *outcome.Error
		if !errors.As(err, &oe) || oe.OpID != "op-"+branch || oe.Message != "branch is live already" {
			t.Fatalf("%s: outcome error %+v", branch, oe)
		}
		if res != conflict(workflows.CreateBranchInput{Graph: "g", Branch: branch, OpID: "op-" + branch}) {
			t.Fatalf("%s: result %+v, want the workflow's full result", branch, res)
		}
	}
}

// TestWait_InDoubt_ReturnsFromTheStatusQuery_AndWaitFinalWaitsThrough: a
// running create whose status says in_doubt returns in_doubt with the op id
// at once; WaitFinal waits for the definitive outcome.
func TestWait_InDoubt_ReturnsFromTheStatusQuery_AndWaitFinalWaitsThrough(t *testing.T) {
	s := newStubStack(t, func(w sdkworker.Worker) {
		registerCreate(w, func(ctx workflow.Context, in workflows.CreateBranchInput) (workflows.CreateBranchResult, error) {
			st := workflows.OperationStatus{Phase: "settle", Outcome: outcome.InDoubt, OpID: in.OpID, Native: "b.X", Pending: "ref put in doubt"}
			if err := workflow.SetQueryHandler(ctx, workflows.StatusQueryName, func() (workflows.OperationStatus, error) { return st, nil }); err != nil {
				return workflows.CreateBranchResult{}, err
			}
			_ = workflow.Sleep(ctx, 3*time.Second)
			return workflows.CreateBranchResult{Outcome: outcome.Created, OpID: in.OpID, Graph: in.Graph, Branch: in.Branch, Native: "b.X"}, nil
		})
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := s.client(Options{PollInterval: 50 * time.Millisecond})
	h, err := c.StartCreateBranch(ctx, CreateBranchRequest{Graph: "g", Branch: "doubt", IdempotencyKey: "op-1"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := h.Wait(ctx)
	if !errors.Is(err, outcome.ErrInDoubt) || res.Outcome != outcome.InDoubt || res.OpID != "op-1" || res.Native != "b.X" {
		t.Fatalf("wait: %+v, %v; want in_doubt with the op id", res, err)
	}
	res, err = h.WaitFinal(ctx)
	if err != nil || res.Outcome != outcome.Created {
		t.Fatalf("wait final: %+v, %v; want created", res, err)
	}
}

// TestWait_StatusQueryNeverAnswers_QueriesAreBoundedAndTheCallerIsTold: a
// workflow whose task is held cannot answer queries; each query gives up
// after QueryTimeout, the caller is told once, and the wait still ends when
// the workflow does.
func TestWait_StatusQueryNeverAnswers_QueriesAreBoundedAndTheCallerIsTold(t *testing.T) {
	s := newStubStack(t, func(w sdkworker.Worker) {
		registerCreate(w, func(ctx workflow.Context, in workflows.CreateBranchInput) (workflows.CreateBranchResult, error) {
			// No query handler, and a local activity that holds the task.
			lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: time.Minute})
			_ = workflow.ExecuteLocalActivity(lctx, func(context.Context) error { time.Sleep(22 * time.Second); return nil }).Get(ctx, nil)
			return workflows.CreateBranchResult{Outcome: outcome.Created, OpID: in.OpID, Graph: in.Graph, Branch: in.Branch}, nil
		})
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var mu sync.Mutex
	var notices []Notice
	c := s.client(Options{PollInterval: 100 * time.Millisecond, QueryTimeout: time.Second, Notify: func(n Notice) {
		mu.Lock()
		defer mu.Unlock()
		notices = append(notices, n)
	}})
	res, err := c.CreateBranch(ctx, CreateBranchRequest{Graph: "g", Branch: "held", IdempotencyKey: "op-held"})
	if err != nil || res.Outcome != outcome.Created {
		t.Fatalf("create: %+v, %v", res, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(notices) != 1 || notices[0].Kind != NoticeNoStatus || notices[0].OpID != "op-held" {
		t.Fatalf("notices %+v, want one no_status notice naming the operation", notices)
	}
}

// TestWait_NoWorker_TheCallerIsToldOnce: a workflow nobody polls for is
// named as such while the wait goes on.
func TestWait_NoWorker_TheCallerIsToldOnce(t *testing.T) {
	s := newStubStack(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	told := make(chan Notice, 4)
	c := s.client(Options{PollInterval: 200 * time.Millisecond, QueryTimeout: time.Second, Notify: func(n Notice) { told <- n }})
	h, err := c.StartCreateBranch(ctx, CreateBranchRequest{Graph: "g", Branch: "nobody"})
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := h.Wait(wctx); done <- err }()
	select {
	case n := <-told:
		if n.Kind != NoticeNoWorker || !strings.Contains(n.Message, s.queue) {
			t.Fatalf("notice %+v, want no_worker naming queue %s", n, s.queue)
		}
	case <-ctx.Done():
		t.Fatal("no notice within 40s")
	}
	wcancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("wait after cancel: %v", err)
	}
	_ = s.tc.TerminateWorkflow(context.Background(), h.WorkflowID, "", "test over")
}

// TestRootCause_RepeatedErrorChain_SaidOnceAndBriefly: a failure whose chain
// repeats one cause (a retried step's errors joined, say) is said once, in one
// short line, naming the step.
func TestRootCause_RepeatedErrorChain_SaidOnceAndBriefly(t *testing.T) {
	cause := `list refs: storage list: unavailable: dial tcp 127.0.0.1:9: connect: connection refused`
	var chain []string
	for range 40 {
		chain = append(chain, cause)
	}
	act := temporal.NewApplicationError(strings.Join(chain, ": "), "", true, nil)
	err := fmt.Errorf("mark: %w", act)
	got := rootCause(err)
	if strings.Count(got, "connection refused") != 1 || len(got) > 410 {
		t.Fatalf("root cause %q (%d bytes), want the cause once and briefly", got, len(got))
	}
	if dependencyOf(got) != "the store" {
		t.Fatalf("dependency of %q: %q, want the store", got, dependencyOf(got))
	}
}
