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
	if err := p.check(); err != nil {
		return Incarnation{}, c.wrap(what, err)
	}
	// One round trip (pipeline): the name root's lock, the open branch whose name is a
	// prefix of this one's or has it as a prefix, a savepoint, and the insert. Where that
	// branch exists or the insert fails, the savepoint is rolled back, which takes back the
	// insert and leaves tx usable; otherwise it stays, as a released one would.
	var other, inc Incarnation
	var found bool
	var insertErr error
	b := &pgx.Batch{}
	queueLockNameRoot(b, p.Graph, p.Logical)
	b.Queue(`
		SELECT `+incarnationColumns+` FROM incarnations
		WHERE graph = $1 AND state IN ('intent', 'cloned', 'in_doubt', 'live')
		  AND (starts_with(logical, $2 || '/') OR starts_with($2, logical || '/'))
		ORDER BY logical LIMIT 1`, p.Graph, p.Logical).QueryRow(func(row pgx.Row) error {
		var err error
		other, err = scanIncarnation(row)
		found = err == nil
		if errors.Is(err, pgx.ErrNoRows) {
			err = nil
		}
		return err
	})
	b.Queue(`SAVEPOINT ` + disjointSavepoint)
	b.Queue(insertIncarnationSQL, p.args()...).QueryRow(func(row pgx.Row) error {
		inc, insertErr = scanIncarnation(row)
		if errors.Is(insertErr, pgx.ErrNoRows) {
			return nil // answered below
		}
		return insertErr
	})
	// The batch answers the first error; the name's other open incarnation, refused by
	// the insert (the last statement), is answered below, after the prefix check.
	err := tx.SendBatch(ctx, b).Close()
	if err != nil && (insertErr == nil || constraintOf(err, codeUniqueViolation) != incarnationsOneOpen) {
		return Incarnation{}, c.wrap(what, err)
	}
	if found || insertErr != nil {
		if _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT `+disjointSavepoint); err != nil {
			return Incarnation{}, c.wrap(what, err)
		}
	}
	if found {
		return Incarnation{}, c.wrap(what, &IncarnationExistsError{Graph: p.Graph, Logical: p.Logical, Existing: other})
	}
	return wrapped[Incarnation](c, what)(p.inserted(ctx, tx, inc, insertErr))
}

// disjointSavepoint is the savepoint IncarnationInsertDisjointTx rolls back to.
const disjointSavepoint = "incarnation_disjoint"
