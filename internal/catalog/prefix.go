package catalog

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// IncarnationInsertDisjointTx is IncarnationInsertTx for a branch name that must also be
// prefix-disjoint on '/' boundaries from every open branch of the graph (`a` and `a/b`
// cannot both be live), under the lock of the name's first segment (lockNameRoot). A
// clash is a *IncarnationExistsError naming the other incarnation.
func (c *Catalog) IncarnationInsertDisjointTx(ctx context.Context, tx pgx.Tx, p IncarnationInsertParams) (Incarnation, error) {
	what := fmt.Sprintf("insert incarnation %q", p.Native)
	if err := lockNameRoot(ctx, tx, p.Graph, p.Logical); err != nil {
		return Incarnation{}, c.wrap(what, err)
	}
	other, err := scanIncarnation(tx.QueryRow(ctx, `
		SELECT `+incarnationColumns+` FROM incarnations
		WHERE graph = $1 AND state IN ('intent', 'cloned', 'in_doubt', 'live')
		  AND (starts_with(logical, $2 || '/') OR starts_with($2, logical || '/'))
		ORDER BY logical LIMIT 1`, p.Graph, p.Logical))
	switch {
	case err == nil:
		return Incarnation{}, c.wrap(what, &IncarnationExistsError{Graph: p.Graph, Logical: p.Logical, Existing: other})
	case !errors.Is(err, pgx.ErrNoRows):
		return Incarnation{}, c.wrap(what, err)
	}
	return c.IncarnationInsertTx(ctx, tx, p)
}
