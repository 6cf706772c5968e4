package graph

import (
	"context"
	"fmt"

	"github.com/graftworks/graft/internal/format"
)

// Helpers of cleanup's mark (docs/format.md, *Cleanup*).

// CommitOnly marks a commit and its chunks, passing newly seen pins to pinned.
func (m *Marker) CommitOnly(ctx context.Context, c Commit, pinned func(format.PinEntry) error) error {
	key := format.CommitIDKey(m.g.Name, c.ID)
	if m.commits[key] {
		return nil
	}
	m.commits[key] = true
	if err := m.visit(Mark{Kind: MarkCommit, Key: key}); err != nil {
		return err
	}
	if err := markChunks(ctx, m, m.g.lineageOf(c), MarkLineageChunk, "", nil); err != nil {
		return fmt.Errorf("mark lineage of %s: %w", c.ID, err)
	}
	if err := markChunks(ctx, m, m.g.pinsOf(c), MarkPinsChunk, "", pinned); err != nil {
		return fmt.Errorf("mark pins of %s: %w", c.ID, err)
	}
	return nil
}

// EachLineage calls fn for every entry of c's lineage, in tree order.
func (g *Graph) EachLineage(ctx context.Context, c Commit, fn func(format.LineageEntry) error) error {
	return g.lineageOf(c).each(ctx, fn)
}
