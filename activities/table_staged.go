package activities

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/storage"
)

// A write of many objects names them through a staged version (docs/format.md, "Staged
// object lists"): a table version of exactly the uploaded objects, written by the client
// before the workflow starts, so no workflow history or ledger record holds the list.

// MaxInlineObjects is the most objects a write request lists inline (more: a staged
// version). At most this many entries of the longest names and sizes fit in one 64 KiB
// control object, so an inline list never makes a workflow input or ledger record larger.
const MaxInlineObjects = 469

// StagedPlan is a pin-first write's staged list before it is put (workflows.StagedPlan):
// its keys, its objects' count, ULIDs (FirstObject+i) and bytes, and ObjectsSHA256 of its
// objects in order.
type StagedPlan struct {
	FirstObject   string   `json:"first_object"`
	Objects       int      `json:"objects"`
	Bytes         int64    `json:"bytes"`
	Keys          []string `json:"keys"`
	ObjectsSHA256 string   `json:"objects_sha256"`
}

// MaxStagedPlanKeys bounds a StagedPlan's keys: a staged list of a million objects has
// about 8,000 manifest chunks.
const MaxStagedPlanKeys = 20000

// plannedStaged checks a staged plan against the write's staged version id and returns the
// staged version its pins cover: its keys, and its objects by ULID with no size yet.
func plannedStaged(graphName, table, id string, p StagedPlan) (staged, error) {
	vid, err := format.ParseULID(id)
	if err != nil {
		return staged{}, fmt.Errorf("staged: %w", err)
	}
	first, err := format.ParseULID(p.FirstObject)
	switch {
	case err != nil:
		return staged{}, fmt.Errorf("staged_plan.first_object: %w", err)
	case p.Objects < 1 || p.Bytes < 0:
		return staged{}, fmt.Errorf("staged_plan: %d objects of %d bytes; want at least one object", p.Objects, p.Bytes)
	case len(p.Keys) > MaxStagedPlanKeys:
		return staged{}, fmt.Errorf("staged_plan: %d keys, at most %d", len(p.Keys), MaxStagedPlanKeys)
	case len(p.ObjectsSHA256) != 64:
		return staged{}, fmt.Errorf("staged_plan: objects_sha256 %q is not a SHA-256", p.ObjectsSHA256)
	}
	s := staged{id: vid, keys: []string{format.TableVersionKey(graphName, table, vid)}}
	for i, k := range p.Keys {
		if k == s.keys[0] {
			continue
		}
		if _, err := format.ParseChunkKey(format.TableChunksPrefix(graphName, table), k); err != nil {
			return staged{}, fmt.Errorf("staged_plan.keys[%d]: %w", i, err)
		}
		s.keys = append(s.keys, k)
	}
	s.objects = make([]TableObject, p.Objects)
	for i := range s.objects {
		s.objects[i].ID = format.NthULID(first, uint64(i)).String()
	}
	return s, nil
}

// checkPlanned compares a staged version read from the store with the plan its write
// pinned: the same objects in the same order, of the declared digest and bytes, and no key
// the plan did not name (it would not be pinned). "" when they agree.
func checkPlanned(s staged, plan staged, p StagedPlan) string {
	if len(s.objects) != len(plan.objects) {
		return fmt.Sprintf("it lists %d objects, not the %d planned", len(s.objects), len(plan.objects))
	}
	var total int64
	for i, o := range s.objects {
		if o.ID != plan.objects[i].ID {
			return fmt.Sprintf("entry %d is object %s, not the planned %s", i, o.ID, plan.objects[i].ID)
		}
		total += o.Size
	}
	if got := ObjectsSHA256(s.objects); got != p.ObjectsSHA256 || total != p.Bytes {
		return fmt.Sprintf("its objects' digest %s of %d bytes is not the planned %s of %d", got, total, p.ObjectsSHA256, p.Bytes)
	}
	pinned := setOf(plan.keys)
	for _, k := range s.keys {
		if !pinned[k] {
			return fmt.Sprintf("%s is not among the keys the write pinned", k)
		}
	}
	return ""
}

// ObjectsSHA256 is the digest of a table write's objects as its request names them: each
// object's size and SHA-256, in order (an object's id is minted by its upload, so a
// repeated request uploads the same bytes under other ids). A client computes it from its
// files before uploading anything.
func ObjectsSHA256(objects []TableObject) string {
	h := sha256.New()
	for _, o := range objects {
		fmt.Fprintf(h, "%d %s\n", o.Size, o.SHA256)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// staged is a staged version as a write reads it.
type staged struct {
	id      ulid.ULID
	objects []TableObject
	keys    []string // the version's key and its manifest chunks'
}

// readStaged reads the staged version id of table: one this operation staged, listing only
// objects graft wrote under their ULID names (invalid otherwise; not_retained if missing).
func (a *Activities) readStaged(ctx context.Context, graphName, table, opID, id string) (staged, outcome.Outcome, string, error) {
	fail := func(o outcome.Outcome, f string, args ...any) (staged, outcome.Outcome, string, error) {
		return staged{}, o, fmt.Sprintf("staged version %s of table %q: ", id, table) + fmt.Sprintf(f, args...), nil
	}
	vid, err := format.ParseULID(id)
	if err != nil {
		return fail(outcome.Invalid, "%v", err)
	}
	g, err := graph.Open(a.Store, graphName)
	if err != nil {
		return fail(outcome.Invalid, "%v", err)
	}
	v, err := g.Version(ctx, table, vid)
	switch {
	case errors.Is(err, graph.ErrVersionNotFound):
		return fail(outcome.NotRetained, "missing: never written, or reclaimed by cleanup")
	case isUnreadableObject(err), errors.Is(err, graph.ErrCorrupt):
		return fail(outcome.Invalid, "%v", err)
	case err != nil:
		return staged{}, "", "", fmt.Errorf("read staged version %s: %w", id, err)
	}
	if v.Op != opID {
		return fail(outcome.Invalid, "staged by operation %q, not by %q", v.Op, opID)
	}
	s := staged{id: vid, keys: []string{format.TableVersionKey(graphName, table, vid)}}
	var bad string
	err = g.EachEntry(ctx, v, func(e format.ManifestEntry) error {
		if e.IsExternal() || e.Name != e.Object.String() {
			bad = e.Name
			return errNotStaged
		}
		s.objects = append(s.objects, TableObject{ID: e.Object.String(), Size: e.Size, SHA256: e.SHA256})
		return nil
	})
	if err == nil {
		err = g.NewMarker(func(m graph.Mark) error {
			if m.Kind == graph.MarkManifestChunk {
				s.keys = append(s.keys, m.Key)
			}
			return nil
		}).Version(ctx, table, vid)
	}
	switch {
	case errors.Is(err, errNotStaged):
		return fail(outcome.Invalid, "entry %q is not an object graft wrote under its id: a staged list names uploads only", bad)
	case errors.Is(err, graph.ErrChunkNotFound):
		return fail(outcome.NotRetained, "a manifest chunk is missing (reclaimed by cleanup?): %v", err)
	case isUnreadableObject(err), errors.Is(err, graph.ErrCorrupt):
		return fail(outcome.Invalid, "%v", err)
	case err != nil:
		return staged{}, "", "", fmt.Errorf("read staged version %s: %w", id, err)
	}
	return s, "", "", nil
}

var errNotStaged = errors.New("not a staged object")

// probeStaged HEADs a staged version's own keys once the write pinned them, so a key
// missing now was reclaimed before (its objects are probed with the write's).
func (a *Activities) probeStaged(ctx context.Context, s staged) (outcome.Outcome, string, error) {
	for _, k := range s.keys {
		if _, err := a.Store.Head(ctx, k); err != nil {
			if errors.Is(err, storage.ErrNotFound) {
				return outcome.NotRetained, fmt.Sprintf("%s of the staged version %s is missing: reclaimed by cleanup", k, s.id), nil
			}
			return "", "", fmt.Errorf("probe %s: %w", k, err)
		}
	}
	return "", "", nil
}

// writeObjects is a write's uploaded objects, listed inline or by its staged version, or
// the outcome that says why there are none.
func (a *Activities) writeObjects(ctx context.Context, graphName, table, opID string, inline []TableObject, e TableEdit) ([]TableObject, staged, outcome.Outcome, string, error) {
	switch {
	case e.Staged == "" && len(inline) > MaxInlineObjects:
		return nil, staged{}, outcome.Invalid, fmt.Sprintf("%d objects listed inline, at most %d: stage a longer list (docs/format.md, \"Staged object lists\")",
			len(inline), MaxInlineObjects), nil
	case e.Staged == "":
		return inline, staged{}, "", "", nil
	case len(inline) > 0:
		return nil, staged{}, outcome.Invalid, fmt.Sprintf("%d objects listed inline and a staged version %s: one or the other", len(inline), e.Staged), nil
	}
	s, o, msg, err := a.readStaged(ctx, graphName, table, opID, e.Staged)
	return s.objects, s, o, msg, err
}
