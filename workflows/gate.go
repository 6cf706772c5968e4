package workflows

import (
	"errors"
	"fmt"
	"slices"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/workflows/contract"
)

// A merge into a protected branch waits, after its plan, for the branch rule's checks
// and approvals (docs/merge-restore-tags.md, "Protected branches"). Checks run as child
// workflows in the user's own workers; approvals and rejections arrive as the
// graft.review update and are recorded in the ledger. While it waits the merge holds the
// pins of its inputs and records nothing else; it watches both heads, and a moved head
// re-plans: the checks run again on the new plan, and approvals of an older source head
// no longer count.

// ReviewUpdateName is the update a waiting merge takes a review by (contract.Review).
const ReviewUpdateName = "graft.review"

// Phases an operation reports in its status and in the ledger: PhasePlan while
// it reads the heads and plans; PhaseWaiting while a merge waits for its checks
// and approvals.
const (
	PhasePlan    = "plan"
	PhaseWaiting = "waiting"
)

// Timing of a waiting merge's watch of its heads (docs/workflows.md); tests lower them.
var (
	// GateWatchFirst is the first pause between two reads of a waiting merge's heads; it
	// doubles up to GateWatchMax.
	GateWatchFirst = 2 * time.Second
	GateWatchMax   = 5 * time.Minute
)

// Check states of contract.CheckState.
const (
	CheckRunning = "running"
	CheckPassed  = "passed" // contract.MergeWait.Cleared counts on it
	CheckFailed  = "failed"
)

// gate is a merge's wait for its target's rule, across re-plans.
type gate struct {
	r        *opRun
	in       MergeInput
	deadline time.Time // zero: none
	wait     contract.MergeWait
	reviews  []contract.Review
	// waiting: the merge waits for checks and approvals now (reviews are taken).
	waiting bool
	reviewC workflow.Channel
	// recorded is the summary the ledger has.
	recorded string
}

// newGate registers the review update and starts the deadline of in.WaitTimeout.
func newGate(ctx workflow.Context, r *opRun, in MergeInput) *gate {
	g := &gate{r: r, in: in, reviewC: workflow.NewBufferedChannel(ctx, 64)}
	if in.WaitTimeout > 0 {
		g.deadline = workflow.Now(ctx).Add(in.WaitTimeout)
		g.wait.Deadline = g.deadline.UTC().Format(time.RFC3339)
	}
	_ = workflow.SetUpdateHandlerWithOptions(ctx, ReviewUpdateName, g.review, workflow.UpdateHandlerOptions{
		Validator: func(ctx workflow.Context, rv contract.Review) error {
			switch {
			case rv.Reviewer == "":
				return temporal.NewApplicationError("a review names its reviewer", string(outcome.Invalid))
			case !g.waiting:
				return temporal.NewApplicationError("the merge is not waiting for reviews", string(outcome.Conflict))
			case rv.SourceHead != "" && rv.SourceHead != g.wait.SourceHead:
				return temporal.NewApplicationError(fmt.Sprintf("the merge would now merge source head %s, not the reviewed %s",
					g.wait.SourceHead, rv.SourceHead), string(outcome.Conflict))
			}
			return nil
		},
	})
	return g
}

// review records a review in the ledger and hands it to the wait; it returns the wait
// as it stands after the review.
func (g *gate) review(ctx workflow.Context, rv contract.Review) (contract.MergeWait, error) {
	rv.SourceHead, rv.At = g.wait.SourceHead, ""
	if err := g.r.step(ctx, "record review by "+rv.Reviewer, acts.RecordReview,
		activities.RecordReviewInput{OpID: g.r.owner.OpID, Review: rv}, &rv); err != nil {
		return g.wait, err
	}
	g.reviews = append(g.reviews, rv)
	g.recount()
	g.reviewC.Send(ctx, rv)
	return g.wait, nil
}

// recount counts the approvals of the planned source head.
func (g *gate) recount() {
	g.wait.Reviews, g.wait.Approvals = g.reviews, 0
	var seen []string
	for _, rv := range g.reviews {
		if rv.Approve && rv.SourceHead == g.wait.SourceHead && !slices.Contains(seen, rv.Reviewer) {
			seen = append(seen, rv.Reviewer)
			g.wait.Approvals++
		}
	}
}

// gateEnd is how a wait ended: cleared heads to commit, a re-plan, or an ending.
type gateEnd struct {
	cleared *activities.ClearedHeads
	end     *ending
}

// await waits until the plan is cleared, a head moves, or the merge is rejected.
func (g *gate) await(ctx workflow.Context, plan activities.PlanMergeResult) (gateEnd, error) {
	r := g.r
	g.wait.Round++
	g.wait.Rule, g.wait.SourceHead, g.wait.TargetHead = *plan.Gate, plan.SourceHead, plan.TargetHead
	g.wait.Checks = make([]contract.CheckState, len(plan.Gate.Checks))
	g.recount()
	cctx, cancelChecks := workflow.WithCancel(ctx)
	defer cancelChecks()
	sel := workflow.NewSelector(ctx)
	var failed *ending
	for i, c := range plan.Gate.Checks {
		id := fmt.Sprintf("graft/check/%s/%s/%d/%s", r.owner.OpID, r.owner.Run, g.wait.Round, c.Name)
		g.wait.Checks[i] = contract.CheckState{Name: c.Name, State: CheckRunning, WorkflowID: id}
		f := workflow.ExecuteChildWorkflow(workflow.WithChildOptions(cctx, workflow.ChildWorkflowOptions{
			WorkflowID: id, TaskQueue: c.TaskQueue, ParentClosePolicy: enumspb.PARENT_CLOSE_POLICY_REQUEST_CANCEL,
			StaticSummary: fmt.Sprintf("check %s of merge %s → %s (round %d)", c.Name, g.in.Source, g.in.Target, g.wait.Round),
		}), c.Name, contract.CheckInput{Graph: g.in.Graph, Locator: plan.Locator, OpID: r.owner.OpID, Check: c.Name,
			Source: g.in.Source, Target: g.in.Target, SourceHead: plan.SourceHead, TargetHead: plan.TargetHead,
			Bases: plan.Bases, Round: g.wait.Round, Tables: plan.Tables})
		sel.AddFuture(f, func(f workflow.Future) {
			var res contract.CheckResult
			err := f.Get(ctx, &res)
			st := &g.wait.Checks[i]
			switch {
			case err != nil:
				st.State, st.Message = CheckFailed, checkFailure(err)
			case res.Pass:
				st.State, st.Message = CheckPassed, res.Message
			default:
				st.State, st.Message = CheckFailed, res.Message
			}
			if st.State == CheckFailed && failed == nil {
				failed = &ending{out: outcome.Rejected, msg: fmt.Sprintf("check %s failed: %s", c.Name, st.Message)}
			}
		})
	}
	sel.AddReceive(g.reviewC, func(c workflow.ReceiveChannel, _ bool) {
		var rv contract.Review
		c.Receive(ctx, &rv)
		if !rv.Approve && failed == nil {
			failed = &ending{out: outcome.Rejected, msg: fmt.Sprintf("rejected by %s: %s", rv.Reviewer, rv.Comment)}
		}
	})
	if !g.deadline.IsZero() {
		sel.AddFuture(workflow.NewTimerWithOptions(cctx, max(g.deadline.Sub(workflow.Now(ctx)), time.Millisecond), workflow.TimerOptions{Summary: "wait deadline"}),
			func(f workflow.Future) {
				if f.Get(ctx, nil) == nil && failed == nil {
					failed = &ending{out: outcome.Rejected, msg: fmt.Sprintf("the wait deadline %s passed while waiting for %s",
						g.wait.Deadline, g.wait.Summary())}
				}
			})
	}
	// The merge's end while it waits: a cancellation is an operator's rejection.
	r.cancelEnding = &ending{out: outcome.Rejected, msg: "cancelled while waiting; nothing was written"}
	g.waiting = true
	e, err := g.watch(ctx, cctx, sel, plan, &failed)
	g.waiting = false
	if err == nil {
		r.cancelEnding = nil
	}
	if err == nil && e.end == nil {
		// Cleared or moved: the merge plans again, and is no longer listed as waiting.
		g.recorded = ""
		err = r.step(ctx, "record planning", acts.Progress, activities.ProgressInput{Owner: r.owner, Phase: PhasePlan}, nil)
	}
	return e, err
}

// watch runs a wait's events until one ends it, reading the heads on a doubling pause;
// cctx ends with the wait.
func (g *gate) watch(ctx, cctx workflow.Context, sel workflow.Selector, plan activities.PlanMergeResult, failed **ending) (gateEnd, error) {
	r := g.r
	pause, timing, woke := GateWatchFirst, false, false
	var heads activities.MergeHeadsResult
	for {
		if err := g.show(ctx); err != nil {
			return gateEnd{}, err
		}
		switch {
		case *failed != nil:
			return gateEnd{end: *failed}, nil
		case heads.Outcome != "":
			return gateEnd{end: &ending{out: heads.Outcome, msg: heads.Message}}, nil
		case heads.SourceHead != "" && (heads.SourceHead != plan.SourceHead || heads.TargetHead != plan.TargetHead):
			r.log(ctx, "graft merge: a head moved while waiting; re-planning", "source_head", heads.SourceHead, "target_head", heads.TargetHead)
			return gateEnd{}, nil
		case g.wait.Cleared():
			return gateEnd{cleared: &activities.ClearedHeads{SourceHead: plan.SourceHead, TargetHead: plan.TargetHead}}, nil
		}
		if !timing {
			// One pause at a time: it ends the wait's Select when no other event does first.
			timing = true
			sel.AddFuture(workflow.NewTimerWithOptions(cctx, pause, workflow.TimerOptions{Summary: "pause before reading the heads"}),
				func(workflow.Future) { timing, woke = false, true })
		}
		woke = false
		sel.Select(ctx)
		if ctx.Err() != nil {
			return gateEnd{}, temporal.NewCanceledError()
		}
		if !woke {
			continue
		}
		pause = min(2*pause, GateWatchMax)
		if err := r.step(ctx, "read the heads of "+g.in.Source+" and "+g.in.Target, acts.MergeHeads,
			activities.MergeHeadsInput{Graph: g.in.Graph, Source: g.in.Source, Target: g.in.Target}, &heads); err != nil {
			return gateEnd{}, err
		}
	}
}

// show reports what the merge waits for: status query, UI details and the ledger (which
// `graft op list --waiting` reads).
func (g *gate) show(ctx workflow.Context) error {
	r := g.r
	w := g.wait
	w.Checks = slices.Clone(w.Checks)
	r.status.Wait = &w
	summary := w.Summary()
	r.setPhase(ctx, PhaseWaiting, summary)
	if summary == g.recorded {
		return nil
	}
	g.recorded = summary
	return r.step(ctx, "record waiting: "+summary, acts.Progress, activities.ProgressInput{Owner: r.owner, Phase: PhaseWaiting, Waiting: summary}, nil)
}

// checkFailure says why a check workflow ended without a result, for a person.
func checkFailure(err error) string {
	var app *temporal.ApplicationError
	var term *temporal.TerminatedError
	var timeout *temporal.TimeoutError
	var canceled *temporal.CanceledError
	switch {
	case errors.As(err, &app):
		return app.Error()
	case errors.As(err, &term):
		return "the check workflow was terminated"
	case errors.As(err, &timeout):
		return "the check workflow timed out"
	case errors.As(err, &canceled):
		return "the check workflow was cancelled"
	}
	return err.Error()
}
