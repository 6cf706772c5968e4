package workflows

import (
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// untilAnsweredStep runs a step of a workflow outside the kernel that must not be given
// up, the way the kernel runs a step that may follow an effect (opRun.step): a local
// activity for a few attempts, then the same step as an ordinary activity with no total
// deadline, until it is answered. A dependency that does not answer the worker (the store,
// Postgres) so shows as a pending activity retrying with its last failure, which the
// client's wait names once (docs/outcomes.md), instead of a day-long local activity
// retrying where nothing outside the worker can see it.
func untilAnsweredStep(ctx workflow.Context, summary string, fn, in, out any) error {
	o := afterEffectFast
	o.Summary = summary
	o.StartToCloseTimeout, o.ScheduleToCloseTimeout = StepTimeout, FastPathBudget
	err := workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, o), fn, in).Get(ctx, out)
	if err == nil || temporal.IsCanceledError(err) || ctx.Err() != nil {
		return err
	}
	workflow.GetLogger(ctx).Info("graft step continues as an ordinary activity", "step", summary, "error", err.Error())
	d := afterEffectDurable
	d.Summary = summary + " (until answered)"
	d.StartToCloseTimeout = 2 * StepTimeout
	return workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, d), fn, in).Get(ctx, out)
}
