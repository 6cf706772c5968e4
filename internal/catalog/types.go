package catalog

import (
	"encoding/json"
	"slices"
	"time"
)

// OperationKind names a kind of operation.
type OperationKind string

// The operation kinds the operations table accepts.
const (
	OpCreateBranch OperationKind = "create_branch"
	OpInitGraph    OperationKind = "init_graph"
	OpWriteTable   OperationKind = "write_table"
	OpCleanup      OperationKind = "cleanup"
	OpMerge        OperationKind = "merge"
	OpRestore      OperationKind = "restore"
	OpDeleteBranch OperationKind = "delete_branch"
	OpTag          OperationKind = "tag"
)

// OperationKinds lists every kind, in the order of the constants.
var OperationKinds = []OperationKind{
	OpCreateBranch, OpInitGraph, OpWriteTable, OpCleanup, OpMerge, OpRestore, OpDeleteBranch, OpTag,
}

// OperationState is where an operation stands; OperationDone is final, with an Outcome.
type OperationState string

const (
	OperationRunning OperationState = "running"
	OperationInDoubt OperationState = "in_doubt"
	OperationDone    OperationState = "done"
)

// Outcome is an operation's definitive result, in the vocabulary the client, CLI, UI and
// ledger share.
type Outcome string

const (
	OutcomeCreated         Outcome = "created"
	OutcomeUnpublished     Outcome = "unpublished"
	OutcomeInDoubt         Outcome = "in_doubt"
	OutcomeConflict        Outcome = "conflict"
	OutcomeNotFound        Outcome = "not_found"
	OutcomeNotRetained     Outcome = "not_retained"
	OutcomeInvalid         Outcome = "invalid"
	OutcomeRefused         Outcome = "refused"
	OutcomeDone            Outcome = "done"
	OutcomeMerged          Outcome = "merged"
	OutcomeAdopted         Outcome = "adopted"
	OutcomeAlreadyUpToDate Outcome = "already_up_to_date"
	OutcomeDeleted         Outcome = "deleted"
	OutcomeAbandoned       Outcome = "abandoned"
	OutcomeRejected        Outcome = "rejected"
	OutcomeFailed          Outcome = "failed" // gave up on an infrastructure error
)

// Outcomes lists every outcome, in the order of the constants.
var Outcomes = []Outcome{
	OutcomeCreated, OutcomeUnpublished, OutcomeInDoubt, OutcomeConflict, OutcomeNotFound,
	OutcomeNotRetained, OutcomeInvalid, OutcomeRefused, OutcomeDone, OutcomeMerged,
	OutcomeAdopted, OutcomeAlreadyUpToDate, OutcomeDeleted, OutcomeAbandoned, OutcomeRejected, OutcomeFailed,
}

// IncarnationState is the witness's record of an incarnation. Live, unpublished and
// retired are settled; unpublished and retired are final.
type IncarnationState string

const (
	IncarnationIntent      IncarnationState = "intent"      // native name minted, nothing written
	IncarnationCloned      IncarnationState = "cloned"      // the new tree's fork commit is written
	IncarnationInDoubt     IncarnationState = "in_doubt"    // the ref put may still land
	IncarnationLive        IncarnationState = "live"        // the ref is written
	IncarnationUnpublished IncarnationState = "unpublished" // a fence holds the ref key
	IncarnationRetired     IncarnationState = "retired"     // the ref was retired by compare-and-swap
)

// Settled reports whether s is definitive: live, unpublished or retired.
func (s IncarnationState) Settled() bool {
	return s == IncarnationLive || s == IncarnationUnpublished || s == IncarnationRetired
}

// incarnationTransitions lists the legal moves.
var incarnationTransitions = map[IncarnationState][]IncarnationState{
	IncarnationIntent:  {IncarnationCloned, IncarnationInDoubt, IncarnationLive, IncarnationUnpublished},
	IncarnationCloned:  {IncarnationInDoubt, IncarnationLive, IncarnationUnpublished},
	IncarnationInDoubt: {IncarnationLive, IncarnationUnpublished},
	IncarnationLive:    {IncarnationRetired},
}

// CanTransition reports whether an incarnation may move from one state to another.
func CanTransition(from, to IncarnationState) bool {
	return slices.Contains(incarnationTransitions[from], to)
}

// ObjectKind says what a pinned or condemned key names; a tree key normally ends in "/".
type ObjectKind string

const (
	ObjectCommit       ObjectKind = "commit"
	ObjectTableVersion ObjectKind = "table_version"
	ObjectTree         ObjectKind = "tree"
	ObjectData         ObjectKind = "object"
)

// CleanupMode says how far a cleanup run goes.
type CleanupMode string

const (
	CleanupDryRun CleanupMode = "dry_run" // plans only; its condemned set refuses no pin
	CleanupMark   CleanupMode = "mark"    // condemns but does not delete
	CleanupSweep  CleanupMode = "sweep"   // condemns and deletes
)

// CleanupRunState is where a cleanup run stands. Only CleanupRunning is active.
type CleanupRunState string

const (
	CleanupRunning CleanupRunState = "running"
	CleanupDone    CleanupRunState = "done"
	CleanupFailed  CleanupRunState = "failed"
	CleanupAborted CleanupRunState = "aborted"
)

// CondemnedState is a condemned key's progress.
type CondemnedState string

const (
	CondemnedPending CondemnedState = "condemned"
	CondemnedDeleted CondemnedState = "deleted"
)

// Graph is a registered graph.
type Graph struct {
	Name      string
	Locator   string
	CreatedAt time.Time
}

// Operation is one row of the audit log.
type Operation struct {
	ID         string
	Kind       OperationKind
	Graph      string
	Inputs     json.RawMessage
	State      OperationState
	Outcome    Outcome // "" until State is done
	Error      string
	WorkflowID string
	RunID      string
	CreatedAt  time.Time
	UpdatedAt  time.Time
	FinishedAt time.Time // zero until State is done
	// Fingerprint identifies the request (kind, graph and inputs) the row records.
	Fingerprint string
	OwnerRun    string // the run that owns the row; "" if nobody claimed it
	// Phase and Waiting say where an unfinished operation stands and what it waits for.
	Phase, Waiting string
	// Pending is the issued write whose outcome is not recorded yet (the kernel's
	// write spec, as JSON), or nil.
	Pending        json.RawMessage
	SettleAttempts int // re-issues of an in-doubt write
	// Result is the result the operation reported when it finished (JSON), or nil.
	Result json.RawMessage
}

// Incarnation is one witness row.
type Incarnation struct {
	Graph     string
	Logical   string
	Native    string
	Tree      string
	State     IncarnationState
	OpID      string
	CreatedAt time.Time
	UpdatedAt time.Time
	SettledAt time.Time // zero until State is settled
}

// Pin is one key an operation needs retained.
type Pin struct {
	Kind ObjectKind
	Key  string
}

// PinRecord is a stored pin.
type PinRecord struct {
	OpID       string
	Graph      string
	Kind       ObjectKind
	Key        string
	CreatedAt  time.Time
	ReleasedAt time.Time // zero while held
	// LatePut: a put of the key may still land (PinsHoldForLatePut).
	LatePut bool
}

// CleanupRun is one cleanup run.
type CleanupRun struct {
	ID         string
	Graph      string
	Mode       CleanupMode
	Policy     json.RawMessage
	State      CleanupRunState
	StartedAt  time.Time
	FinishedAt time.Time // zero while running
	Report     json.RawMessage
}

// Condemned is a key a cleanup run means to reclaim.
type Condemned struct {
	Key  string
	Kind ObjectKind
	Size int64 // bytes reclaimed by deleting the key; 0 when unknown
}

// CondemnedEntry is a stored condemned key.
type CondemnedEntry struct {
	RunID       string
	Graph       string
	Key         string
	Kind        ObjectKind
	Size        int64
	State       CondemnedState
	CondemnedAt time.Time
	DeletedAt   time.Time // zero until deleted
}
