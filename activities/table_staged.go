package activities

import (
	"context"
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
