// Package workflows holds graft's Temporal workflows: one per branch
// operation, each reading as the list of its phases. Workflow code is
// deterministic: it never touches storage, Postgres or the clock directly —
// every effect is an activity (package activities), referred to through a
// typed nil *activities.Activities, and every wait is a durable timer.
//
// Names are registered explicitly and are part of graft's public contract
// (docs/workflows.md): services in any language start these workflows by
// name with JSON payloads. An operation input's OpID (op_id) is the operation's id in the
// ledger; it defaults to the workflow id. A result's SettleAttempts counts the re-issues
// of its in-doubt writes, HeadRetries its re-plans after the branch's head moved. An
// input's ExpectedHead, when set, makes the operation a conflict unless the branch's head
// is that commit; without it, a head that moves is re-planned up to MaxHeadRetries times.
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
	for name, wf := range map[string]any{
		CreateBranchName: CreateBranch, CleanupName: Cleanup, InitGraphName: InitGraph,
		WriteTableName: WriteTable, RepairBranchName: RepairBranch, MergeName: Merge, RestoreName: Restore,
		DeleteBranchName: DeleteBranch, CreateTagName: CreateTag, DeleteTagName: DeleteTag,
		ReconcileName: Reconcile,
	} {
		r.RegisterWorkflowWithOptions(wf, workflow.RegisterOptions{Name: name})
	}
}
