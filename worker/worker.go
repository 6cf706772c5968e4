// Package worker assembles a graft Temporal worker: graft's workflows under
// their stable names and the activities bound to one store and ledger.
package worker

import (
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/workflows"
)

// DefaultTaskQueue is the task queue graft's workflows and activities use by default.
const DefaultTaskQueue = "graft"

// Register registers graft's workflows and activities on w. Activity type names are the
// method names of activities.Activities, which workflows resolve through a typed nil pointer.
func Register(w sdkworker.Registry, acts *activities.Activities) {
	workflows.Register(w)
	w.RegisterActivity(acts)
}
