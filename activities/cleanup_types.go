package activities

import (
	"encoding/json"
	"time"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/workflows/contract"
)

// Cleanup modes, as the ledger spells them (catalog.CleanupMode).
const (
	CleanupModeDryRun = "dry_run"
	CleanupModeMark   = "mark"
	CleanupModeSweep  = "sweep"
)

// The counts a cleanup reports, declared in package contract (workflows return them).
type (
	CleanupKept   = contract.CleanupKept
	CleanupCounts = contract.CleanupCounts
	UnsettledTree = contract.UnsettledTree
	StoreRequests = contract.StoreRequests
	RefusedKey    = contract.RefusedKey
)

// CleanupBeginInput is the input of CleanupBegin.
type CleanupBeginInput struct {
	RunID, Graph string
	Mode         string          // CleanupModeDryRun, CleanupModeMark or CleanupModeSweep
	Policy       json.RawMessage // recorded with the run and the operation
	// PlanRunID names a finished mark run whose plan this run is limited to.
	PlanRunID                 string
	WorkflowID, WorkflowRunID string
}

// CleanupBeginResult says whether the run may go on: a non-empty Outcome ends it before
// anything is read; a non-nil Orphan is a run the caller finishes first, then begins again.
type CleanupBeginResult struct {
	Outcome     outcome.Outcome
	Message     string
	ActiveRunID string // the running run that blocked this one (with Outcome conflict)
	Orphan      *CleanupOrphan
}

// CleanupOrphan is a run left running by a workflow that ended without finishing it. Its
// condemned set still refuses pins, so a sweep run's plan is still safe to delete.
type CleanupOrphan struct {
	RunID, Mode, WorkflowID string
}

// CleanupMarkTreesInput is the input of CleanupMarkTrees.
type CleanupMarkTreesInput struct {
	RunID, Graph, Mode string
	KeepNewest         int           // each live tree's newest commits by seq kept; 0 is no count window
	KeepNewerThan      time.Duration // commits newer than the reference time minus it kept; 0: no age window
	PlanRunID          string        // restricts condemnation to keys that run condemned; "": no limit
	MaxPlanKeys        int           // bounds CleanupMarkTreesResult.PlanKeys
	// GuardWindow keeps pins and lineage chunks, and commits above a live tree's head,
	// modified less than this before Now.
	GuardWindow time.Duration
}

// CleanupMarkTreesResult is what the tree phase of a mark decided.
type CleanupMarkTreesResult struct {
	Now      time.Time           // the reference time every window of the mark counts back from
	Tables   []string            // every table with a key under the graph's tables/ prefix
	Retained map[string][]string // each table's versions (ULIDs) that kept commits pin
	// RetainAllData: a kept commit could not be read: nothing under tables/ is condemned.
	RetainAllData   bool
	RetainAllReason string
	Kept            CleanupKept
	Condemned       CleanupCounts // the commits condemned (planned, in a dry run)
	NotInPlan       int64         // garbage left alone because the reviewed plan did not list it
	Unsettled       []UnsettledTree
	// Fenced lists the natives whose ref key this run fenced (a dry run: would have).
	Fenced, WouldFence []string
	PlanKeys           []string
	Requests           StoreRequests
	// GraphChunks counts the pins and lineage chunks condemned (in Condemned.Objects too),
	// which the sweep deletes after the commits.
	GraphChunks int64
}

// CleanupMarkTableInput is the input of CleanupMarkTable.
type CleanupMarkTableInput struct {
	RunID, Graph, Table, Mode string
	Retained                  []string      // the versions (ULIDs) of the table that kept commits pin
	RetainAll                 bool          // keeps every key (CleanupMarkTreesResult.RetainAllData)
	GuardWindow               time.Duration // keeps versions and objects modified after Now minus it
	Now                       time.Time
	PlanRunID                 string
	MaxPlanKeys               int
	// Seed seeds the run's object filter, so one run's false positive is not the next's.
	Seed uint64
}

// CleanupMarkTableResult is what the table phase of a mark decided for one table.
type CleanupMarkTableResult struct {
	Kept      CleanupKept
	Condemned CleanupCounts
	NotInPlan int64
	PlanKeys  []string
	Requests  StoreRequests
	// Chunks counts the manifest chunks condemned (in Condemned.Objects too), which the
	// sweep deletes after the versions, before the objects.
	Chunks   int64
	External int64 // kept versions' entries naming objects graft did not write (never deleted)
}

// CleanupSweepInput is the input of CleanupSweep: delete the run's condemned keys under
// Prefix (of Kind, when set), in key order.
type CleanupSweepInput struct {
	RunID, Graph string
	Prefix       string
	Kind         string // keeps only entries of this catalog object kind; "": every kind
	After        string // resumes after this key; "": from Prefix
	BatchSize    int    // the keys per DeleteBatch, at most 1000; 0: 1000
	// MaxBatches ends the call after this many batches, so a workflow sees progress and can
	// continue as new. Defaults to 50.
	MaxBatches int
}

// CleanupSweepProgress is the heartbeat of CleanupSweep, and its result: a retried
// attempt resumes from it.
type CleanupSweepProgress struct {
	After string `json:"after"` // the last key the sweep has finished with
	// Deleted and Bytes count the keys this call recorded deleted.
	Deleted int64 `json:"deleted"`
	Bytes   int64 `json:"bytes"`
	Batches int   `json:"batches"`
	// Refused counts the keys the store definitely refused to delete: they stay condemned
	// but undeleted. RefusedKeys lists the first maxRefusedListed of them.
	Refused     int64        `json:"refused,omitempty"`
	RefusedKeys []RefusedKey `json:"refused_keys,omitempty"`
	Done        bool         `json:"done"` // no condemned key of the range is left
}

// maxRefusedListed bounds the refused keys one sweep call reports by name.
const maxRefusedListed = 100

// CleanupSummarizeInput is the input of CleanupSummarize.
type CleanupSummarizeInput struct {
	RunID     string
	PlanRunID string // the mark run whose plan the run was limited to, if any
}

// CleanupSummary is the ledger's exact count of a run's condemned set.
type CleanupSummary struct {
	// Condemned counts every key the run condemned; Deleted those recorded deleted.
	Condemned, Deleted CleanupCounts
	PlanKeys           int64 // the keys of the reviewed plan (with PlanRunID)
}

// CleanupFinishInput is the input of CleanupFinish.
type CleanupFinishInput struct {
	RunID, Graph string
	// Failed finishes the run (and operation) failed instead of done; Aborted finishes it
	// aborted (an orphaned run that deleted nothing).
	Failed, Aborted bool
	Message         string
	Report          json.RawMessage // the run's summary, stored with the run
}

// CleanupUploadsInput is the input of CleanupUploads.
type CleanupUploadsInput struct {
	RunID, Graph string
	// Abort aborts the uploads found and deletes their records; false only counts them
	// (dry run, mark).
	Abort bool
	// Upload records last written, and uploads started, before Now less GuardWindow are
	// garbage unless an operation pins their object key.
	Now         time.Time
	GuardWindow time.Duration
	MaxPlanKeys int
}

// CleanupUploadsResult is what CleanupUploads found and did.
type CleanupUploadsResult struct {
	// Found counts the garbage uploads; Aborted those aborted; Pinned the records kept by a
	// pin of their object key; Removed the records deleted.
	Found, Aborted, Pinned, Removed int64
	// Unsettled counts records left alone unread (another format version, or not a record
	// of their key's object); Unknown those older than the graph.
	Unsettled, Unknown int64
	Keys               []string // up to MaxPlanKeys of the found uploads' object keys, sorted
}
