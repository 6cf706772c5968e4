// Package searchattr names the typed Temporal search attributes graft sets on
// every workflow, so operators can find runs in the Web UI and in visibility
// queries (`GraftGraph = "g1" AND GraftOutcome = "in_doubt"`). The local stack
// registers them when it starts the dev server; a production namespace needs
// them registered once (docs/operations.md).
package searchattr

import "go.temporal.io/sdk/temporal"

// Names of graft's search attributes; all are Keyword. GraftOperation holds
// the kind of operation (create_branch, write_table, cleanup, ...); an
// operation id leads to its workflow through the ledger (`graft op show ID`
// prints the workflow id).
const (
	GraphName     = "GraftGraph"
	BranchName    = "GraftBranch"
	OperationName = "GraftOperation"
	OutcomeName   = "GraftOutcome"
)

// Typed keys for workflow code and visibility queries.
var (
	Graph     = temporal.NewSearchAttributeKeyKeyword(GraphName)
	Branch    = temporal.NewSearchAttributeKeyKeyword(BranchName)
	Operation = temporal.NewSearchAttributeKeyKeyword(OperationName)
	Outcome   = temporal.NewSearchAttributeKeyKeyword(OutcomeName)
)

// All lists every attribute's name with its Temporal type, in the form the
// dev server's --search-attribute flag takes.
var All = []struct{ Name, Type string }{
	{GraphName, "Keyword"},
	{BranchName, "Keyword"},
	{OperationName, "Keyword"},
	{OutcomeName, "Keyword"},
}
