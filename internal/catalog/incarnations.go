package catalog

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

const incarnationColumns = `graph, logical, native, tree, state, op_id, created_at, updated_at, settled_at`

// incarnationsOneOpen is the unique partial index behind ErrIncarnationExists.
const incarnationsOneOpen = "incarnations_one_open_per_logical"

func scanIncarnation(row pgx.Row) (Incarnation, error) {
	var inc Incarnation
	var settled *time.Time
	err := row.Scan(&inc.Graph, &inc.Logical, &inc.Native, &inc.Tree, &inc.State, &inc.OpID,
		&inc.CreatedAt, &inc.UpdatedAt, &settled)
	inc.SettledAt = timeOrZero(settled)
	return inc, err
}

func getIncarnation(ctx context.Context, q Querier, graph, native string) (Incarnation, error) {
	return scanIncarnation(q.QueryRow(ctx, `SELECT `+incarnationColumns+` FROM incarnations WHERE graph = $1 AND native = $2`, graph, native))
}

// openIncarnationSQL selects a logical branch's open incarnation: live or unsettled.
const openIncarnationSQL = `SELECT ` + incarnationColumns + ` FROM incarnations
	WHERE graph = $1 AND logical = $2 AND state IN ('intent', 'cloned', 'in_doubt', 'live')`

// IncarnationInsertParams witnesses the intent to create an incarnation.
type IncarnationInsertParams struct {
	Graph   string
	Logical string
	Native  string // {logical}.{ULID}
	Tree    string // the incarnation's commit log; defaults to Native
	OpID    string // the operation creating it, which must exist (ErrNotFound)
}

// IncarnationInsert records an incarnation in state intent. If the logical branch has an
// unsettled or live incarnation it is a *IncarnationExistsError naming it. Repeating the
// insert by the same operation returns the existing row; the same native name with other
// content is ErrDuplicate.
func (c *Catalog) IncarnationInsert(ctx context.Context, p IncarnationInsertParams) (Incarnation, error) {
	return inTx(ctx, c, func(tx pgx.Tx) (Incarnation, error) { return c.IncarnationInsertTx(ctx, tx, p) })
}

// IncarnationInsertTx is IncarnationInsert inside the caller's transaction, which a
// failed insert leaves usable.
func (c *Catalog) IncarnationInsertTx(ctx context.Context, tx pgx.Tx, p IncarnationInsertParams) (Incarnation, error) {
	what := fmt.Sprintf("insert incarnation %q", p.Native)
	if err := p.check(); err != nil {
		return Incarnation{}, c.wrap(what, err)
	}
	inc, err := savepoint(ctx, tx, func(sp pgx.Tx) (Incarnation, error) {
		return scanIncarnation(sp.QueryRow(ctx, insertIncarnationSQL, p.args()...))
	})
	return wrapped[Incarnation](c, what)(p.inserted(ctx, tx, inc, err))
}

func (p IncarnationInsertParams) check() error {
	if p.Graph == "" || p.Logical == "" || p.Native == "" || p.OpID == "" {
		return invalid("graph, logical, native and operation id are required")
	}
	return nil
}

const insertIncarnationSQL = `
	INSERT INTO incarnations (graph, logical, native, tree, op_id)
	VALUES ($1, $2, $3, $4, $5)
	ON CONFLICT (graph, native) DO NOTHING
	RETURNING ` + incarnationColumns

func (p IncarnationInsertParams) args() []any {
	return []any{p.Graph, p.Logical, p.Native, cmp.Or(p.Tree, p.Native), p.OpID}
}

// inserted says what the insert of p answered (inc, err) in tx, whose savepoint around
// the insert has been rolled back if it failed: another open incarnation of the name
// (*IncarnationExistsError), or the native name taken — by this insert before, or else
// ErrDuplicate.
func (p IncarnationInsertParams) inserted(ctx context.Context, tx pgx.Tx, inc Incarnation, err error) (Incarnation, error) {
	switch {
	case constraintOf(err, codeUniqueViolation) == incarnationsOneOpen:
		exists := &IncarnationExistsError{Graph: p.Graph, Logical: p.Logical}
		if open, err := scanIncarnation(tx.QueryRow(ctx, openIncarnationSQL, p.Graph, p.Logical)); err == nil {
			exists.Existing = open
		}
		err = exists
	case errors.Is(err, pgx.ErrNoRows):
		// The native name exists: a retry of this insert, or a clash.
		tree := cmp.Or(p.Tree, p.Native)
		inc, err = getIncarnation(ctx, tx, p.Graph, p.Native)
		if err == nil && (inc.Logical != p.Logical || inc.Tree != tree || inc.OpID != p.OpID) {
			err = fmt.Errorf("%w: incarnation %s exists for branch %q, operation %s",
				ErrDuplicate, p.Native, inc.Logical, inc.OpID)
		}
	}
	return inc, err
}

// IncarnationGetByNativeParams names an incarnation.
type IncarnationGetByNativeParams struct {
	Graph  string
	Native string
}

// IncarnationGetByNative returns an incarnation, or ErrNotFound.
func (c *Catalog) IncarnationGetByNative(ctx context.Context, p IncarnationGetByNativeParams) (Incarnation, error) {
	return c.IncarnationGetByNativeTx(ctx, c.pool, p)
}

// IncarnationGetByNativeTx is IncarnationGetByNative on q, the pool or the caller's transaction.
func (c *Catalog) IncarnationGetByNativeTx(ctx context.Context, q Querier, p IncarnationGetByNativeParams) (Incarnation, error) {
	return wrapped[Incarnation](c, fmt.Sprintf("get incarnation %q", p.Native))(getIncarnation(ctx, q, p.Graph, p.Native))
}

// IncarnationListByLogicalParams names a logical branch.
type IncarnationListByLogicalParams struct {
	Graph   string
	Logical string
}

// IncarnationListByLogical returns every incarnation of a logical branch, oldest first.
func (c *Catalog) IncarnationListByLogical(ctx context.Context, p IncarnationListByLogicalParams) ([]Incarnation, error) {
	what := fmt.Sprintf("list incarnations of %q", p.Logical)
	return queryAll(ctx, c, c.pool, what, scanned(scanIncarnation), `
		SELECT `+incarnationColumns+` FROM incarnations
		WHERE graph = $1 AND logical = $2
		ORDER BY created_at, native`, p.Graph, p.Logical)
}

// IncarnationOpenParams names a logical branch.
type IncarnationOpenParams struct {
	Graph   string
	Logical string
}

// IncarnationOpen returns the logical branch's open incarnation, live or unsettled (at
// most one), or ErrNotFound.
//
// It is a hint, never an answer: the ledger may lag storage, so a caller reads the ref it
// names and falls back to storage's own answer (graph.ResolveBranchHinted).
func (c *Catalog) IncarnationOpen(ctx context.Context, p IncarnationOpenParams) (Incarnation, error) {
	return queryOne(ctx, c, c.pool, fmt.Sprintf("get open incarnation of %q", p.Logical), scanIncarnation, openIncarnationSQL, p.Graph, p.Logical)
}

// IncarnationListByNativesParams names incarnations of one graph by native name.
type IncarnationListByNativesParams struct {
	Graph   string
	Natives []string
}

// IncarnationListByNatives returns, in native order, the incarnations among Natives the
// ledger has, in one query.
func (c *Catalog) IncarnationListByNatives(ctx context.Context, p IncarnationListByNativesParams) ([]Incarnation, error) {
	what := fmt.Sprintf("list %d incarnations of graph %q by native", len(p.Natives), p.Graph)
	if len(p.Natives) == 0 {
		return nil, nil
	}
	return queryAll(ctx, c, c.pool, what, scanned(scanIncarnation), `
		SELECT `+incarnationColumns+` FROM incarnations
		WHERE graph = $1 AND native = ANY($2::text[])
		ORDER BY native`, p.Graph, p.Natives)
}

// IncarnationListByGraphParams selects a graph's incarnations in States (none: all).
type IncarnationListByGraphParams struct {
	Graph  string
	States []IncarnationState
}

// IncarnationListByGraph returns a graph's incarnations in the given states, by logical
// name then age.
func (c *Catalog) IncarnationListByGraph(ctx context.Context, p IncarnationListByGraphParams) ([]Incarnation, error) {
	what := fmt.Sprintf("list incarnations of graph %q", p.Graph)
	return queryAll(ctx, c, c.pool, what, scanned(scanIncarnation), `
		SELECT `+incarnationColumns+` FROM incarnations
		WHERE graph = $1 AND (coalesce(cardinality($2::text[]), 0) = 0 OR state = ANY($2))
		ORDER BY logical, created_at, native`, p.Graph, p.States)
}

// IncarnationSetStateParams moves an incarnation from one state to another.
type IncarnationSetStateParams struct {
	Graph    string
	Native   string
	From, To IncarnationState // a legal move (CanTransition) from the state it must be in
}

// IncarnationSetState moves an incarnation from From to To, stamping SettledAt when To is
// settled. One already in To is returned unchanged; in another state it is a
// *StateConflictError. An illegal move is ErrInvalid; a missing incarnation ErrNotFound.
func (c *Catalog) IncarnationSetState(ctx context.Context, p IncarnationSetStateParams) (Incarnation, error) {
	return inTx(ctx, c, func(tx pgx.Tx) (Incarnation, error) { return c.IncarnationSetStateTx(ctx, tx, p) })
}

// IncarnationSetStateTx is IncarnationSetState inside the caller's transaction.
func (c *Catalog) IncarnationSetStateTx(ctx context.Context, tx pgx.Tx, p IncarnationSetStateParams) (Incarnation, error) {
	what := fmt.Sprintf("set incarnation %q %s", p.Native, p.To)
	if !CanTransition(p.From, p.To) {
		return Incarnation{}, c.wrap(what, invalid("incarnation cannot move from %q to %q", p.From, p.To))
	}
	inc, err := scanIncarnation(tx.QueryRow(ctx, `
		UPDATE incarnations
		SET state = $4, updated_at = now(),
		    settled_at = CASE WHEN $4 IN ('live', 'unpublished', 'retired') THEN coalesce(settled_at, now()) END
		WHERE graph = $1 AND native = $2 AND state = $3
		RETURNING `+incarnationColumns, p.Graph, p.Native, p.From, p.To))
	if errors.Is(err, pgx.ErrNoRows) {
		inc, err = getIncarnation(ctx, tx, p.Graph, p.Native)
		if err == nil && inc.State != p.To {
			err = &StateConflictError{Entity: "incarnation", ID: p.Native, Expected: string(p.From), Current: string(inc.State)}
		}
	}
	return wrapped[Incarnation](c, what)(inc, err)
}
