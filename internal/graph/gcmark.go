package graph

import (
	"context"
	"fmt"

	"github.com/graftworks/graft/internal/format"
)

// Helpers of cleanup's mark (activities/cleanup_mark.go; docs/format.md,
// *Cleanup*): the tree phase marks commits — their own keys and their pins and
// lineage chunks — and hands the versions they pin to the per-table phase,
// which marks versions (Marker.Version) on its own worker.

// CommitOnly marks a retained commit's own keys — the commit, its pins chunks
// and its lineage chunks — and passes every pin under chunks not visited
// before to pinned, without reading any version. A pins subtree shared with a
// commit marked earlier is skipped whole: its pins were passed then.
func (m *Marker) CommitOnly(ctx context.Context, c Commit, pinned func(format.PinEntry) error) error {
	key := format.CommitIDKey(m.g.Name, c.ID)
	if m.commits[key] {
		return nil
	}
	m.commits[key] = true
	if err := m.visit(Mark{Kind: MarkCommit, Key: key}); err != nil {
		return err
	}
	if err := markChunks(ctx, m, mapTree[format.LineageEntry]{r: m.g.lineage, ref: c.Lineage}, MarkLineageChunk, "", nil); err != nil {
		return fmt.Errorf("mark lineage of %s: %w", c.ID, err)
	}
	if err := markChunks(ctx, m, mapTree[format.PinEntry]{r: m.g.pins, ref: c.Pins}, MarkPinsChunk, "", pinned); err != nil {
		return fmt.Errorf("mark pins of %s: %w", c.ID, err)
	}
	return nil
}

// EachLineage calls fn for every entry of c's lineage (the highest ancestor
// of c in each other tree), in tree order, chunk by chunk.
func (g *Graph) EachLineage(ctx context.Context, c Commit, fn func(format.LineageEntry) error) error {
	return g.lineageOf(c).each(ctx, fn)
}
