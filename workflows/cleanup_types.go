package workflows

import (
	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/workflows/contract"
)

// The counts a cleanup's result reports, declared once in package contract (the
// activities fill the same types).
type (
	CleanupKept   = contract.CleanupKept
	CleanupCounts = contract.CleanupCounts
	UnsettledTree = contract.UnsettledTree
	StoreRequests = contract.StoreRequests
	RefusedKey    = contract.RefusedKey
)

// addRefused adds a sweep call's refused keys to the result, listing at most max.
func (r *CleanupResult) addRefused(p activities.CleanupSweepProgress, max int) {
	r.Refused += p.Refused
	r.RefusedKeys = appendUpTo(r.RefusedKeys, p.RefusedKeys, max)
}

// appendUpTo appends to list the items that fit in max.
func appendUpTo[T any](list, items []T, max int) []T {
	return append(list, items[:min(len(items), max-min(len(list), max))]...)
}

// CleanupObjectStats counts, apart, the objects a run decided that are neither commits,
// versions nor data objects graft wrote (docs/format.md, *Cleanup*): map chunks, external
// objects and incomplete uploads. Chunks are counted among objects in Condemned and
// Deleted too.
type CleanupObjectStats struct {
	// GraphChunks counts the pins and lineage chunks condemned; ManifestChunks the
	// manifest chunks condemned.
	GraphChunks    int64 `json:"graph_chunks"`
	ManifestChunks int64 `json:"manifest_chunks"`
	// External counts the entries of kept versions naming objects graft did not write:
	// never condemned, never deleted.
	External int64 `json:"external"`
	// Uploads: incomplete multipart uploads of the graph's object keys, found by their
	// upload records, older than the guard window and of keys no operation pins (found),
	// aborted (sweep only), and records of pinned keys left alone; UploadKeys lists up to
	// max_plan_keys of the found ones' keys. UploadRecordsRemoved counts the upload
	// records a sweep deleted: of aborted uploads and of completed ones.
	UploadsFound         int64    `json:"uploads_found"`
	UploadsAborted       int64    `json:"uploads_aborted"`
	UploadsPinned        int64    `json:"uploads_pinned,omitempty"`
	UploadRecordsRemoved int64    `json:"upload_records_removed,omitempty"`
	UploadKeys           []string `json:"upload_keys,omitempty"`
}
