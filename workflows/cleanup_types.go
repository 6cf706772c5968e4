package workflows

import "github.com/graftworks/graft/activities"

// The counts a cleanup's result reports. They are the result's own types —
// what a service decoding graft.Cleanup's JSON sees — kept field for field
// equal to the activities' counterparts, so the workflow converts between them.

// CleanupKept counts the keys a cleanup run kept, each under the first root that kept
// it. Keys are commits, table versions and data objects.
type CleanupKept struct {
	// Head counts the head commit of every live branch.
	Head int64 `json:"head"`
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
	// vectors (graph.BaseCandidates), found from the heads' lineages alone.
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
	OpID   string `json:"op_id,omitempty"`
	Reason string `json:"reason"`
	// Commits counts the tree's commits left in place.
	Commits int64 `json:"commits"`
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

// unsettledTrees converts the mark step's skipped trees into the result's.
func unsettledTrees(in []activities.UnsettledTree) []UnsettledTree {
	if in == nil {
		return nil
	}
	out := make([]UnsettledTree, len(in))
	for i, t := range in {
		out[i] = UnsettledTree(t)
	}
	return out
}

// RefusedKey is a condemned key the store refused to delete, and why.
type RefusedKey struct {
	Key    string `json:"key"`
	Reason string `json:"reason"`
}

// addRefused adds a sweep call's refused keys to the result, listing at most max.
func (r *CleanupResult) addRefused(p activities.CleanupSweepProgress, max int) {
	r.Refused += p.Refused
	for _, k := range p.RefusedKeys {
		if len(r.RefusedKeys) >= max {
			return
		}
		r.RefusedKeys = append(r.RefusedKeys, RefusedKey(k))
	}
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
	// Uploads: incomplete multipart uploads under the graph's object keys older than the
	// guard window that no operation pins (found), aborted (sweep only), and pinned ones
	// left alone; UploadKeys lists up to max_plan_keys of the found ones' keys.
	UploadsFound   int64    `json:"uploads_found"`
	UploadsAborted int64    `json:"uploads_aborted"`
	UploadsPinned  int64    `json:"uploads_pinned,omitempty"`
	UploadKeys     []string `json:"upload_keys,omitempty"`
}
