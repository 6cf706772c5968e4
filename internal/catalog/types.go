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

// OperationState is where an operation stands: running, then possibly in_doubt, then done.
type OperationState string

// The operation states. OperationDone is final and carries an Outcome.
const (
	OperationRunning OperationState = "running"
	OperationInDoubt OperationState = "in_doubt"
	OperationDone    OperationState = "done"
)

// Outcome is an operation's definitive result, from the vocabulary shared by the client,
// the CLI, the UI and the ledger.
type Outcome string

// The outcomes the operations table accepts.
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
	// OutcomeFailed: the operation gave up on an infrastructure error; the
	// error column says why.
	OutcomeFailed Outcome = "failed"
)

// Outcomes lists every outcome, in the order of the constants.
var Outcomes = []Outcome{
	OutcomeCreated, OutcomeUnpublished, OutcomeInDoubt, OutcomeConflict, OutcomeNotFound,
	OutcomeNotRetained, OutcomeInvalid, OutcomeRefused, OutcomeDone, OutcomeMerged,
	OutcomeAdopted, OutcomeAlreadyUpToDate, OutcomeDeleted, OutcomeFailed,
}

// IncarnationState is the witness's record of an incarnation.
type IncarnationState string

// The incarnation states. Live, unpublished and retired are settled (definitive);
// unpublished and retired are final.
const (
	// IncarnationIntent: native name minted, nothing written yet.
	IncarnationIntent IncarnationState = "intent"
	// IncarnationCloned: the fork commit of the new tree is written.
	IncarnationCloned IncarnationState = "cloned"
	// IncarnationInDoubt: the ref put may still land; settling will decide.
	IncarnationInDoubt IncarnationState = "in_doubt"
	// IncarnationLive: the ref is written; the branch is live through this incarnation.
	IncarnationLive IncarnationState = "live"
	// IncarnationUnpublished: a fence holds the ref key; the incarnation can never be live.
	IncarnationUnpublished IncarnationState = "unpublished"
	// IncarnationRetired: the ref was retired by compare-and-swap (branch deleted).
	IncarnationRetired IncarnationState = "retired"
)

// Settled reports whether s is definitive: live, unpublished or retired.
func (s IncarnationState) Settled() bool {
	return s == IncarnationLive || s == IncarnationUnpublished || s == IncarnationRetired
}

// incarnationTransitions lists the legal moves. Nothing returns to intent, nothing leaves
// unpublished or retired, and a live incarnation can only be retired.
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

// ObjectKind says what a pinned or condemned key names.
type ObjectKind string

// The object kinds. A tree key normally ends in "/" and so covers every key under it.
const (
	ObjectCommit       ObjectKind = "commit"
	ObjectTableVersion ObjectKind = "table_version"
	ObjectTree         ObjectKind = "tree"
	ObjectData         ObjectKind = "object"
)

// CleanupMode says how far a cleanup run goes.
type CleanupMode string

// The cleanup modes.
const (
	// CleanupDryRun plans only; its condemned set (if recorded) refuses no pin.
	CleanupDryRun CleanupMode = "dry_run"
	// CleanupMark condemns but does not delete.
	CleanupMark CleanupMode = "mark"
	// CleanupSweep condemns and deletes.
	CleanupSweep CleanupMode = "sweep"
)

// CleanupRunState is where a cleanup run stands. Only CleanupRunning is active.
type CleanupRunState string

// The cleanup run states.
const (
	CleanupRunning CleanupRunState = "running"
	CleanupDone    CleanupRunState = "done"
	CleanupFailed  CleanupRunState = "failed"
	CleanupAborted CleanupRunState = "aborted"
)

// CondemnedState is a condemned key's progress.
type CondemnedState string

// The condemned states.
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
	// OwnerRun is the run that owns the row ("" for rows nobody claimed).
	OwnerRun string
	// Phase and Waiting say where an unfinished operation stands and what it waits for.
	Phase, Waiting string
	// Pending is the write the operation issued whose outcome is not recorded yet (the
	// kernel's write spec, as JSON); nil when there is none.
	Pending json.RawMessage
	// SettleAttempts counts re-issues of an in-doubt write.
	SettleAttempts int
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
	// LatePut: a put of the key may still land; the pin outlives its operation
	// (PinsHoldForLatePut) until an operator releases it.
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
	// Size is the bytes reclaimed by deleting the key, when known (0 otherwise).
	Size int64
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
