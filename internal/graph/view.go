package graph

import (
	"context"
	"fmt"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage"
)

// CommitView is a commit as views show it, with its pins as a map.
type CommitView struct {
	Commit
	Pins map[string]ulid.ULID
}

// ReadCommitView reads a commit by id, with its pins.
func ReadCommitView(ctx context.Context, s storage.Store, graph, commitID string) (CommitView, error) {
	id, err := format.ParseCommitID(commitID)
	if err != nil {
		return CommitView{}, invalid("CommitID", err)
	}
	g, err := Open(s, graph)
	if err != nil {
		return CommitView{}, err
	}
	c, err := g.Commit(ctx, id)
	if err != nil {
		return CommitView{}, err
	}
	return g.view(ctx, c)
}

// BranchHeadView reads the head of a resolved branch, with its pins.
func BranchHeadView(ctx context.Context, s storage.Store, graph string, b Branch) (CommitView, error) {
	return ReadCommitView(ctx, s, graph, b.Ref.Head.String())
}

func (g *Graph) view(ctx context.Context, c Commit) (CommitView, error) {
	out := CommitView{Commit: c, Pins: map[string]ulid.ULID{}}
	if err := g.EachPin(ctx, c, func(p format.PinEntry) error { out.Pins[p.Table] = p.Version; return nil }); err != nil {
		return CommitView{}, fmt.Errorf("read pins of %s: %w", c.ID, err)
	}
	return out, nil
}
