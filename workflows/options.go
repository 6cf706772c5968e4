package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// The two kinds of step every graft workflow is made of. Each workflow names
// its own steps' options at the top of its file in terms of these.
var (
	// untilAnswered retries a step until the store and the ledger answer:
	// a step that may follow a storage effect must never be given up, or the
	// operation would be left half-done.
	untilAnswered = &temporal.RetryPolicy{
		InitialInterval:    100 * time.Millisecond,
		BackoffCoefficient: 2,
		MaximumInterval:    30 * time.Second,
	}

	// beforeEffect runs a short step that precedes every storage effect of
	// its operation (validate, resolve, record, pin, probe). One that keeps
	// failing (storage or Postgres down) ends the operation with nothing
	// written, after two minutes.
	beforeEffect = workflow.LocalActivityOptions{
		StartToCloseTimeout:    30 * time.Second,
		ScheduleToCloseTimeout: 2 * time.Minute,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    100 * time.Millisecond,
			BackoffCoefficient: 2,
			MaximumInterval:    5 * time.Second,
		},
	}

	// afterEffect runs a short, idempotent step that may follow a storage
	// effect (a put whose answer may be lost, a ledger write recording it):
	// it retries until answered.
	afterEffect = workflow.LocalActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy:         untilAnswered,
	}
)
