// Package workflows holds graft's Temporal workflows: one per branch
// operation, each reading as the list of its phases. Workflow code is
// deterministic: it never touches storage, Postgres or the clock directly —
// every effect is an activity (package activities), referred to through a
// typed nil *activities.Activities, and every wait is a durable timer.
//
// Names are registered explicitly and are part of graft's public contract
// (docs/workflows.md): services in any language start these workflows by
// name with JSON payloads.
package workflows

import (
	"go.temporal.io/sdk/workflow"
)

// Registry is the part of a Temporal worker that workflows register with.
type Registry interface {
	RegisterWorkflowWithOptions(w interface{}, options workflow.RegisterOptions)
}

// Register registers every graft workflow under its stable name.
func Register(r Registry) {
	r.RegisterWorkflowWithOptions(CreateBranch, workflow.RegisterOptions{Name: CreateBranchName})
	r.RegisterWorkflowWithOptions(Cleanup, workflow.RegisterOptions{Name: CleanupName})
	r.RegisterWorkflowWithOptions(InitGraph, workflow.RegisterOptions{Name: InitGraphName})
	r.RegisterWorkflowWithOptions(WriteTable, workflow.RegisterOptions{Name: WriteTableName})
	r.RegisterWorkflowWithOptions(RepairBranch, workflow.RegisterOptions{Name: RepairBranchName})
	r.RegisterWorkflowWithOptions(Merge, workflow.RegisterOptions{Name: MergeName})
	r.RegisterWorkflowWithOptions(Restore, workflow.RegisterOptions{Name: RestoreName})
	r.RegisterWorkflowWithOptions(DeleteBranch, workflow.RegisterOptions{Name: DeleteBranchName})
	r.RegisterWorkflowWithOptions(CreateTag, workflow.RegisterOptions{Name: CreateTagName})
	r.RegisterWorkflowWithOptions(DeleteTag, workflow.RegisterOptions{Name: DeleteTagName})
	r.RegisterWorkflowWithOptions(Reconcile, workflow.RegisterOptions{Name: ReconcileName})
}
