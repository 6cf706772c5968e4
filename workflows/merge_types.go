package workflows

import "github.com/graftworks/graft/activities"

// MergeAction is what a merge does with one table.
type MergeAction string

// The merge actions (docs/merge-restore-tags.md). A plan lists only tables
// whose action is not MergeUnchanged.
const (
	// MergeUnchanged: source and target pin the same version (or neither pins it).
	MergeUnchanged MergeAction = "unchanged"
	// MergeAdopt: only the source changed the table since the base; the
	// target takes the source's version (or drops the table, if the source did).
	MergeAdopt MergeAction = "adopt"
	// MergeKeep: only the target changed the table; it keeps its version.
	MergeKeep MergeAction = "keep"
	// MergeConflict: both changed the table, to different versions — or the
	// merge bases disagree about it and the two sides differ.
	MergeConflict MergeAction = "conflict"
	// MergeMerged: both changed the table, touching different objects; the
	// target gets a new version with both sides' changes.
	MergeMerged MergeAction = "merged"
)

// MergeTable is one table's line in a merge plan: action adopt (the target
// takes the source's version; an empty source version drops the table),
// keep (only the target changed it) or conflict (both changed it). Versions
// are ULIDs; an empty one means that side does not pin the table.
type MergeTable struct {
	Table  string      `json:"table"`
	Action MergeAction `json:"action"`
	Base   string      `json:"base,omitempty"`
	Source string      `json:"source,omitempty"`
	Target string      `json:"target,omitempty"`
	// BaseAmbiguous: several merge bases pin different versions of the table.
	BaseAmbiguous bool `json:"base_ambiguous,omitempty"`
	// On a graph (docs/format.md, "Merges"): Added, Removed and Replaced count
	// the objects (entries) the merge changes in the target's version of the table;
	// Conflicts names (up to 100) the objects both sides changed differently, and
	// ConflictCount counts them; Why says what the sides did in a table-level conflict.
	Added         int64    `json:"added,omitempty"`
	Removed       int64    `json:"removed,omitempty"`
	Replaced      int64    `json:"replaced,omitempty"`
	Conflicts     []string `json:"conflicts,omitempty"`
	ConflictCount int64    `json:"conflict_count,omitempty"`
	Why           string   `json:"why,omitempty"`
}

// mergeTables turns the plan step's lines into the result's; never nil.
func mergeTables(in []activities.MergeTable) []MergeTable {
	out := make([]MergeTable, len(in))
	for i, t := range in {
		out[i] = MergeTable{Table: t.Table, Action: MergeAction(t.Action), Base: t.Base, Source: t.Source, Target: t.Target,
			BaseAmbiguous: t.BaseAmbiguous, Added: t.Added, Removed: t.Removed, Replaced: t.Replaced, Conflicts: t.Conflicts,
			ConflictCount: t.ConflictCount, Why: t.Why}
	}
	return out
}
