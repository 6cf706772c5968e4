package activities

import (
	"time"

	"github.com/graftworks/graft/client/outcome"
)

// PrepareCreateInput is the input of PrepareCreate.
type PrepareCreateInput struct {
	OpID, Graph, Branch string
	// At most one source; all empty means the head of main.
	SourceBranch, SourceCommit, SourceTag string
	Author, Message                       string
	// Time is the operation's start, in the fork commit: a re-issue is byte-identical.
	Time time.Time
	// Attempt is 1, or 2 for the retry under a fresh native name.
	Attempt           int
	WorkflowID, RunID string // the workflow's; RunID claims the ledger row
}

// PrepareCreateResult is what PrepareCreate decided. A non-empty Outcome ends the create
// before any storage effect (in_doubt: another operation's create of the name is in doubt).
type PrepareCreateResult struct {
	Outcome    outcome.Outcome
	Message    string
	ExistingOp string // with Outcome in_doubt or conflict: the operation holding the name
	Owned      bool   // the ledger row is this run's: the kernel finishes it

	Native, SourceCommit, ForkID string
	ForkBytes, RefBytes          []byte     // what every put and re-issue sends
	ForkChunks                   []ChunkPut // the chunks the fork commit names that its source's did not
	// RefSpec is the ref put, recorded as the pending write with the witness
	// (WriteInput.PendingRecorded); nil from an older worker's prepare.
	RefSpec *WriteSpec `json:",omitempty"`
}

// CloneState is what CloneTree proved about the fork commit.
type CloneState string

const (
	CloneCommitted    CloneState = "committed"     // our bytes are stored
	CloneNotCommitted CloneState = "not_committed" // definitely not stored (another writer's bytes)
	CloneRefused      CloneState = "refused"       // the store definitely refused the put: nothing was stored
	CloneUnknown      CloneState = "unknown"       // still ambiguous after re-issues; may land later
)

// CloneInput is the input of CloneTree.
type CloneInput struct {
	Owner                 Owner
	Graph, Native, ForkID string
	ForkBytes             []byte
	ForkChunks            []ChunkPut // put before the fork commit
}

// CloneResult is the output of CloneTree.
type CloneResult struct {
	State   CloneState
	Message string
}

// ReclaimInput is the input of ReclaimClone.
type ReclaimInput struct {
	Owner                       Owner
	Graph, Native, Fork, Reason string
}
