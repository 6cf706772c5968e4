package catalog

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// GraphInsertParams registers a graph.
type GraphInsertParams struct {
	Name    string
	Locator string
}

// GraphInsert registers a graph. Registering the same name and locator again returns the
// existing row; the same name with another locator is ErrDuplicate.
func (c *Catalog) GraphInsert(ctx context.Context, p GraphInsertParams) (Graph, error) {
	if p.Name == "" || p.Locator == "" {
		return Graph{}, c.wrap("insert graph", invalid("graph name and locator are required"))
	}
	g, err := scanGraph(c.pool.QueryRow(ctx, `
		INSERT INTO graphs (name, locator) VALUES ($1, $2)
		ON CONFLICT (name) DO NOTHING
		RETURNING name, locator, created_at`, p.Name, p.Locator))
	if errors.Is(err, pgx.ErrNoRows) { // registered already
		g, err = scanGraph(c.pool.QueryRow(ctx, graphSQL, p.Name))
		if err == nil && g.Locator != p.Locator {
			err = fmt.Errorf("%w: graph %q is registered at %q, not %q", ErrDuplicate, p.Name, g.Locator, p.Locator)
		}
	}
	return wrapped[Graph](c, "insert graph")(g, err)
}

// GraphGetParams names a graph.
type GraphGetParams struct {
	Name string
}

// GraphGet returns a registered graph, or ErrNotFound.
func (c *Catalog) GraphGet(ctx context.Context, p GraphGetParams) (Graph, error) {
	return queryOne(ctx, c, c.pool, fmt.Sprintf("get graph %q", p.Name), scanGraph, graphSQL, p.Name)
}

const graphSQL = `SELECT name, locator, created_at FROM graphs WHERE name = $1`

func scanGraph(row pgx.Row) (Graph, error) {
	var g Graph
	err := row.Scan(&g.Name, &g.Locator, &g.CreatedAt)
	return g, err
}
