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
	Attempt           int
	WorkflowID, RunID string
}

// PrepareCreateResult is what PrepareCreate decided. A non-empty Outcome ends
// the create before any storage effect (invalid, not_found, not_retained,
// conflict, or in_doubt when another operation's create of the name is in doubt).
type PrepareCreateResult struct {
	Outcome    outcome.Outcome
	Message    string
	ExistingOp string // with Outcome in_doubt or conflict: the operation holding the name
	// Foreign reports that the operation id belongs to a different request:
	// the ledger row is not this workflow's to finish.
	Foreign bool

	Native       string
	SourceCommit string
	ForkID       string
	// ForkBytes and RefBytes are computed once, here; every put and re-issue
	// sends exactly these bytes.
	ForkBytes []byte
	RefBytes  []byte
}

// CloneState is what CloneTree proved about the fork commit.
type CloneState string

const (
	CloneCommitted    CloneState = "committed"     // our bytes are stored
	CloneNotCommitted CloneState = "not_committed" // definitely not stored (refused)
	CloneUnknown      CloneState = "unknown"       // still ambiguous after re-issues; may land later
)

// CloneInput is the input of CloneTree.
type CloneInput struct {
	OpID, Graph, Native, ForkID string
	ForkBytes                   []byte
}

// CloneResult is the output of CloneTree.
type CloneResult struct {
	State   CloneState
	Message string
}

// RefState is what a ref put or read proved about the incarnation's ref key.
type RefState string

const (
	RefOurs      RefState = "ours"      // our live ref bytes are stored: created
	RefFence     RefState = "fence"     // a fence holds the key: the incarnation can never be live
	RefOther     RefState = "other"     // some other bytes hold the key: another writer's
	RefAbsent    RefState = "absent"    // nothing at the key (read only)
	RefAmbiguous RefState = "ambiguous" // the put's outcome is unknown
	RefRefused   RefState = "refused"   // the store definitely refused the put
)

// RefInput is the input of PutRef and ReadRef.
type RefInput struct {
	OpID, Graph, Native string
	RefBytes            []byte
	// Phase is "publish", "reread" or "settle", for the ledger and metrics.
	Phase string
}

// RefResult is the output of PutRef, ReadRef and FenceRef.
type RefResult struct {
	State   RefState
	Message string
	// Finished reports that the ledger already records the operation as
	// created (State ours): the workflow need not call FinishCreate.
	Finished bool
}

// MarkInDoubtInput is the input of MarkInDoubt.
type MarkInDoubtInput struct {
	OpID, Graph, Native string
}

// FenceInput is the input of FenceRef.
type FenceInput struct {
	OpID, Graph, Native, Branch, Reason string
}

// ReclaimInput is the input of ReclaimClone.
type ReclaimInput struct {
	OpID, Graph, Native, Fork, Reason string
}

// FinishInput is the input of FinishCreate.
type FinishInput struct {
	OpID, Graph, Branch, Native string
	Outcome                     outcome.Outcome // "" when the workflow failed
	Message                     string
}
