package activities

import (
	"fmt"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
)

// The decisions of a cleanup mark that need no storage: how a tree stands, which commits
// of a live tree a policy keeps, and which keys an in-flight operation pins. Kept apart
// from the activities so each rule has a table test.

// treeClass is how a tree stands for cleanup.
type treeClass int

const (
	// treeLive: a live ref names the tree; keep its head and the commits in a window.
	treeLive treeClass = iota + 1
	// treeCondemnable: no ref can ever name the tree again (retired, or fenced with a
	// settled or absent witness); its commits may go, except those tags or pins keep.
	treeCondemnable
	// treeInFlight: the tree's ref may still land (witness intent, cloned or in_doubt).
	treeInFlight
	// treeUnsettled: storage and witness disagree, or a ref is unreadable; leave it.
	treeUnsettled
	// treeNeedsFence: no ref and no unsettled witness; reclaimable only after the
	// collector itself wins a fence at the tree's ref key.
	treeNeedsFence
)

// treeFacts is what storage and the ledger say about one tree.
type treeFacts struct {
	Refs          []format.BranchRef   // the decoded refs at ref keys naming the tree
	RefUnreadable bool                 // a ref key naming the tree does not decode
	Witness       *catalog.Incarnation // nil when the ledger has none
}

// unsettledWitness reports whether the witness says the tree's ref may still be put.
func unsettledWitness(w *catalog.Incarnation) bool {
	return w != nil && (w.State == catalog.IncarnationIntent || w.State == catalog.IncarnationCloned ||
		w.State == catalog.IncarnationInDoubt)
}

// classifyTree decides how a tree stands. Storage is the authority for refs; the witness
// only ever holds a tree back, never frees one, and age is never consulted.
func classifyTree(f treeFacts) (treeClass, string) {
	if f.RefUnreadable {
		return treeUnsettled, "a ref naming the tree does not decode"
	}
	var retired, fenced bool
	for _, r := range f.Refs {
		switch r.State {
		case format.RefLive:
			return treeLive, "live ref " + r.Native
		case format.RefRetired:
			retired = true
		case format.RefFence:
			fenced = true
		}
	}
	switch {
	case retired:
		return treeCondemnable, "branch retired"
	case fenced && unsettledWitness(f.Witness):
		return treeInFlight, fmt.Sprintf("fenced, but its create (operation %s) is still settling", f.Witness.OpID)
	case fenced:
		return treeCondemnable, "fenced"
	case unsettledWitness(f.Witness):
		return treeInFlight, fmt.Sprintf("witness %s: the ref put may still land", f.Witness.State)
	case f.Witness != nil && (f.Witness.State == catalog.IncarnationLive || f.Witness.State == catalog.IncarnationRetired):
		return treeUnsettled, fmt.Sprintf("witness says %s but no ref exists", f.Witness.State)
	}
	return treeNeedsFence, "no ref"
}

// treeCommit is one listed commit key of a tree.
type treeCommit struct {
	Key       string
	Seq, Size int64
	Modified  time.Time
}

// pinSet answers whether a key is pinned, with the ledger's rule: equal keys, or one of
// them ends in "/" and is a prefix of the other. A dry run uses it in place of the
// ledger's own check, which only a condemning run may make.
type pinSet map[string]bool

func newPinSet(pins []catalog.PinRecord) pinSet {
	return setOf(mapped(pins, func(p catalog.PinRecord) string { return p.Key }))
}

func (s pinSet) pinned(key string) bool {
	if s[key] {
		return true
	}
	for i := 0; i < len(key)-1; i++ {
		if key[i] == '/' && s[key[:i+1]] {
			return true
		}
	}
	if strings.HasSuffix(key, "/") {
		for k := range s {
			if strings.HasPrefix(k, key) {
				return true
			}
		}
	}
	return false
}

// parseIDKey returns the ULID of key when it is prefix, a canonical ULID, then suffix:
// a table's versions/ take ".json", its objects/ nothing.
func parseIDKey(prefix, suffix, key string) (ulid.ULID, bool) {
	name, okPrefix := strings.CutPrefix(key, prefix)
	id, okSuffix := strings.CutSuffix(name, suffix)
	u, err := format.ParseULID(id)
	if !okPrefix || !okSuffix || err != nil || u.String() != id {
		return ulid.ULID{}, false
	}
	return u, true
}

// planSample keeps the first max keys of a plan.
type planSample struct {
	max  int
	keys []string
}

func (p *planSample) add(key string) {
	if len(p.keys) < p.max {
		p.keys = append(p.keys, key)
	}
}
