package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	sdkclient "go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/internal/catalog/catalogtest"
	"github.com/graftworks/graft/internal/testenv"
	"github.com/graftworks/graft/storage/s3"
	"github.com/graftworks/graft/worker"
	"github.com/graftworks/graft/workflows"
)

// TestStoreDown_BranchCreate_SaysOnceWhatIsUnreachable_ExitsUnavailablePromptly is
// the operator's story with the S3 server stopped: `graft branch create`
// says once, briefly, that the store does not answer and that it waits; when the
// create's first step gives up, the workflow fails and the command returns at once —
// exit 9, one short message naming the store, and, since nothing was recorded, a next
// step that does not point at a ledger row that does not exist.
// storeDown starts a worker whose store is an S3 endpoint nothing listens on (the S3
// server stopped), with Temporal and the ledger up, and returns the CLI configured for it,
// the worker's Temporal client and the dead endpoint.
func storeDown(t *testing.T) (*inProcess, sdkclient.Client, string) {
	t.Helper()
	ts := testenv.Temporal(t)
	cat := catalogtest.Open(t)
	dead := "http://" + closedAddr(t) // where the stopped S3 server listened
	store, err := s3.New(context.Background(), s3.Config{Endpoint: dead, Bucket: "graft", PathStyle: true,
		AccessKeyID: "k", SecretAccessKey: "s", RequestTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	quiet := sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	tc, err := sdkclient.Dial(sdkclient.Options{HostPort: ts.HostPort, Namespace: ts.Namespace, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)
	queue := fmt.Sprintf("graft-storedown-%d", time.Now().UnixNano())
	w := worker.New(tc, queue, &activities.Activities{Store: store, Catalog: cat}, sdkworker.Options{})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return &inProcess{env: map[string]string{
		"GRAFT_TEMPORAL_ADDRESS": ts.HostPort, "GRAFT_NAMESPACE": ts.Namespace, "GRAFT_TASK_QUEUE": queue,
		"GRAFT_S3_ENDPOINT": dead, "GRAFT_S3_BUCKET": "graft", "GRAFT_S3_PATH_STYLE": "true", "GRAFT_DIAL_TIMEOUT": "3s",
		"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s",
		"DATABASE_URL": catalogtest.DatabaseURL(), "GRAFT_DB_SCHEMA": cat.Schema(),
	}}, tc, dead
}

func TestStoreDown_BranchCreate_SaysOnceWhatIsUnreachable_ExitsUnavailablePromptly(t *testing.T) {
	// Not parallel: the create gives up once its first step's budget is spent, and the
	// test lowers that budget (a package variable the in-process worker reads) from two
	// minutes to 30 seconds while no other test runs.
	saved := workflows.BeforeEffectBudget
	workflows.BeforeEffectBudget = 30 * time.Second
	t.Cleanup(func() { workflows.BeforeEffectBudget = saved })
	p, tc, dead := storeDown(t)

	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	began := time.Now()
	r := p.runCtx(ctx, t, "branch", "create", "g", "b")
	took := time.Since(began)
	if r.code != 9 {
		t.Fatalf("exit %d after %s, want 9 (unavailable)\n%s", r.code, took, r)
	}
	if n := strings.Count(r.stderr, "graft: waiting:"); n != 1 || !strings.Contains(r.stderr, "the store s3://graft at "+dead+" does not answer") {
		t.Fatalf("want the wait told once, naming the store:\n%s", r.stderr)
	}
	final := r // the report after the notice
	final.stderr = r.stderr[strings.Index(r.stderr, "graft: unavailable: "):]
	wantText(t, final, 9, "unavailable", "the worker could not reach the store", "connection refused",
		"nothing was recorded", "once the store answers the worker")
	if strings.Contains(r.stderr, "graft op list") || strings.Contains(r.stderr, "graft op show") {
		t.Fatalf("the next step points at a ledger row that does not exist:\n%s", r.stderr)
	}
	if len(r.stderr) > 1200 || strings.Count(r.stderr, "connection refused") > 1 {
		t.Fatalf("stderr is not brief (%d bytes):\n%s", len(r.stderr), r.stderr)
	}
	// The workflow gives up after its first step's budget; the command returns right
	// after, not minutes later.
	desc, err := tc.DescribeWorkflowExecution(ctx, "graft/create-branch/g/b", "")
	if err != nil {
		t.Fatal(err)
	}
	closed := desc.GetWorkflowExecutionInfo().GetCloseTime().AsTime()
	if lag := time.Since(closed); lag > 15*time.Second {
		t.Fatalf("the command returned %s after the workflow failed", lag)
	}
}

// runUntilToldThenInterrupt runs a command that waits for workflowID, until it tells the
// operator why it waits (its "graft: waiting:" notice) and the step it names has been
// retried three times more — long enough for a notice told more than once to show — then
// interrupts it as Ctrl-C would, and returns what it printed and its exit code. A command
// that never tells fails the test when ctx ends. The workflow, still retrying on the
// store, is terminated when the test ends.
func (p *inProcess) runUntilToldThenInterrupt(ctx context.Context, t *testing.T, tc sdkclient.Client, workflowID string, args ...string) result {
	t.Helper()
	t.Cleanup(func() { _ = tc.TerminateWorkflow(context.Background(), workflowID, "", "the test ends") })
	cctx, interrupt := context.WithCancel(ctx)
	defer interrupt()
	var stdout, stderr syncBuffer
	exited := make(chan int, 1)
	go func() { exited <- Execute(cctx, args, envOf(p.env), &stdout, &stderr) }()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !strings.Contains(stderr.String(), "graft: waiting:") {
		select {
		case code := <-exited:
			t.Fatalf("%v ended (exit %d) without saying why it waited:\n%s", args, code, stderr.String())
		case <-ctx.Done():
			t.Fatalf("%v never said why it waits:\n%s", args, stderr.String())
		case <-tick.C:
		}
	}
	m := regexp.MustCompile(`attempt (\d+)`).FindStringSubmatch(stderr.String())
	if m == nil {
		t.Fatalf("the notice names no attempt:\n%s", stderr.String())
	}
	told, _ := strconv.Atoi(m[1])
	for attempt := int32(0); attempt < int32(told)+3; {
		select {
		case code := <-exited:
			t.Fatalf("%v ended (exit %d) while its step was retrying:\n%s", args, code, stderr.String())
		case <-ctx.Done():
			t.Fatalf("the step of %s was not retried three times more:\n%s", workflowID, stderr.String())
		case <-tick.C:
		}
		if d, err := tc.DescribeWorkflowExecution(ctx, workflowID, ""); err == nil {
			for _, pa := range d.GetPendingActivities() {
				attempt = max(attempt, pa.GetAttempt())
			}
		}
	}
	interrupt() // the operator's Ctrl-C
	select {
	case code := <-exited:
		return result{args: args, stdout: stdout.String(), stderr: stderr.String(), code: code}
	case <-ctx.Done():
		t.Fatalf("%v did not return once interrupted:\n%s", args, stderr.String())
	}
	return result{}
}

// messageOf is what a command told the operator on stderr: its graft: lines and their
// continuations, without the progress lines a long command draws (cmd/starter/progress.go).
func messageOf(stderr string) string {
	var b strings.Builder
	for _, line := range strings.SplitAfter(stderr, "\n") {
		if strings.HasPrefix(line, "graft: ") || strings.HasPrefix(line, "  ") || strings.HasPrefix(line, "next: ") {
			b.WriteString(line)
		}
	}
	return b.String()
}

// wantToldOnceBriefly checks that msg names the unreachable store once, says the command
// waits for the step retrying on it, and is brief: one notice, the error chain once.
func wantToldOnceBriefly(t *testing.T, r result, msg, step string) {
	t.Helper()
	if n := strings.Count(msg, "graft: waiting:"); n != 1 {
		t.Fatalf("the wait is told %d times, want once:\n%s", n, r)
	}
	for _, f := range []string{"graft: waiting: the worker cannot reach the store (" + step, "connection refused",
		"the step keeps retrying and the operation waits for it", "Ctrl-C stops waiting; the operation keeps running in Temporal"} {
		if !strings.Contains(msg, f) {
			t.Fatalf("the notice lacks %q:\n%s", f, r)
		}
	}
	if len(msg) > 1200 || strings.Count(msg, "connection refused") > 1 || strings.Count(msg, "storage get") > 1 {
		t.Fatalf("the message is not brief (%d bytes, the error chain repeated):\n%s", len(msg), r)
	}
}

// TestStoreDown_CleanupRunWait_SaysOnceTheStoreIsUnreachableAndThatItWaits is `graft
// cleanup run --wait` with the S3 server stopped: its first
// step reads the graph and retries until the store answers, so the command says once,
// briefly, that the worker cannot reach the store and that it waits; interrupted, it
// exits 1 (docs/outcomes.md: an interrupted command) saying that nothing was recorded yet
// and how to follow the run.
func TestStoreDown_CleanupRunWait_SaysOnceTheStoreIsUnreachableAndThatItWaits(t *testing.T) {
	t.Parallel()
	p, tc, _ := storeDown(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	r := p.runUntilToldThenInterrupt(ctx, t, tc, "graft/cleanup/g", "cleanup", "run", "g", "--keep-newest", "1", "--wait")
	msg := messageOf(r.stderr)
	wantToldOnceBriefly(t, r, msg, "CleanupBegin")
	final := r
	final.stderr = msg[strings.Index(msg, "graft: failure: "):]
	wantText(t, final, 1, "failure", "interrupted", "has recorded nothing yet", "graft op wait ")
}

// TestStoreDown_GraphInit_SaysOnceTheStoreIsUnreachableAndThatItWaits is `graft graph
// init` with the S3 server stopped: the init's one step runs until the store answers (its
// puts may land), so the command says once, briefly, that the worker cannot reach the
// store and that it waits — never silence; interrupted, it exits 1 (docs/outcomes.md),
// says that nothing was recorded yet (the step checks the graph's prefix before it records
// the operation) and names the operation to follow with `graft op wait`.
func TestStoreDown_GraphInit_SaysOnceTheStoreIsUnreachableAndThatItWaits(t *testing.T) {
	t.Parallel()
	p, tc, _ := storeDown(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	r := p.runUntilToldThenInterrupt(ctx, t, tc, "graft/init-graph/g", "graph", "init", "g")
	msg := messageOf(r.stderr)
	wantToldOnceBriefly(t, r, msg, "InitGraph")
	final := r
	final.stderr = msg[strings.Index(msg, "graft: failure: "):]
	wantText(t, final, 1, "failure", "interrupted", "has recorded nothing yet", "`graft op wait graft/init-graph/g`")
}
