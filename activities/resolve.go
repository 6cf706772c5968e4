package activities

import (
	"context"
	"errors"
	"fmt"

	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/graph"
)

// resolveBranch finds the live incarnation of logical (docs/format.md, "Read costs"). The
// ledger's open incarnation of the name is the hint: its ref is read (one GET) and, when
// live, is the branch; any other answer falls back to reading every ref of the name, so
// "not found" and "several live" are storage's answers (graph.ResolveBranchHinted).
func (a *Activities) resolveBranch(ctx context.Context, graphName, logical string) (graph.Branch, error) {
	hint, _, err := a.openIncarnation(ctx, graphName, logical)
	if err != nil {
		return graph.Branch{}, err
	}
	return graph.ResolveBranchHinted(ctx, a.Store, graphName, logical, hint.Native)
}

func (a *Activities) openIncarnation(ctx context.Context, graphName, logical string) (catalog.Incarnation, bool, error) {
	inc, err := a.Catalog.IncarnationOpen(ctx, catalog.IncarnationOpenParams{Graph: graphName, Logical: logical})
	switch {
	case errors.Is(err, catalog.ErrNotFound):
		return catalog.Incarnation{}, false, nil
	case err != nil:
		return catalog.Incarnation{}, false, fmt.Errorf("read the ledger's open incarnation of %q: %w", logical, err)
	}
	return inc, true, nil
}
