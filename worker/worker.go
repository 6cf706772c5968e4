// Package worker assembles a graft Temporal worker: graft's workflows under
// their stable names and the activities bound to one store and ledger.
package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	sdkclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/workflows"
)

// DefaultTaskQueue is the task queue graft's workflows and activities use by default.
const DefaultTaskQueue = "graft"

// New returns a Temporal worker polling taskQueue that runs graft's workflows and the
// activities acts, with what every graft worker needs added to o: a step's activity
// heartbeats while the worker runs it (keepAlive), so a step lost with its worker moves
// to another within the step's heartbeat timeout. o's own interceptors run first.
func New(tc sdkclient.Client, taskQueue string, acts *activities.Activities, o sdkworker.Options) sdkworker.Worker {
	o.Interceptors = append(slices.Clip(o.Interceptors), &keepAlive{})
	w := sdkworker.New(tc, taskQueue, o)
	register(w, acts)
	return w
}

// register registers graft's workflows and activities on w. Activity type names are the
// method names of activities.Activities, which workflows resolve through a typed nil pointer.
func register(w sdkworker.Registry, acts *activities.Activities) {
	workflows.Register(w)
	w.RegisterActivity(acts)
}

// TemporalWorkflows answers activities.WorkflowStatus through a Temporal client: a workflow
// is closed when the latest run of its id is not running, or Temporal no longer knows it.
func TemporalWorkflows(tc sdkclient.Client) activities.WorkflowStatus { return temporalWorkflows{tc} }

type temporalWorkflows struct{ tc sdkclient.Client }

func (t temporalWorkflows) WorkflowClosed(ctx context.Context, workflowID string) (bool, error) {
	d, err := t.tc.DescribeWorkflowExecution(ctx, workflowID, "")
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &nf):
		return true, nil
	case err != nil:
		return false, err
	}
	return d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, nil
}

// ScheduleOptions configure EnsureSchedules.
type ScheduleOptions struct {
	// TaskQueue the scheduled workflows run on. Defaults to DefaultTaskQueue.
	TaskQueue string
	// ReconcileEvery is the reconciler's interval. Defaults to workflows.DefaultReconcileInterval.
	ReconcileEvery time.Duration
}

// EnsureSchedules creates the schedules every graft deployment runs, unless they exist:
// the reconciler (workflows.ReconcileScheduleID). An existing schedule is left as an
// operator configured it.
func EnsureSchedules(ctx context.Context, tc sdkclient.Client, o ScheduleOptions) error {
	o.TaskQueue = cmp.Or(o.TaskQueue, DefaultTaskQueue)
	if o.ReconcileEvery <= 0 {
		o.ReconcileEvery = workflows.DefaultReconcileInterval
	}
	_, err := tc.ScheduleClient().Create(ctx, sdkclient.ScheduleOptions{
		ID:      workflows.ReconcileScheduleID,
		Spec:    sdkclient.ScheduleSpec{Intervals: []sdkclient.ScheduleIntervalSpec{{Every: o.ReconcileEvery}}},
		Overlap: enumspb.SCHEDULE_OVERLAP_POLICY_SKIP,
		Action: &sdkclient.ScheduleWorkflowAction{
			ID:        workflows.ReconcileWorkflowID + "/scheduled",
			Workflow:  workflows.ReconcileName,
			Args:      []any{workflows.ReconcileInput{}},
			TaskQueue: o.TaskQueue,
		},
	})
	if err != nil && !errors.Is(err, temporal.ErrScheduleAlreadyRunning) {
		return fmt.Errorf("create schedule %s: %w", workflows.ReconcileScheduleID, err)
	}
	return nil
}
