package catalog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// IncarnationSettleParams settles an incarnation from whatever unsettled state it is in
// To live or unpublished.
type IncarnationSettleParams struct {
	Graph  string
	Native string
	To     IncarnationState
}

// IncarnationSettleResult reports the move from From (To when already settled there),
// entered at FromSince (zero when already settled).
type IncarnationSettleResult struct {
	Incarnation Incarnation
	From        IncarnationState
	FromSince   time.Time
}

// IncarnationSettle moves an unsettled incarnation to To in one statement. One already in
// To is returned unchanged; one settled otherwise is a *StateConflictError; a missing one
// ErrNotFound.
func (c *Catalog) IncarnationSettle(ctx context.Context, p IncarnationSettleParams) (IncarnationSettleResult, error) {
	return inTx(ctx, c, func(tx pgx.Tx) (IncarnationSettleResult, error) { return c.IncarnationSettleTx(ctx, tx, p) })
}

// IncarnationSettleTx is IncarnationSettle inside the caller's transaction.
func (c *Catalog) IncarnationSettleTx(ctx context.Context, tx pgx.Tx, p IncarnationSettleParams) (IncarnationSettleResult, error) {
	what := fmt.Sprintf("settle incarnation %q %s", p.Native, p.To)
	if p.To != IncarnationLive && p.To != IncarnationUnpublished {
		return IncarnationSettleResult{}, c.wrap(what, invalid("an incarnation settles to live or unpublished, not %q", p.To))
	}
	var r IncarnationSettleResult
	var err error
	r.Incarnation, err = scanIncarnation(extraRow{Row: tx.QueryRow(ctx, `
		UPDATE incarnations AS i
		SET state = $3, updated_at = now(), settled_at = coalesce(i.settled_at, now())
		FROM (SELECT native AS n, state AS prev, updated_at AS prev_at FROM incarnations
		      WHERE graph = $1 AND native = $2 FOR UPDATE) AS o
		WHERE i.graph = $1 AND i.native = o.n AND i.state IN ('intent', 'cloned', 'in_doubt')
		RETURNING `+incarnationColumns+`, o.prev, o.prev_at`,
		p.Graph, p.Native, p.To), extra: []any{&r.From, &r.FromSince}})
	if errors.Is(err, pgx.ErrNoRows) {
		r.Incarnation, err = getIncarnation(ctx, tx, p.Graph, p.Native)
		if err == nil && r.Incarnation.State != p.To {
			err = &StateConflictError{Entity: "incarnation", ID: p.Native,
				Expected: "intent, cloned or in_doubt", Current: string(r.Incarnation.State)}
		}
		r.From = r.Incarnation.State
	}
	return wrapped[IncarnationSettleResult](c, what)(r, err)
}

// KeyReclaimedParams asks whether cleanup reclaimed a key.
type KeyReclaimedParams struct {
	Graph string
	Key   string
}

// KeyReclaimed returns the id of a cleanup run of graph that condemned key (and so
// deleted it or will), or false: a missing object cleanup never condemned was never there.
func (c *Catalog) KeyReclaimed(ctx context.Context, p KeyReclaimedParams) (string, bool, error) {
	var run string
	err := c.pool.QueryRow(ctx, `
		SELECT run_id FROM cleanup_condemned WHERE graph = $1 AND key = $2 LIMIT 1`, p.Graph, p.Key).Scan(&run)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, c.wrap(fmt.Sprintf("look up whether cleanup reclaimed %q", p.Key), err)
	}
	return run, true, nil
}
