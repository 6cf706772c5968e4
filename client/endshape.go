package client

import (
	"context"
	"errors"

	sdkclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/graftworks/graft/client/outcome"
)

// A workflow whose definitive outcome is not a success fails with a non-retryable
// ApplicationError whose type is the outcome and whose first detail is the workflow's
// result (docs/workflows.md). endShapeClient makes every run this client starts or
// looks up decode such a failure as the result it carries, so the rest of the client
// sees one shape: a completed result with its outcome.
type endShapeClient struct{ sdkclient.Client }

func (c endShapeClient) ExecuteWorkflow(ctx context.Context, o sdkclient.StartWorkflowOptions, wf any, args ...any) (sdkclient.WorkflowRun, error) {
	run, err := c.Client.ExecuteWorkflow(ctx, o, wf, args...)
	if err != nil {
		return run, err
	}
	return endShapeRun{run}, nil
}

func (c endShapeClient) GetWorkflow(ctx context.Context, workflowID, runID string) sdkclient.WorkflowRun {
	return endShapeRun{c.Client.GetWorkflow(ctx, workflowID, runID)}
}

type endShapeRun struct{ sdkclient.WorkflowRun }

func (r endShapeRun) Get(ctx context.Context, valuePtr any) error {
	return decodeEnd(r.WorkflowRun.Get(ctx, valuePtr), valuePtr)
}

func (r endShapeRun) GetWithOptions(ctx context.Context, valuePtr any, o sdkclient.WorkflowRunGetOptions) error {
	return decodeEnd(r.WorkflowRun.GetWithOptions(ctx, valuePtr, o), valuePtr)
}

// decodeEnd turns a workflow failure that carries a definitive outcome into its result.
func decodeEnd(err error, valuePtr any) error {
	var app *temporal.ApplicationError
	if err == nil || !errors.As(err, &app) || !outcome.Outcome(app.Type()).Valid() || !app.HasDetails() {
		return err
	}
	if valuePtr == nil {
		return nil
	}
	if derr := app.Details(valuePtr); derr != nil {
		return err
	}
	return nil
}
