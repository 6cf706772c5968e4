// Package contract declares the result types that graft's activities fill and its
// workflows return, once, so the JSON a service decodes cannot drift from what the
// activities record. It imports nothing internal.
package contract

import (
	"fmt"
	"strings"

	"github.com/graftworks/graft/client/outcome"
)

// CleanupKept counts the keys (commits, table versions and data objects) a cleanup run
// kept, each under the first root that kept it.
type CleanupKept struct {
	Head int64 `json:"head"` // the head commit of every live branch
	// LiveWindow counts other commits of live branches inside a policy window (or of a
	// branch whose ref landed while the run was deciding).
	LiveWindow int64 `json:"live_window"`
	// Tag counts commits a live tag names that nothing else kept.
	Tag int64 `json:"tag"`
	// Pin counts keys an in-flight operation pins (the ledger refused to condemn them).
	Pin int64 `json:"pin"`
	// MergeBase counts commits that nothing above kept and that a merge between two
	// branches may read as a merge-base candidate: for every pair of heads of trees that
	// are or may become branches, each entry of the element-wise minimum of their ancestor
	// vectors, found from the heads' lineages alone.
	MergeBase int64 `json:"merge_base"`
	// Guard counts table versions and data objects younger than the guard window.
	Guard int64 `json:"guard"`
	// InFlightTree counts commits of trees whose ref may still land: their witness is
	// intent, cloned or in_doubt.
	InFlightTree int64 `json:"in_flight_tree"`
	// Unsettled counts keys the run could not decide about and left alone: a tree whose
	// fence put was ambiguous or whose witness contradicts storage, an unreadable object.
	Unsettled int64 `json:"unsettled"`
	// Referenced counts table versions and data objects a kept commit or version names.
	Referenced int64 `json:"referenced"`
	// Unknown counts keys that graft's format does not name; cleanup never touches them.
	Unknown int64 `json:"unknown"`
}

// Add adds o's counts to k.
func (k *CleanupKept) Add(o CleanupKept) {
	k.Head += o.Head
	k.LiveWindow += o.LiveWindow
	k.Tag += o.Tag
	k.Pin += o.Pin
	k.MergeBase += o.MergeBase
	k.Guard += o.Guard
	k.InFlightTree += o.InFlightTree
	k.Unsettled += o.Unsettled
	k.Referenced += o.Referenced
	k.Unknown += o.Unknown
}

// CleanupCounts counts keys by kind, with their bytes.
type CleanupCounts struct {
	Commits  int64 `json:"commits"`
	Versions int64 `json:"versions"`
	Objects  int64 `json:"objects"`
	Bytes    int64 `json:"bytes"`
}

// Keys is the number of keys counted.
func (c CleanupCounts) Keys() int64 { return c.Commits + c.Versions + c.Objects }

// Add adds o's counts to c.
func (c *CleanupCounts) Add(o CleanupCounts) {
	c.Commits += o.Commits
	c.Versions += o.Versions
	c.Objects += o.Objects
	c.Bytes += o.Bytes
}

// UnsettledTree is a tree a cleanup run skipped because it could not prove that no ref
// will ever name it.
type UnsettledTree struct {
	Tree   string `json:"tree"`
	Native string `json:"native,omitempty"`
	// State is the witness's state (intent, cloned, in_doubt, …), or "" without a witness.
	State string `json:"state,omitempty"`
	// OpID is the operation the witness belongs to; settle or abandon it to free the tree.
	OpID    string `json:"op_id,omitempty"`
	Reason  string `json:"reason"`
	Commits int64  `json:"commits"` // the tree's commits left in place
}

// StoreRequests counts the storage requests an activity sent.
type StoreRequests struct {
	List   int64 `json:"list"`
	Get    int64 `json:"get"`
	Head   int64 `json:"head"`
	Put    int64 `json:"put"`
	Delete int64 `json:"delete"`
}

// Add adds o's counts to r.
func (r *StoreRequests) Add(o StoreRequests) {
	r.List += o.List
	r.Get += o.Get
	r.Head += o.Head
	r.Put += o.Put
	r.Delete += o.Delete
}

// Total is the number of requests counted.
func (r StoreRequests) Total() int64 { return r.List + r.Get + r.Head + r.Put + r.Delete }

// RefusedKey is a condemned key the store refused to delete, and why.
type RefusedKey struct {
	Key    string `json:"key"`
	Reason string `json:"reason"`
}

// MergeAction is what a merge does with one table (docs/merge-restore-tags.md). A plan
// lists only tables whose action is not MergeUnchanged.
type MergeAction string

const (
	// MergeUnchanged: source and target pin the same version (or neither pins it).
	MergeUnchanged MergeAction = "unchanged"
	// MergeAdopt: only the source changed the table since the base; the target takes the
	// source's version (or drops the table, if the source did).
	MergeAdopt MergeAction = "adopt"
	// MergeKeep: only the target changed the table; it keeps its version.
	MergeKeep MergeAction = "keep"
	// MergeConflict: both changed the table, to different versions — or the merge bases
	// disagree about it and the two sides differ.
	MergeConflict MergeAction = "conflict"
	// MergeMerged: both changed the table, touching different objects; the target gets a
	// new version with both sides' changes.
	MergeMerged MergeAction = "merged"
)

// MergeTable is one table's line in a merge plan. Versions are ULIDs; an empty one means
// that side does not pin the table.
type MergeTable struct {
	Table  string      `json:"table"`
	Action MergeAction `json:"action"`
	Base   string      `json:"base,omitempty"`
	Source string      `json:"source,omitempty"`
	Target string      `json:"target,omitempty"`
	// BaseAmbiguous: several merge bases pin different versions of the table.
	BaseAmbiguous bool `json:"base_ambiguous,omitempty"`
	// Added, Removed and Replaced count the entries the merge changes in the target's
	// version (adopt and merged; docs/format.md, "Merges"); Conflicts names up to 100
	// entries both sides changed differently, ConflictCount counts them; Why says what the
	// sides did in a table-level conflict.
	Added         int64    `json:"added,omitempty"`
	Removed       int64    `json:"removed,omitempty"`
	Replaced      int64    `json:"replaced,omitempty"`
	Conflicts     []string `json:"conflicts,omitempty"`
	ConflictCount int64    `json:"conflict_count,omitempty"`
	Why           string   `json:"why,omitempty"`
}

// ReconciledOp is one operation a reconcile pass finished or parked.
type ReconciledOp struct {
	OpID    string          `json:"op_id"`
	Kind    string          `json:"kind"`
	Outcome outcome.Outcome `json:"outcome,omitempty"`
	// Parked: its pending write could not be fenced yet (the store refused or did not
	// answer); the operation stays in doubt and the next pass tries again.
	Parked  bool   `json:"parked,omitempty"`
	Message string `json:"message,omitempty"`
}

// ReconcileResult is the result of a reconcile pass.
type ReconcileResult struct {
	// Examined counts the unfinished operations looked at; Open those whose workflow is
	// still running (left alone).
	Examined int `json:"examined"`
	Open     int `json:"open"`
	// Settled lists the operations this pass finished or parked; never null.
	Settled []ReconciledOp `json:"settled"`
}

// MergeCheck is a check a merge into a protected branch runs: the workflow type Name, on
// the task queue TaskQueue a worker of the user's polls (docs/workflows.md, "Checks").
type MergeCheck struct {
	Name      string `json:"name"`
	TaskQueue string `json:"task_queue"`
}

// MergeRule is what a merge into a protected branch waits for: every check passing on the
// plan it would commit, and Approvals approvals of the source head it would merge.
type MergeRule struct {
	Checks    []MergeCheck `json:"checks"`
	Approvals int          `json:"approvals"`
}

// CheckInput is the input graft starts a check workflow with: the merge, its plan, and
// where a reader opens the graph.
type CheckInput struct {
	Graph string `json:"graph"`
	// Locator is where the graph's objects live (a store URL or key prefix), as the
	// ledger registered it; "" when it did not.
	Locator string `json:"locator,omitempty"`
	OpID    string `json:"op_id"`
	Check   string `json:"check"`
	Source  string `json:"source"`
	Target  string `json:"target"`
	// SourceHead and TargetHead are the commits the plan merges; Bases its merge bases.
	SourceHead string   `json:"source_head"`
	TargetHead string   `json:"target_head"`
	Bases      []string `json:"bases"`
	// Round counts the plans the merge has asked checks about: a moved head re-plans.
	Round int `json:"round"`
	// Tables lists every table the merge does not leave unchanged, with its action, its
	// versions on each side and the object-level changes.
	Tables []MergeTable `json:"tables"`
}

// CheckResult is what a check workflow returns. A check workflow that fails, times out
// or is terminated counts as a check that did not pass.
type CheckResult struct {
	Pass    bool   `json:"pass"`
	Message string `json:"message,omitempty"`
}

// CheckState is one check of a waiting merge: pending, running, passed or failed.
type CheckState struct {
	Name       string `json:"name"`
	State      string `json:"state"`
	Message    string `json:"message,omitempty"`
	WorkflowID string `json:"workflow_id,omitempty"`
}

// Review is an approval or a rejection of a waiting merge.
type Review struct {
	Reviewer string `json:"reviewer"`
	Approve  bool   `json:"approve"`
	// Comment is an approval's comment or a rejection's reason.
	Comment string `json:"comment,omitempty"`
	// SourceHead is the source head the review is of; an approval counts only while the
	// merge would merge it.
	SourceHead string `json:"source_head,omitempty"`
	At         string `json:"at,omitempty"`
}

// MergeWait is what a merge into a protected branch waits for, as it stands.
type MergeWait struct {
	Rule       MergeRule    `json:"rule"`
	Round      int          `json:"round"`
	SourceHead string       `json:"source_head"`
	TargetHead string       `json:"target_head"`
	Checks     []CheckState `json:"checks"`
	// Approvals counts the approvals of SourceHead; Reviews lists every review received.
	Approvals int      `json:"approvals"`
	Reviews   []Review `json:"reviews,omitempty"`
	// Deadline, when set, is when the merge stops waiting (RFC 3339).
	Deadline string `json:"deadline,omitempty"`
}

// Cleared reports whether every check passed and the approvals are in.
func (w MergeWait) Cleared() bool {
	for _, c := range w.Checks {
		if c.State != "passed" {
			return false
		}
	}
	return w.Approvals >= w.Rule.Approvals
}

// Summary says what the merge waits for, for a person: "checks: quality passed, schema
// running; approvals 0/1".
func (w MergeWait) Summary() string {
	var parts []string
	var cs []string
	for _, c := range w.Checks {
		cs = append(cs, c.Name+" "+c.State)
	}
	if len(w.Checks) == 0 { // a rule not yet waited for: its checks
		for _, c := range w.Rule.Checks {
			cs = append(cs, c.Name)
		}
	}
	if len(cs) > 0 {
		parts = append(parts, "checks: "+strings.Join(cs, ", "))
	}
	if w.Rule.Approvals > 0 {
		parts = append(parts, fmt.Sprintf("approvals %d/%d", w.Approvals, w.Rule.Approvals))
	}
	return strings.Join(parts, "; ")
}
