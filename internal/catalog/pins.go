package catalog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// keysConflict reports whether a pin on one key and a condemnation of the other touch the
// same object: equal keys, or one ends in "/" and is a prefix of the other.
func keysConflict(a, b string) bool {
	return a == b ||
		(strings.HasSuffix(a, "/") && strings.HasPrefix(b, a)) ||
		(strings.HasSuffix(b, "/") && strings.HasPrefix(a, b))
}

// conflictProbes returns what finds the keys conflicting with keys: exact, each key and
// its every proper prefix ending in "/", and prefixes, the keys ending in "/".
func conflictProbes(keys []string) (exact, prefixes []string) {
	for _, key := range keys {
		exact = append(exact, key)
		for i := 0; i < len(key)-1; i++ {
			if key[i] == '/' {
				exact = append(exact, key[:i+1])
			}
		}
		if strings.HasSuffix(key, "/") {
			prefixes = append(prefixes, key)
		}
	}
	return exact, prefixes
}

var objectKinds = []ObjectKind{ObjectCommit, ObjectTableVersion, ObjectTree, ObjectData}

// PinsRegisterParams names what an in-flight operation needs retained.
type PinsRegisterParams struct {
	OpID string // an operation that exists and is not done
	// Graph is the operation's graph, or "" for it; any other is ErrInvalid.
	Graph string
	// Pins are storage keys; a key ending in "/" pins every key under it.
	Pins []Pin
	// Owner, when set, is the run that must own the operation (ErrNotOwner otherwise).
	Owner string
}

// PinsRegister records pins for an operation unless, under the graph lock, a pin conflicts
// with the condemned set (condemned or deleted) of a running mark or sweep run of the
// graph: then nothing is recorded and the error is a *CondemnedError listing the refused
// keys. Registering a pin the operation holds, or released, holds it again.
func (c *Catalog) PinsRegister(ctx context.Context, p PinsRegisterParams) error {
	return c.InTx(ctx, func(tx pgx.Tx) error { return c.PinsRegisterTx(ctx, tx, p) })
}

// PinsRegisterTx is PinsRegister inside the caller's transaction, which holds the graph
// lock (shared) until it ends.
func (c *Catalog) PinsRegisterTx(ctx context.Context, tx pgx.Tx, p PinsRegisterParams) error {
	what := fmt.Sprintf("register pins of operation %q", p.OpID)
	if len(p.Pins) == 0 {
		return nil
	}
	kinds := make([]string, 0, len(p.Pins))
	keys := make([]string, 0, len(p.Pins))
	seen := make(map[Pin]bool, len(p.Pins))
	for _, pin := range p.Pins {
		if pin.Key == "" || !slices.Contains(objectKinds, pin.Kind) {
			return c.wrap(what, invalid("pin %q of kind %q: need a key and a known kind", pin.Key, pin.Kind))
		}
		if seen[pin] {
			continue
		}
		seen[pin] = true
		kinds = append(kinds, string(pin.Kind))
		keys = append(keys, pin.Key)
	}
	exact, prefixes := conflictProbes(keys)
	graph := p.Graph
	if graph == "" { // the lock and the condemned keys are the operation's graph's
		var err error
		if graph, err = c.openOperationGraph(ctx, tx, p.OpID, ""); err != nil {
			return c.wrap(what, err)
		}
	}
	// One round trip (pipeline): the operation's row, checked (and locked, for an owner),
	// the graph's lock, the condemned keys among ours, and the pins. A check that fails
	// fails the transaction, which takes back the statements sent after it.
	var condemned []string
	b := &pgx.Batch{}
	if p.Owner != "" {
		b.Queue(lockOperationSQL, p.OpID).QueryRow(func(row pgx.Row) error {
			op, err := scanLockedOperation(row, p.OpID)
			if err == nil {
				err = pinnable(p.OpID, graph, op.Graph, op.State)
			}
			if err == nil {
				_, err = checkOwned(op, p.Owner)
			}
			return err
		})
	} else {
		b.Queue(operationGraphSQL, p.OpID).QueryRow(func(row pgx.Row) error {
			opGraph, state, err := scanOperationGraph(row, p.OpID)
			if err == nil {
				err = pinnable(p.OpID, graph, opGraph, state)
			}
			return err
		})
	}
	queueLockGraph(b, graph, shared)
	// With no condemning run of the graph running (the common case, true until commit
	// under the lock) the EXISTS filter skips both probes of the condemned set.
	b.Queue(`
		SELECT c.key FROM cleanup_condemned c
		JOIN cleanup_runs r ON r.id = c.run_id AND r.state = 'running' AND r.mode <> 'dry_run'
		WHERE EXISTS (SELECT 1 FROM cleanup_runs WHERE graph = $1 AND state = 'running' AND mode <> 'dry_run')
		  AND c.graph = $1 AND c.key = ANY($2::text[])
		UNION
		SELECT c.key FROM unnest($3::text[]) AS p(prefix)
		JOIN cleanup_condemned c ON c.graph = $1 AND c.key >= p.prefix AND c.key < left(p.prefix, -1) || '0'
		JOIN cleanup_runs r ON r.id = c.run_id AND r.state = 'running' AND r.mode <> 'dry_run'
		WHERE EXISTS (SELECT 1 FROM cleanup_runs WHERE graph = $1 AND state = 'running' AND mode <> 'dry_run')`,
		graph, exact, prefixes).Query(func(rows pgx.Rows) error {
		var err error
		if condemned, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil || len(condemned) == 0 {
			return err
		}
		refused := &CondemnedError{Graph: graph}
		for _, key := range keys {
			if slices.ContainsFunc(condemned, func(ck string) bool { return keysConflict(key, ck) }) &&
				!slices.Contains(refused.Keys, key) {
				refused.Keys = append(refused.Keys, key)
			}
		}
		return refused
	})
	b.Queue(`
		INSERT INTO op_pins (op_id, graph, kind, key)
		SELECT $1, $2, t.kind, t.key FROM unnest($3::text[], $4::text[]) AS t(kind, key)
		ON CONFLICT (op_id, kind, key) DO UPDATE SET released_at = NULL, released_seq = NULL`,
		p.OpID, graph, kinds, keys)
	return c.wrap(what, tx.SendBatch(ctx, b).Close())
}

// openOperationGraph returns the graph of an operation that may take pins: existing
// (ErrNotFound), not done (*StateConflictError), and graph's when one is given.
func (c *Catalog) openOperationGraph(ctx context.Context, tx pgx.Tx, opID, graph string) (string, error) {
	opGraph, state, err := scanOperationGraph(tx.QueryRow(ctx, operationGraphSQL, opID), opID)
	if err == nil {
		err = pinnable(opID, graph, opGraph, state)
	}
	return opGraph, err
}

const operationGraphSQL = `SELECT graph, state FROM operations WHERE id = $1`

func scanOperationGraph(row pgx.Row, opID string) (string, OperationState, error) {
	var graph string
	var state OperationState
	err := row.Scan(&graph, &state)
	if errors.Is(err, pgx.ErrNoRows) {
		err = fmt.Errorf("%w: operation %q", ErrNotFound, opID)
	}
	return graph, state, err
}

// pinnable says whether an operation of opGraph in state may take pins on graph ("" for
// its own): not when done (*StateConflictError) or of another graph.
func pinnable(opID, graph, opGraph string, state OperationState) error {
	if graph != "" && graph != opGraph {
		return invalid("operation %q works on graph %q, not %q", opID, opGraph, graph)
	}
	if state == OperationDone {
		return &StateConflictError{Entity: "operation", ID: opID, Expected: "running or in_doubt", Current: string(state)}
	}
	return nil
}

// PinsReleaseParams names the operation whose pins to release.
type PinsReleaseParams struct {
	OpID string
}

// PinsRelease releases every pin the operation holds; a cleanup run that started before
// keeps treating them as pinned. Releasing twice, or no pins, succeeds.
func (c *Catalog) PinsRelease(ctx context.Context, p PinsReleaseParams) error {
	return c.InTx(ctx, func(tx pgx.Tx) error {
		graph, err := lockGraphOf(ctx, tx, "operation", p.OpID, shared)
		if err == nil {
			err = releasePins(ctx, tx, p.OpID, graph)
		}
		return c.wrap(fmt.Sprintf("release pins of operation %q", p.OpID), err)
	})
}

// releasePins releases an operation's held pins but its late-put ones, then forgets the
// graph's released pins no running cleanup run needs. The caller holds the graph lock.
// With a run running it stamps them released with one fresh ledger epoch; with none
// (none can start under the lock) it deletes them at once: the same end state.
func releasePins(ctx context.Context, tx pgx.Tx, opID, graph string) error {
	b := &pgx.Batch{} // one round trip (pipeline): the release, then the prune
	b.Queue(`
		WITH running AS (
			SELECT EXISTS (SELECT 1 FROM cleanup_runs WHERE graph = $2 AND state = 'running') AS yes
		), forgotten AS (
			DELETE FROM op_pins WHERE op_id = $1 AND NOT late_put AND NOT (SELECT yes FROM running)
		)
		UPDATE op_pins SET released_at = now(), released_seq = (SELECT nextval('ledger_epoch'))
		WHERE op_id = $1 AND NOT late_put AND released_seq IS NULL AND (SELECT yes FROM running)`,
		opID, graph)
	queuePrunePins(b, graph)
	return tx.SendBatch(ctx, b).Close()
}

// prunePins deletes released pins older than every running cleanup run of the graph,
// under the graph lock. Rows another prune is deleting are skipped, so two prunes never
// wait for, or deadlock on, each other.
func prunePins(ctx context.Context, tx pgx.Tx, graph string) error {
	_, err := tx.Exec(ctx, prunePinsSQL, graph)
	return err
}

// queuePrunePins queues prunePins's statement in b.
func queuePrunePins(b *pgx.Batch, graph string) { b.Queue(prunePinsSQL, graph) }

const prunePinsSQL = `
	DELETE FROM op_pins WHERE ctid IN (
		SELECT ctid FROM op_pins
		WHERE graph = $1 AND released_seq IS NOT NULL AND released_seq < coalesce(
			(SELECT min(start_seq) FROM cleanup_runs WHERE graph = $1 AND state = 'running'),
			9223372036854775807)
		FOR UPDATE SKIP LOCKED)`

// PinsHoldForLatePutParams names a key an operation (existing, not done) put whose put
// may still land; Owner, when set, must own the operation.
type PinsHoldForLatePutParams struct {
	OpID  string
	Pin   Pin
	Owner string
}

// PinsHoldForLatePut registers, as PinsRegister does, a pin on a key the operation put with
// an ambiguous answer, and marks it late_put: the operation's finish does not release it,
// so cleanup keeps the key and a late delivery can never refill a key cleanup emptied.
// Only PinsReleaseLatePuts, an operator's decision, lets it go.
func (c *Catalog) PinsHoldForLatePut(ctx context.Context, p PinsHoldForLatePutParams) error {
	what := fmt.Sprintf("hold %s for a late put of operation %q", p.Pin.Key, p.OpID)
	return c.InTx(ctx, func(tx pgx.Tx) error {
		if err := c.PinsRegisterTx(ctx, tx, PinsRegisterParams{OpID: p.OpID, Pins: []Pin{p.Pin}, Owner: p.Owner}); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE op_pins SET late_put = true WHERE op_id = $1 AND kind = $2 AND key = $3`,
			p.OpID, string(p.Pin.Kind), p.Pin.Key)
		return c.wrap(what, err)
	})
}

// PinsReleaseLatePutsParams names the finished operation whose late-put pins to release.
type PinsReleaseLatePutsParams struct {
	OpID string
}

// PinsReleaseLatePuts releases the late-put pins of a finished operation (the operator's
// word that their puts can no longer land) and returns how many. An unfinished operation
// is a *StateConflictError.
func (c *Catalog) PinsReleaseLatePuts(ctx context.Context, p PinsReleaseLatePutsParams) (int, error) {
	what := fmt.Sprintf("release the late-put pins of operation %q", p.OpID)
	return inTx(ctx, c, func(tx pgx.Tx) (int, error) {
		op, err := lockOperation(ctx, tx, p.OpID)
		if err != nil {
			return 0, c.wrap(what, err)
		}
		if op.State != OperationDone {
			return 0, c.wrap(what, &StateConflictError{Entity: "operation", ID: p.OpID, Expected: "done", Current: string(op.State)})
		}
		if err := lockGraph(ctx, tx, op.Graph, shared); err != nil {
			return 0, c.wrap(what, err)
		}
		tag, err := tx.Exec(ctx, `UPDATE op_pins SET late_put = false WHERE op_id = $1 AND late_put AND released_seq IS NULL`, p.OpID)
		if err == nil {
			err = releasePins(ctx, tx, p.OpID, op.Graph)
		}
		return wrapped[int](c, what)(int(tag.RowsAffected()), err)
	})
}

// PinsListParams selects the pins of a graph: held ones, and with RunID those released
// after that cleanup run started, which it must still treat as pinned.
type PinsListParams struct {
	Graph string
	RunID string
}

// PinsList returns the graph's pins, by key; cleanup treats them as roots.
func (c *Catalog) PinsList(ctx context.Context, p PinsListParams) ([]PinRecord, error) {
	what := fmt.Sprintf("list pins of graph %q", p.Graph)
	var startSeq *int64
	if p.RunID != "" {
		startSeq = new(int64)
		err := c.pool.QueryRow(ctx, `SELECT start_seq FROM cleanup_runs WHERE id = $1 AND graph = $2`,
			p.RunID, p.Graph).Scan(startSeq)
		if errors.Is(err, pgx.ErrNoRows) {
			err = fmt.Errorf("%w: cleanup run %q of graph %q", ErrNotFound, p.RunID, p.Graph)
		}
		if err != nil {
			return nil, c.wrap(what, err)
		}
	}
	return queryAll(ctx, c, c.pool, what, scanPin, `
		SELECT op_id, graph, kind, key, created_at, released_at, late_put FROM op_pins
		WHERE graph = $1 AND (released_seq IS NULL OR released_seq > $2)
		ORDER BY key, op_id`, p.Graph, startSeq)
}

// PinsLatePutListParams selects late-put pins. Empty fields do not filter.
type PinsLatePutListParams struct {
	Graph string
	OpID  string
}

// PinsLatePutList returns the late-put pins, oldest first.
func (c *Catalog) PinsLatePutList(ctx context.Context, p PinsLatePutListParams) ([]PinRecord, error) {
	return queryAll(ctx, c, c.pool, "list late-put pins", scanPin, `
		SELECT op_id, graph, kind, key, created_at, released_at, late_put FROM op_pins
		WHERE late_put AND ($1 = '' OR graph = $1) AND ($2 = '' OR op_id = $2)
		ORDER BY created_at, key`, p.Graph, p.OpID)
}

// scanPin reads op_id, graph, kind, key, created_at, released_at, late_put.
func scanPin(row pgx.CollectableRow) (PinRecord, error) {
	var pr PinRecord
	var released *time.Time
	err := row.Scan(&pr.OpID, &pr.Graph, &pr.Kind, &pr.Key, &pr.CreatedAt, &released, &pr.LatePut)
	pr.ReleasedAt = timeOrZero(released)
	return pr, err
}
