package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// OperationLockOwnedTx locks, for the rest of tx, an unfinished operation row owner owns
// and returns it: the guard the owner's writes alongside take first. Another run's row is
// *NotOwnerError, a finished one *StateConflictError, a missing one ErrNotFound.
func (c *Catalog) OperationLockOwnedTx(ctx context.Context, tx pgx.Tx, id, owner string) (Operation, error) {
	what := fmt.Sprintf("lock operation %q", id)
	op, err := lockOperation(ctx, tx, id)
	if err == nil {
		op, err = checkOwned(op, owner)
	}
	return op, c.wrap(what, err)
}

// checkOwned returns op if owner owns it and it is not done: *NotOwnerError, or else a
// *StateConflictError.
func checkOwned(op Operation, owner string) (Operation, error) {
	if op.OwnerRun != owner {
		return op, &NotOwnerError{ID: op.ID, Owner: op.OwnerRun, Caller: owner}
	}
	if op.State == OperationDone {
		return op, &StateConflictError{Entity: "operation", ID: op.ID, Expected: "running or in_doubt", Current: "done"}
	}
	return op, nil
}

// lockOperation reads and locks an operation's row; a missing row is ErrNotFound.
func lockOperation(ctx context.Context, tx pgx.Tx, id string) (Operation, error) {
	return scanLockedOperation(tx.QueryRow(ctx, lockOperationSQL, id), id)
}

const lockOperationSQL = `SELECT ` + operationColumns + ` FROM operations WHERE id = $1 FOR UPDATE`

func scanLockedOperation(row pgx.Row, id string) (Operation, error) {
	op, err := scanOperation(row)
	if errors.Is(err, pgx.ErrNoRows) {
		return Operation{}, fmt.Errorf("%w: operation %q", ErrNotFound, id)
	}
	return op, err
}

// OperationProgressParams records where an owned, unfinished operation stands.
type OperationProgressParams struct {
	ID    string
	Owner string
	// Phase and Waiting replace the row's; "" leaves them as they are.
	Phase, Waiting string
	// Pending, when set, replaces the row's pending write; ClearPending sets it to NULL.
	Pending        json.RawMessage
	ClearPending   bool
	InDoubt        bool // moves a running operation to in_doubt
	SettleAttempts int  // when positive, replaces the row's count of re-issues
}

// OperationProgress records a phase, a pending write or the in_doubt state of an
// operation the caller owns, in one statement; a row finished or another run's is left
// unchanged (*StateConflictError, *NotOwnerError).
func (c *Catalog) OperationProgress(ctx context.Context, p OperationProgressParams) (Operation, error) {
	return c.OperationProgressTx(ctx, c.pool, p)
}

// OperationProgressTx is OperationProgress on q, the pool or the caller's transaction, so
// a step records its next write with what it records anyway in one commit.
func (c *Catalog) OperationProgressTx(ctx context.Context, q Querier, p OperationProgressParams) (Operation, error) {
	what := fmt.Sprintf("record progress of operation %q", p.ID)
	if p.Owner == "" {
		return Operation{}, c.wrap(what, invalid("owner is required"))
	}
	pending, err := jsonArg(p.Pending, "", "pending is")
	if err != nil {
		return Operation{}, c.wrap(what, err)
	}
	op, err := scanOperation(q.QueryRow(ctx, `
		UPDATE operations SET
		    phase = coalesce(NULLIF($3, ''), phase),
		    waiting = CASE WHEN $3 = '' AND $4 = '' THEN waiting ELSE NULLIF($4, '') END,
		    pending = CASE WHEN $6 THEN NULL WHEN $5::jsonb IS NOT NULL THEN $5::jsonb ELSE pending END,
		    state = CASE WHEN $7 THEN 'in_doubt' ELSE state END,
		    settle_attempts = CASE WHEN $8 > 0 THEN $8 ELSE settle_attempts END,
		    updated_at = now()
		WHERE id = $1 AND owner_run = $2 AND state <> 'done'
		RETURNING `+operationColumns,
		p.ID, p.Owner, p.Phase, p.Waiting, pending, p.ClearPending, p.InDoubt, p.SettleAttempts))
	if errors.Is(err, pgx.ErrNoRows) {
		op, err = getOperation(ctx, q, p.ID)
		switch {
		case err != nil:
		case op.OwnerRun != p.Owner:
			err = &NotOwnerError{ID: p.ID, Owner: op.OwnerRun, Caller: p.Owner}
		default:
			err = &StateConflictError{Entity: "operation", ID: p.ID, Expected: "running or in_doubt", Current: string(op.State)}
		}
		return op, c.wrap(what, err)
	}
	return wrapped[Operation](c, what)(op, err)
}

// OperationTakeOverParams moves an unfinished operation from owner From, found closed,
// to To: the reconciler's claim.
type OperationTakeOverParams struct {
	ID       string
	From, To string
}

// OperationTakeOver claims an unfinished operation for To only while From owns it (a
// compare-and-swap, so a late write of the closed run or a second reconciler never lands
// after it). A row anyone else owns is *NotOwnerError.
func (c *Catalog) OperationTakeOver(ctx context.Context, p OperationTakeOverParams) (Operation, error) {
	what := fmt.Sprintf("take over operation %q", p.ID)
	if p.To == "" {
		return Operation{}, c.wrap(what, invalid("the new owner is required"))
	}
	op, err := scanOperation(c.pool.QueryRow(ctx, `
		UPDATE operations SET owner_run = $3, updated_at = now()
		WHERE id = $1 AND coalesce(owner_run, '') = $2 AND state <> 'done'
		RETURNING `+operationColumns, p.ID, p.From, p.To))
	if errors.Is(err, pgx.ErrNoRows) {
		op, err = c.OperationGet(ctx, OperationGetParams{ID: p.ID})
		switch {
		case err != nil:
		case op.OwnerRun == p.To && op.State != OperationDone:
			return op, nil // taken over already (a retried claim)
		case op.State == OperationDone:
			err = &StateConflictError{Entity: "operation", ID: p.ID, Expected: "running or in_doubt", Current: "done"}
		default:
			err = &NotOwnerError{ID: p.ID, Owner: op.OwnerRun, Caller: p.From}
		}
		return op, c.wrap(what, err)
	}
	return wrapped[Operation](c, what)(op, err)
}

// OperationListUnfinishedParams selects unfinished operations of Graph ("": every one),
// at most Limit (default 100, at most 1000), after row After (zero: from the oldest).
type OperationListUnfinishedParams struct {
	Graph string
	Limit int
	After Operation
}

// OperationListUnfinished returns running and in_doubt operations, oldest first.
func (c *Catalog) OperationListUnfinished(ctx context.Context, p OperationListUnfinishedParams) ([]Operation, error) {
	return queryPage(ctx, c, "list unfinished operations", p.Limit, listPage, scanned(scanOperation), `
		SELECT `+operationColumns+` FROM operations
		WHERE state <> 'done' AND ($1 = '' OR graph = $1)
		  AND ($2 = '' OR (created_at, id) > ($3, $2))
		ORDER BY created_at, id
		LIMIT $4`, p.Graph, p.After.ID, p.After.CreatedAt)
}

// IncarnationListByOpParams names an operation.
type IncarnationListByOpParams struct {
	OpID string
}

// IncarnationListByOp returns the incarnations an operation witnessed, oldest first.
func (c *Catalog) IncarnationListByOp(ctx context.Context, p IncarnationListByOpParams) ([]Incarnation, error) {
	return c.IncarnationListByOpTx(ctx, c.pool, p)
}

// IncarnationListByOpTx is IncarnationListByOp on q, the pool or the caller's transaction.
func (c *Catalog) IncarnationListByOpTx(ctx context.Context, q Querier, p IncarnationListByOpParams) ([]Incarnation, error) {
	what := fmt.Sprintf("list incarnations of operation %q", p.OpID)
	return queryAll(ctx, c, q, what, scanned(scanIncarnation), `SELECT `+incarnationColumns+` FROM incarnations WHERE op_id = $1 ORDER BY created_at, native`, p.OpID)
}
