package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/graftworks/graft/activities"
)

// Step timing the kernel applies to every step (docs/workflows.md). A workflow reads them
// when it schedules a step; tests of long stalls lower them.
var (
	// StepTimeout bounds one attempt of a step (its StartToCloseTimeout). Defaults to 30s.
	StepTimeout = 30 * time.Second
	// BeforeEffectBudget bounds a step that precedes every storage effect, retries
	// included. Defaults to 2 minutes.
	BeforeEffectBudget = 2 * time.Minute
	// FastPathBudget bounds the local-activity fast path of an after-effect step, after
	// which the step continues as an ordinary activity with no total deadline. Defaults
	// to 2 minutes.
	FastPathBudget = 2 * time.Minute
)

// The kinds of step every graft workflow is made of; the kernel (kernel.go) runs each
// step with one of them, its timeouts taken from the variables above.
var (
	// untilAnswered retries a step until the store and the ledger answer: a step that may
	// follow a storage effect is never given up, or the operation would be left half-done.
	untilAnswered = &temporal.RetryPolicy{InitialInterval: 100 * time.Millisecond, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second}

	// beforeEffect runs a short step that precedes every storage effect of its operation
	// (validate, resolve, record, pin, probe). One that keeps failing ends the operation
	// after BeforeEffectBudget, and the kernel's finish settles what the request wrote.
	beforeEffect = workflow.LocalActivityOptions{RetryPolicy: localRetry(0)}

	// afterEffectFast is the fast path of a step that may follow a storage effect: a local
	// activity, free of an ordinary activity's matching round trip, for a few attempts.
	// Its deadline never ends the operation: the step then continues as afterEffectDurable.
	afterEffectFast = workflow.LocalActivityOptions{RetryPolicy: localRetry(4)}

	// afterEffectDurable continues an after-effect step whose fast path kept failing: an
	// ordinary activity with no total deadline and unlimited retries. It does not hold the
	// workflow task, so status queries and the current details stay answerable, and the UI
	// shows it pending with its last error.
	afterEffectDurable = workflow.ActivityOptions{RetryPolicy: untilAnswered}
)

// localRetry is the retry policy of a local step; maxAttempts 0 is unlimited (within its budget).
func localRetry(maxAttempts int32) *temporal.RetryPolicy {
	return &temporal.RetryPolicy{InitialInterval: 100 * time.Millisecond, BackoffCoefficient: 2, MaximumInterval: 5 * time.Second, MaximumAttempts: maxAttempts}
}

// untilAnsweredStep runs a step that may follow a storage effect and must not be given up:
// a local activity for a few attempts, then the same step as an ordinary activity with no
// total deadline, until it is answered; only cancellation ends it early. A dependency that
// does not answer (the store, Postgres) so shows as a pending activity retrying with its
// last failure, which the client's wait names (docs/outcomes.md). kv goes into its log.
func untilAnsweredStep(ctx workflow.Context, summary string, fn, in, out any, kv ...any) error {
	o := afterEffectFast
	o.Summary = summary
	o.StartToCloseTimeout, o.ScheduleToCloseTimeout = StepTimeout, FastPathBudget
	err := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, o), fn, in).Get(ctx, out)
	if err == nil || temporal.IsCanceledError(err) || ctx.Err() != nil {
		return err
	}
	workflow.GetLogger(ctx).Info("graft step continues as an ordinary activity", append(kv, "step", summary, "error", err.Error())...)
	d := afterEffectDurable
	d.Summary = summary + " (until answered)"
	d.StartToCloseTimeout = 2 * StepTimeout
	if w, ok := in.(activities.WriteInput); ok {
		// The local attempts may have sent the write: a refusal of a later one proves nothing.
		w.StepRetried = true
		in = w
	}
	return workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, d), fn, in).Get(ctx, out)
}
