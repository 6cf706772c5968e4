package workflows

import (
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/graftworks/graft/activities"
)

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
