package client

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/workflows"
)

// How a wait paces the status queries and descriptions it asks beside the one long poll
// (WorkflowRun.Get) that brings the result.
const (
	maxPollInterval = 5 * time.Second  // cap of the backoff between status queries
	describeEvery   = 5 * time.Second  // between descriptions looking for a Notice
	noWorkerAfter   = 4 * time.Second  // a workflow task unpicked this long: look at the pollers
	noStatusAfter   = 15 * time.Second // status queries failing this long: NoticeNoStatus
	retryingAfter   = 3                // the attempt from which a step's failure is told
)

// Status is what a running operation's graft.status query answers.
type Status = workflows.OperationStatus

// Notice tells a waiting caller why a wait is taking long (Options.Notify).
type Notice struct {
	WorkflowID string
	// OpID is the operation's ledger id, "" when the wait has none.
	OpID string
	// Kind is NoticeNoWorker, NoticeRetrying or NoticeNoStatus.
	Kind string
	// Dependency names what a retrying step cannot reach ("the store", "Postgres"), or "".
	Dependency string
	// Message says it in a line, for a person.
	Message string
}

// The kinds of Notice.
const (
	NoticeNoWorker = "no_worker" // nothing polls the task queue, so the workflow does not start
	NoticeRetrying = "retrying"  // a step keeps failing and is being retried
	// NoticeNoStatus: the workflow does not answer its status query (a step holds its
	// task, typically while a dependency does not answer the worker).
	NoticeNoStatus = "no_status"
)

// WorkflowError is an operation whose workflow ended without a definitive outcome: it
// failed on an infrastructure error, timed out, or was terminated or cancelled.
type WorkflowError struct {
	WorkflowID, RunID string
	// OpID is the operation's ledger id, "" when unknown.
	OpID string
	// Status is failed, timed_out, terminated or canceled.
	Status string
	// Cause is the innermost failure's message, in one line.
	Cause string
	// Dependency names what could not be reached ("the store", "Postgres"), or "".
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

// await follows h's run until its workflow closes and returns its result: from the
// completion, or — a definitive outcome other than success, contract 2 of
// docs/workflows.md — from the failure's ApplicationError, whose first detail is the
// result. An infrastructure failure is a *WorkflowError. With inDoubt set, every poll
// asks the workflow's status: an in-doubt one ends the wait with inDoubt's result.
func (h *OperationHandle[R]) await(ctx context.Context, inDoubt func(Status) R) (R, error) {
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
		err := h.run.Get(gctx, &res)
		done <- answer{res, err}
	}()

	c := h.c
	watch := &watcher{c: c, workflowID: h.WorkflowID, opID: h.OpID, told: map[string]bool{}, began: time.Now()}
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
			return zero, workflowError(&WorkflowError{WorkflowID: h.WorkflowID, RunID: h.RunID, OpID: h.OpID}, a.err)
		case <-ctx.Done():
			return zero, ctx.Err()
		case <-timer.C:
		}
		if inDoubt != nil {
			st, qerr := h.Status(ctx)
			if qerr == nil && st.InDoubt() {
				return inDoubt(st), nil
			}
			watch.queried(ctx, qerr == nil)
		}
		watch.look(ctx)
		interval = min(interval*2, max(maxPollInterval, c.opts.PollInterval))
		timer.Reset(interval)
	}
}

// resultOfFailure decodes a workflow failure whose ApplicationError is a definitive
// outcome: Type an outcome string, first detail the result.
func resultOfFailure[R any](err error) (R, bool) {
	var res R
	var wee *temporal.WorkflowExecutionError
	if !errors.As(err, &wee) {
		return res, false
	}
	ae, ok := wee.Unwrap().(*temporal.ApplicationError) // the workflow's own failure, not a step's
	if !ok || !outcome.Outcome(ae.Type()).Valid() || !ae.HasDetails() || ae.Details(&res) != nil {
		return res, false
	}
	return res, true
}

// workflowError fills e, which names the run, from the failure err. The run timed
// out only when its own failure is a timeout: a step that timed out, its attempts
// spent, failed the run, and the step is named as the cause.
func workflowError(e *WorkflowError, err error) error {
	e.Status, e.Err = "failed", err
	own := err
	var wee *temporal.WorkflowExecutionError
	if errors.As(err, &wee) {
		own = wee.Unwrap()
	}
	var (
		te *temporal.TerminatedError
		ce *temporal.CanceledError
	)
	to, timedOut := own.(*temporal.TimeoutError)
	switch {
	case errors.As(err, &te):
		e.Status = "terminated"
	case errors.As(err, &ce):
		e.Status = "canceled"
	case timedOut:
		e.Status, e.Cause = "timed_out", to.Error()
	default:
		e.Cause = rootCause(err)
		e.Dependency = dependencyOf(e.Cause)
	}
	return e
}

// rootCause is the failed step's own message, without the SDK's wrapping, named by the
// step; or the workflow's own failure message when no step failed; or err's text.
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

// oneLine folds a message onto one line and drops repeated parts: an error chain that
// names the same cause twice says it once.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	var parts []string
	for _, p := range strings.Split(s, ": ") {
		if !slices.Contains(parts, p) {
			parts = append(parts, p)
		}
	}
	s = strings.Join(parts, ": ")
	const maxLen = 400
	if len(s) > maxLen {
		s = s[:maxLen] + "…"
	}
	return s
}

var storageUnavailable = regexp.MustCompile(`storage(: | [a-z_]+( "[^"]*")?: )unavailable`)

// dependencyOf names the dependency a failure message says could not be reached, or "".
func dependencyOf(msg string) string {
	switch {
	case storageUnavailable.MatchString(msg):
		return "the store"
	case strings.Contains(msg, "postgres unavailable"):
		return "Postgres"
	}
	return ""
}

// watcher looks, while a wait goes on, for a Notice to tell the caller.
type watcher struct {
	c          *Client
	workflowID string
	opID       string
	told       map[string]bool
	lastLook   time.Time
	failingFor time.Time // first of the current run of failed queries
	began      time.Time
}

func (wt *watcher) tell(n Notice) {
	if wt.c.opts.Notify == nil || wt.told[n.Kind] {
		return
	}
	wt.told[n.Kind] = true
	n.WorkflowID, n.OpID = wt.workflowID, wt.opID
	wt.c.opts.Notify(n)
}

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

func (wt *watcher) look(ctx context.Context) {
	if wt.c.opts.Notify == nil || time.Since(wt.lastLook) < describeEvery || time.Since(wt.began) < describeEvery {
		return
	}
	wt.lastLook = time.Now()
	dctx, cancel := context.WithTimeout(ctx, wt.c.opts.QueryTimeout)
	defer cancel()
	desc, err := wt.c.tc.DescribeWorkflowExecution(dctx, wt.workflowID, "")
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

// query asks a workflow's query name into v, bounded by Options.QueryTimeout.
func (c *Client) query(ctx context.Context, workflowID, runID, name string, v any) error {
	qctx, cancel := context.WithTimeout(ctx, c.opts.QueryTimeout)
	defer cancel()
	res, err := c.tc.QueryWorkflow(qctx, workflowID, runID, name)
	if err != nil {
		return fmt.Errorf("query %s: %w", workflowID, err)
	}
	return res.Get(v)
}

// Status asks a running operation's workflow its phase, bounded by Options.QueryTimeout;
// runID "" asks the latest run.
func (c *Client) Status(ctx context.Context, workflowID, runID string) (Status, error) {
	var st Status
	err := c.query(ctx, workflowID, runID, workflows.StatusQueryName, &st)
	return st, err
}
