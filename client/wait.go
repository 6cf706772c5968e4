package client

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	sdkclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/workflows"
)

// How a wait paces itself. The result itself arrives through one long poll
// (WorkflowRun.Get); these bound the status queries and descriptions asked
// beside it.
const (
	// maxPollInterval caps the backoff between status queries.
	maxPollInterval = 5 * time.Second
	// describeEvery spaces the descriptions that look for a reason to tell
	// the caller about (no worker, a step retrying).
	describeEvery = 5 * time.Second
	// noWorkerAfter is how long a workflow task may stay unpicked before the
	// task queue's pollers are looked at.
	noWorkerAfter = 4 * time.Second
	// noStatusAfter is how long status queries may fail in a row before the
	// caller is told the workflow does not answer.
	noStatusAfter = 15 * time.Second
	// retryingAfter is the attempt from which a pending activity's last
	// failure is worth telling.
	retryingAfter = 3
)

// Status is what a running operation's graft.status query answers: the union
// of every operation kind's status (workflows.CreateBranchStatus,
// workflows.OperationStatus, workflows.WriteTableStatus). Fields a kind does
// not report are empty.
type Status struct {
	// Phase is the step the operation is in (prepare, clone, publish,
	// settle, …: docs/workflows.md).
	Phase string `json:"phase"`
	// Outcome is in_doubt while a write settles, "" while none is known.
	Outcome outcome.Outcome `json:"outcome,omitempty"`
	OpID    string          `json:"op_id"`
	// Native is a create's incarnation; Commit the commit a write, merge or
	// restore is putting; Version a table write's version.
	Native  string `json:"native,omitempty"`
	Commit  string `json:"commit,omitempty"`
	Version string `json:"version,omitempty"`
	// Pending says what the operation waits for, for a person.
	Pending        string `json:"pending,omitempty"`
	SettleAttempts int    `json:"settle_attempts,omitempty"`
}

// InDoubt reports whether the status says a write may still land.
func (s Status) InDoubt() bool { return s.Outcome == outcome.InDoubt }

// Notice tells a waiting caller why a wait is taking long. Each kind is told
// at most once per wait (Options.Notify).
type Notice struct {
	WorkflowID string
	// OpID is the operation's ledger id, "" when the wait has none.
	OpID string
	// Kind is NoticeNoWorker, NoticeRetrying or NoticeNoStatus.
	Kind string
	// Dependency names what a retrying step cannot reach ("the store",
	// "Postgres"), when its failure says so; "" otherwise.
	Dependency string
	// Message says it in a line, for a person.
	Message string
}

// The kinds of Notice.
const (
	// NoticeNoWorker: nothing polls the task queue, so the workflow does not start.
	NoticeNoWorker = "no_worker"
	// NoticeRetrying: a step keeps failing and is being retried.
	NoticeRetrying = "retrying"
	// NoticeNoStatus: the workflow does not answer its status query (a step
	// holds its task, typically while a dependency does not answer the worker).
	NoticeNoStatus = "no_status"
)

// WorkflowError is an operation whose workflow ended without a definitive
// outcome: it failed on an infrastructure error, timed out, or was
// terminated or cancelled. A definitive outcome other than success is an
// *outcome.Error instead.
type WorkflowError struct {
	WorkflowID, RunID string
	// OpID is the operation's ledger id, "" when unknown.
	OpID string
	// Status is failed, timed_out, terminated or canceled.
	Status string
	// Cause is the innermost failure's message, in one line.
	Cause string
	// Dependency names what could not be reached ("the store", "Postgres")
	// when the cause says so; "" otherwise.
	Dependency string
	// Err is the whole failure as the SDK reported it.
	Err error
}

func (e *WorkflowError) Error() string {
	if e.Cause == "" {
		return fmt.Sprintf("workflow %s %s", e.WorkflowID, e.Status)
	}
	return fmt.Sprintf("workflow %s %s: %s", e.WorkflowID, e.Status, e.Cause)
}

func (e *WorkflowError) Unwrap() error { return e.Err }

// waitTarget is the workflow a wait follows.
type waitTarget struct {
	workflowID, runID, opID string
	run                     sdkclient.WorkflowRun
}

// await follows w.run until its workflow closes and returns its result:
// from the completion, or — a definitive outcome other than success, contract
// 2 of docs/workflows.md — from the failure's ApplicationError, whose first
// detail is the result. An infrastructure failure is a *WorkflowError at
// once. When early is set it is asked every poll, under Options.QueryTimeout,
// and a true answer ends the wait with its result (an operation known to be in
// doubt); its error says the workflow did not answer. The result arrives through one long poll; status queries back off to
// maxPollInterval, and Options.Notify hears why a long wait is long.
func await[R any](ctx context.Context, c *Client, w waitTarget, early func(context.Context) (R, bool, error)) (R, error) {
	var zero R
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type answer struct {
		res R
		err error
	}
	done := make(chan answer, 1)
	go func() {
		var res R
		err := w.run.Get(gctx, &res)
		done <- answer{res, err}
	}()

	watch := c.newWatcher(w)
	interval := c.opts.PollInterval
	timer := time.NewTimer(interval)
	defer timer.Stop()
	for {
		select {
		case a := <-done:
			if a.err == nil {
				return a.res, nil
			}
			if res, ok := resultOfFailure[R](a.err); ok {
				return res, nil
			}
			if ctx.Err() != nil {
				return zero, ctx.Err()
			}
			return zero, workflowError(w, a.err)
		case <-ctx.Done():
			return zero, ctx.Err()
		case <-timer.C:
		}
		if early != nil {
			qctx, qcancel := context.WithTimeout(ctx, c.opts.QueryTimeout)
			res, stop, qerr := early(qctx)
			qcancel()
			if stop {
				return res, nil
			}
			watch.queried(ctx, qerr == nil)
		}
		watch.look(ctx)
		interval = min(interval*2, max(maxPollInterval, c.opts.PollInterval))
		timer.Reset(interval)
	}
}

// resultOfFailure decodes a workflow failure whose ApplicationError is a
// definitive outcome: Type an outcome string, first detail the result.
func resultOfFailure[R any](err error) (R, bool) {
	var res R
	var wee *temporal.WorkflowExecutionError
	if !errors.As(err, &wee) {
		return res, false
	}
	ae, ok := wee.Unwrap().(*temporal.ApplicationError) // the workflow's own failure, not a step's
	if !ok {
		return res, false
	}
	if o := outcome.Outcome(ae.Type()); !o.Valid() || !ae.HasDetails() {
		return res, false
	}
	if ae.Details(&res) != nil {
		return res, false
	}
	return res, true
}

// workflowError describes an infrastructure failure of w's workflow briefly.
func workflowError(w waitTarget, err error) error {
	e := &WorkflowError{WorkflowID: w.workflowID, RunID: w.runID, OpID: w.opID, Status: "failed", Err: err}
	var (
		te *temporal.TerminatedError
		ce *temporal.CanceledError
		to *temporal.TimeoutError
	)
	switch {
	case errors.As(err, &te):
		e.Status = "terminated"
	case errors.As(err, &ce):
		e.Status = "canceled"
	case errors.As(err, &to):
		e.Status, e.Cause = "timed_out", to.Error()
	}
	if e.Status == "failed" {
		e.Cause = rootCause(err)
		e.Dependency = dependencyOf(e.Cause)
	}
	return e
}

// rootCause is the failed step's own message — the error its activity
// returned, without the SDK's wrapping — named by the step; or the
// workflow's own failure message when no step failed; or err's text.
func rootCause(err error) string {
	var act *temporal.ActivityError
	if errors.As(err, &act) {
		msg := act.Unwrap().Error()
		if ae, ok := act.Unwrap().(*temporal.ApplicationError); ok && ae.Message() != "" {
			msg = ae.Message()
		}
		if act.ActivityType() != nil && act.ActivityType().GetName() != "" {
			msg = act.ActivityType().GetName() + ": " + msg
		}
		return oneLine(msg)
	}
	var ae *temporal.ApplicationError
	if errors.As(err, &ae) && ae.Message() != "" {
		return oneLine(ae.Message())
	}
	return oneLine(err.Error())
}

// oneLine folds a message onto one line and drops a repeated tail: an error
// chain that names the same cause twice says it once.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	parts := strings.Split(s, ": ")
	out := parts[:0]
	seen := map[string]bool{}
	for _, p := range parts {
		if seen[p] {
			continue
		}
		seen[p] = true
		out = append(out, p)
	}
	s = strings.Join(out, ": ")
	const maxLen = 400
	if len(s) > maxLen {
		s = s[:maxLen] + "…"
	}
	return s
}

var storageUnavailable = regexp.MustCompile(`storage(: | [a-z_]+( "[^"]*")?: )unavailable`)

// dependencyOf names the dependency a failure message says could not be
// reached, or "".
func dependencyOf(msg string) string {
	switch {
	case storageUnavailable.MatchString(msg):
		return "the store"
	case strings.Contains(msg, "postgres unavailable"):
		return "Postgres"
	}
	return ""
}

// watcher looks, while a wait goes on, for a reason to tell the caller: no
// worker polling, a step retrying, no answer to the status query.
type watcher struct {
	c          *Client
	w          waitTarget
	told       map[string]bool
	lastLook   time.Time
	failingFor time.Time // first of the current run of failed queries
	began      time.Time
}

func (c *Client) newWatcher(w waitTarget) *watcher {
	return &watcher{c: c, w: w, told: map[string]bool{}, began: time.Now()}
}

func (wt *watcher) tell(n Notice) {
	if wt.c.opts.Notify == nil || wt.told[n.Kind] {
		return
	}
	wt.told[n.Kind] = true
	n.WorkflowID, n.OpID = wt.w.workflowID, wt.w.opID
	wt.c.opts.Notify(n)
}

// queried records whether the last status query was answered.
func (wt *watcher) queried(ctx context.Context, answered bool) {
	if answered {
		wt.failingFor = time.Time{}
		return
	}
	if wt.failingFor.IsZero() {
		wt.failingFor = time.Now()
	}
	// No worker explains the silence better, once told.
	if time.Since(wt.failingFor) >= noStatusAfter && ctx.Err() == nil && !wt.told[NoticeNoWorker] {
		wt.tell(Notice{Kind: NoticeNoStatus, Message: "the workflow does not answer its status query: one of its steps holds " +
			"its task, typically while storage or Postgres does not answer the worker; still waiting for it to end"})
	}
}

// look describes the workflow now and then and tells what it finds.
func (wt *watcher) look(ctx context.Context) {
	if wt.c.opts.Notify == nil || time.Since(wt.lastLook) < describeEvery || time.Since(wt.began) < describeEvery {
		return
	}
	wt.lastLook = time.Now()
	dctx, cancel := context.WithTimeout(ctx, wt.c.opts.QueryTimeout)
	defer cancel()
	desc, err := wt.c.tc.DescribeWorkflowExecution(dctx, wt.w.workflowID, "")
	if err != nil {
		return
	}
	if wft := desc.GetPendingWorkflowTask(); wft != nil && wft.GetState() == enumspb.PENDING_WORKFLOW_TASK_STATE_SCHEDULED &&
		wft.GetScheduledTime() != nil && time.Since(wft.GetScheduledTime().AsTime()) > noWorkerAfter {
		queue := desc.GetExecutionConfig().GetTaskQueue().GetName()
		tq, err := wt.c.tc.DescribeTaskQueue(dctx, queue, enumspb.TASK_QUEUE_TYPE_WORKFLOW)
		if err == nil && len(tq.GetPollers()) == 0 {
			wt.tell(Notice{Kind: NoticeNoWorker, Message: fmt.Sprintf(
				"no graft worker polls task queue %q: the operation has not started; still waiting for a worker (graft-worker run, or graft dev)", queue)})
		}
	}
	for _, pa := range desc.GetPendingActivities() {
		if pa.GetAttempt() < retryingAfter || pa.GetLastFailure() == nil {
			continue
		}
		cause := oneLine(pa.GetLastFailure().GetMessage())
		dep := dependencyOf(cause)
		what := "a step keeps failing"
		if dep != "" {
			what = "the worker cannot reach " + dep
		}
		wt.tell(Notice{Kind: NoticeRetrying, Dependency: dep, Message: fmt.Sprintf("%s (%s, attempt %d: %s); the step keeps retrying and the operation waits for it",
			what, pa.GetActivityType().GetName(), pa.GetAttempt(), cause)})
		return
	}
}

// queryStatus asks a workflow's graft.status query, bounded by Options.QueryTimeout.
func (c *Client) queryStatus(ctx context.Context, workflowID, runID string, into any) error {
	qctx, cancel := context.WithTimeout(ctx, c.opts.QueryTimeout)
	defer cancel()
	v, err := c.tc.QueryWorkflow(qctx, workflowID, runID, workflows.StatusQueryName)
	if err != nil {
		return fmt.Errorf("query %s: %w", workflowID, err)
	}
	return v.Get(into)
}

// Status asks a running operation's workflow which phase it is in, bounded by
// Options.QueryTimeout. runID "" asks the latest run.
func (c *Client) Status(ctx context.Context, workflowID, runID string) (Status, error) {
	var st Status
	err := c.queryStatus(ctx, workflowID, runID, &st)
	return st, err
}
