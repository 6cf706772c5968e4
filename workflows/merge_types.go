package workflows

import "github.com/graftworks/graft/workflows/contract"

// MergeAction and MergeTable are declared in package contract (the plan step fills them).
type (
	MergeAction = contract.MergeAction
	MergeTable  = contract.MergeTable
)

// The merge actions (docs/merge-restore-tags.md).
const (
	MergeUnchanged = contract.MergeUnchanged
	MergeAdopt     = contract.MergeAdopt
	MergeKeep      = contract.MergeKeep
	MergeConflict  = contract.MergeConflict
	MergeMerged    = contract.MergeMerged
)
