package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/graftworks/graft/activities"
)

// Step timing the kernel applies to every step (docs/workflows.md); tests of long stalls
// lower them.
var (
	// StepTimeout bounds one attempt of a step (its StartToCloseTimeout).
	StepTimeout = 30 * time.Second
	// BeforeEffectBudget bounds a step that precedes every storage effect, retries included.
	BeforeEffectBudget = 2 * time.Minute
	// FastPathBudget bounds the local-activity fast path of an after-effect step, after
	// which the step continues as an ordinary activity with no total deadline.
	FastPathBudget = 2 * time.Minute
)

// acts names the activities a workflow runs, by method: a typed nil, whose methods
// workflow code never calls itself.
var acts *activities.Activities

// untilAnswered retries a step until the store and the ledger answer: a step that may
// follow a storage effect is never given up, or the operation would be left half-done.
var untilAnswered = &temporal.RetryPolicy{InitialInterval: 100 * time.Millisecond, BackoffCoefficient: 2,
	MaximumInterval: 30 * time.Second}

// localStep runs fn as a local activity — free of an ordinary activity's matching round
// trip — for at most budget; maxAttempts 0 is unlimited within it.
func localStep(ctx workflow.Context, summary string, budget time.Duration, maxAttempts int32,
	fn, in any) workflow.Future {
	return workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		Summary: summary, StartToCloseTimeout: StepTimeout, ScheduleToCloseTimeout: budget,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: 100 * time.Millisecond, BackoffCoefficient: 2,
			MaximumInterval: 5 * time.Second, MaximumAttempts: maxAttempts},
	}), fn, in)
}

// beforeEffect runs a short step that precedes every storage effect of its operation
// (validate, resolve, record, pin, probe). One that keeps failing ends the operation
// after BeforeEffectBudget, and the kernel's finish settles what the request wrote.
func beforeEffect(ctx workflow.Context, summary string, fn, in, out any) error {
	return localStep(ctx, summary, BeforeEffectBudget, 0, fn, in).Get(ctx, out)
}

// untilAnsweredStep runs a step that may follow a storage effect and must not be given up:
// a local activity for a few attempts, then the same step as an ordinary activity with
// no total deadline, retried until answered; only cancellation ends it early. That
// activity does not hold the workflow task, so status queries stay answerable and a
// dependency that does not answer shows as a pending activity retrying with its last
// failure, which the client's wait names (docs/outcomes.md). kv goes into its log.
func untilAnsweredStep(ctx workflow.Context, summary string, fn, in, out any, kv ...any) error {
	err := localStep(ctx, summary, FastPathBudget, 4, fn, in).Get(ctx, out)
	if err == nil || temporal.IsCanceledError(err) || ctx.Err() != nil {
		return err
	}
	workflow.GetLogger(ctx).Info("graft step continues as an ordinary activity", append(kv, "step", summary, "error", err.Error())...)
	if w, ok := in.(activities.WriteInput); ok {
		// The local attempts may have sent the write: a refusal of a later one proves nothing.
		w.StepRetried = true
		in = w
	}
	o := workflow.ActivityOptions{Summary: summary + " (until answered)", StartToCloseTimeout: 2 * StepTimeout,
		RetryPolicy: untilAnswered}
	return workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, o), fn, in).Get(ctx, out)
}
