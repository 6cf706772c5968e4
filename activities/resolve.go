package activities

import (
	"context"
	"errors"
	"fmt"

	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/graph"
)

// Resolving a logical branch on the worker (docs/format.md, "Read costs"). Storage is the
// authority on what is live; the ledger only says where to look first. The name's open
// incarnation in the ledger — live, or a create not settled yet; at most one per name, a
// ledger fact (incarnations_one_open_per_logical) — is the hint: its ref is read (one GET)
// and, when storage says it is live, it is the branch. Any other answer falls back to
// reading every ref of the name (graph.ResolveBranch), so "not found" and "several live"
// are only ever storage's answers. A name deleted and re-created a thousand times costs one
// ledger query and one GET, as a name created once does, where the full read costs one
// GET per incarnation it ever had (retired refs stay at their keys as fences).

// resolveBranch finds the live incarnation of logical, the ledger's open incarnation of the
// name as the hint (graph.ResolveBranchHinted).
func (a *Activities) resolveBranch(ctx context.Context, graphName, logical string) (graph.Branch, error) {
	hint, _, err := a.openIncarnation(ctx, graphName, logical)
	if err != nil {
		return graph.Branch{}, err
	}
	return graph.ResolveBranchHinted(ctx, a.Store, graphName, logical, hint.Native)
}

// openIncarnation is the ledger's open incarnation of logical, if it has one.
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
