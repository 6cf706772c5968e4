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
	// Time is the operation's start time; it goes into the fork commit, so a
	// re-issue is byte-identical.
	Time time.Time
	// Attempt is 1, or 2 for the retry under a fresh native name.
	Attempt int
	// WorkflowID and RunID are the workflow's; RunID claims the ledger row.
	WorkflowID, RunID string
}

// PrepareCreateResult is what PrepareCreate decided. A non-empty Outcome ends
// the create before any storage effect (invalid, not_found, not_retained,
// conflict, or in_doubt when another operation's create of the name is in doubt).
type PrepareCreateResult struct {
	Outcome    outcome.Outcome
	Message    string
	ExistingOp string // with Outcome in_doubt or conflict: the operation holding the name
	// Owned reports that the ledger row is this run's: the kernel finishes it.
	// False when the operation id belongs to another request, or the create ended
	// before anything was recorded.
	Owned bool

	Native       string
	SourceCommit string
	ForkID       string
	// ForkBytes and RefBytes are computed once, here; every put and re-issue
	// sends exactly these bytes.
	ForkBytes []byte
	RefBytes  []byte
	// ForkChunks are the chunks the fork commit names that its source's did
	// not, put before it.
	ForkChunks []ChunkPut
	// RefSpec is the ref put, recorded as the operation's pending write with the
	// witness; the kernel sends it as it is (WriteInput.PendingRecorded). Nil from a
	// prepare that recorded no pending write (an older worker's).
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
	// ForkChunks are put, put-if-absent, before the fork commit.
	ForkChunks []ChunkPut
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
