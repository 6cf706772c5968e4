package graph

import (
	"context"
	"fmt"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage"
)

// Readers of either format for callers that show commits (the client's views): a commit
// of either format as a format.Commit with its pins expanded into a map — O(tables) reads
// for a format-2 commit whose pins are chunked, which a view of the pins needs anyway. Its
// Lineage is left empty for a format-2 commit (a view never needs it; write paths use
// Graph). Nothing that writes uses these.

// ReadCommitCompat reads a commit of either format by id.
func ReadCommitCompat(ctx context.Context, s storage.Store, graph, commitID string) (format.Commit, error) {
	id, err := format.ParseCommitID(commitID)
	if err != nil {
		return format.Commit{}, invalid("CommitID", err)
	}
	if !id.IsV2() {
		return ReadCommit(ctx, s, graph, commitID)
	}
	g, err := Open(s, graph)
	if err != nil {
		return format.Commit{}, err
	}
	c, err := g.Commit(ctx, id)
	if err != nil {
		return format.Commit{}, err
	}
	return g.compat(ctx, c)
}

func (g *Graph) compat(ctx context.Context, c Commit) (format.Commit, error) {
	out := format.Commit{ID: c.ID, Branch: c.Branch, Parents: c.Parents, Pins: map[string]ulid.ULID{}, RestoredFrom: c.RestoredFrom,
		Author: c.Author, Message: c.Message, Time: c.Time, Op: c.Op}
	if err := g.EachPin(ctx, c, func(p format.PinEntry) error { out.Pins[p.Table] = p.Version; return nil }); err != nil {
		return format.Commit{}, fmt.Errorf("read pins of %s: %w", c.ID, err)
	}
	return out, nil
}

// BranchHeadCompat reads the head of a resolved branch of either format: the commit a
// format-2 ref names, or the newest commit of a format-1 ref's tree.
func BranchHeadCompat(ctx context.Context, s storage.Store, graph string, b Branch) (format.Commit, error) {
	if b.RefFormat != format.Version2 {
		return ReadHead(ctx, s, graph, b.Tree)
	}
	return ReadCommitCompat(ctx, s, graph, b.Ref.Head.String())
}
