package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

const operationColumns = `id, kind, graph, inputs, state, coalesce(outcome, ''), coalesce(error, ''),
	coalesce(workflow_id, ''), coalesce(run_id, ''), created_at, updated_at, finished_at,
	coalesce(fingerprint, ''), coalesce(owner_run, ''), coalesce(phase, ''), coalesce(waiting, ''), pending, settle_attempts, result`

// fingerprintSQL computes a row's fingerprint from its kind, graph and inputs ($2, $3, $4).
const fingerprintSQL = `encode(sha256(convert_to($2 || E'\n' || $3 || E'\n' || $4::jsonb::text, 'UTF8')), 'hex')`

func scanOperation(row pgx.Row) (Operation, error) {
	var op Operation
	var finished *time.Time
	err := row.Scan(&op.ID, &op.Kind, &op.Graph, &op.Inputs, &op.State, &op.Outcome, &op.Error,
		&op.WorkflowID, &op.RunID, &op.CreatedAt, &op.UpdatedAt, &finished,
		&op.Fingerprint, &op.OwnerRun, &op.Phase, &op.Waiting, &op.Pending, &op.SettleAttempts, &op.Result)
	op.FinishedAt = timeOrZero(finished)
	return op, err
}

func getOperation(ctx context.Context, q Querier, id string) (Operation, error) {
	return scanOperation(q.QueryRow(ctx, `SELECT `+operationColumns+` FROM operations WHERE id = $1`, id))
}

// OperationInsertParams records the start of an operation.
type OperationInsertParams struct {
	// ID is the idempotency key: a ULID (NewID) or derived from the workflow id.
	ID         string
	Kind       OperationKind
	Graph      string
	Inputs     json.RawMessage // JSON; defaults to {}
	WorkflowID string
	RunID      string
	// Owner, when set, claims the row for this run (see OperationInsertTx); "" records
	// it unowned.
	Owner string
}

// OperationInsert records a running operation. Repeating it with the same id, kind, graph
// and inputs returns the existing row; the same id with other content is ErrDuplicate.
func (c *Catalog) OperationInsert(ctx context.Context, p OperationInsertParams) (Operation, error) {
	return inTx(ctx, c, func(tx pgx.Tx) (Operation, error) { return c.OperationInsertTx(ctx, tx, p) })
}

// OperationInsertTx is OperationInsert inside the caller's transaction. With Owner set
// the insert is a claim. A new row is Owner's. An existing unfinished row
// of the same request is claimed when it is Owner's already or was recorded by the same
// workflow id (whose earlier run has closed: Temporal runs one at a time); recorded by
// another workflow it is an *OwnedError. A finished row is returned as is. Callers compare
// the row's OwnerRun with Owner to know whether they own it.
func (c *Catalog) OperationInsertTx(ctx context.Context, tx pgx.Tx, p OperationInsertParams) (Operation, error) {
	what := fmt.Sprintf("insert operation %q", p.ID)
	if p.ID == "" || p.Graph == "" {
		return Operation{}, c.wrap(what, invalid("operation id and graph are required"))
	}
	if !slices.Contains(OperationKinds, p.Kind) {
		return Operation{}, c.wrap(what, invalid("unknown operation kind %q", p.Kind))
	}
	inputs, err := jsonArg(p.Inputs, `{}`, "inputs are")
	if err != nil {
		return Operation{}, c.wrap(what, err)
	}
	op, err := scanOperation(tx.QueryRow(ctx, `
		INSERT INTO operations (id, kind, graph, inputs, workflow_id, run_id, owner_run, fingerprint)
		VALUES ($1, $2, $3, $4::jsonb, NULLIF($5, ''), NULLIF($6, ''), NULLIF($7, ''), `+fingerprintSQL+`)
		ON CONFLICT (id) DO NOTHING
		RETURNING `+operationColumns,
		p.ID, p.Kind, p.Graph, inputs, p.WorkflowID, p.RunID, p.Owner))
	if !errors.Is(err, pgx.ErrNoRows) {
		return wrapped[Operation](c, what)(op, err)
	}
	// The id exists: a retry of this insert, or a clash.
	var same bool
	existing, err := getOperation(ctx, tx, p.ID)
	if err == nil {
		err = tx.QueryRow(ctx, `SELECT inputs = $2::jsonb FROM operations WHERE id = $1`, p.ID, inputs).Scan(&same)
	}
	if err != nil {
		return Operation{}, c.wrap(what, err)
	}
	if existing.Kind != p.Kind || existing.Graph != p.Graph || !same {
		return Operation{}, c.wrap(what, &OperationReusedError{ID: p.ID, Kind: existing.Kind, Graph: existing.Graph,
			Differences: requestDifferences(existing, p.Kind, p.Graph, json.RawMessage(*inputs))})
	}
	if p.Owner == "" || existing.State == OperationDone || existing.OwnerRun == p.Owner {
		return existing, nil
	}
	if existing.WorkflowID != "" && existing.WorkflowID != p.WorkflowID {
		return Operation{}, c.wrap(what, &OwnedError{ID: p.ID, WorkflowID: existing.WorkflowID, Owner: existing.OwnerRun})
	}
	return queryOne(ctx, c, tx, what, scanOperation, `
		UPDATE operations SET owner_run = $2, workflow_id = NULLIF($3, ''), run_id = NULLIF($4, ''), updated_at = now()
		WHERE id = $1 AND state <> 'done'
		RETURNING `+operationColumns, p.ID, p.Owner, p.WorkflowID, p.RunID)
}

// OperationGetParams names an operation.
type OperationGetParams struct {
	ID string
}

// OperationGet returns an operation, or ErrNotFound.
func (c *Catalog) OperationGet(ctx context.Context, p OperationGetParams) (Operation, error) {
	return wrapped[Operation](c, fmt.Sprintf("get operation %q", p.ID))(getOperation(ctx, c.pool, p.ID))
}

// OperationSetStateParams moves an unfinished operation From the state it must be in To
// another; both are running or in_doubt (OperationFinish finishes).
type OperationSetStateParams struct {
	ID       string
	From, To OperationState
	// Owner, when set, is the run that must own the row (ErrNotOwner otherwise).
	Owner string
}

// OperationSetState moves an operation from From to To. An operation already in To is
// returned unchanged; one in any other state is a *StateConflictError.
func (c *Catalog) OperationSetState(ctx context.Context, p OperationSetStateParams) (Operation, error) {
	what := fmt.Sprintf("set operation %q %s", p.ID, p.To)
	unfinished := []OperationState{OperationRunning, OperationInDoubt}
	if !slices.Contains(unfinished, p.From) || !slices.Contains(unfinished, p.To) {
		return Operation{}, c.wrap(what, invalid("operation states running and in_doubt only; finish with OperationFinish"))
	}
	op, err := scanOperation(c.pool.QueryRow(ctx, `
		UPDATE operations SET state = $3, updated_at = now()
		WHERE id = $1 AND state = $2 AND ($4 = '' OR owner_run = $4)
		RETURNING `+operationColumns, p.ID, p.From, p.To, p.Owner))
	if errors.Is(err, pgx.ErrNoRows) { // missing, already in To, or elsewhere
		op, err = getOperation(ctx, c.pool, p.ID)
		if err == nil && op.State != p.To {
			err = &StateConflictError{Entity: "operation", ID: p.ID, Expected: string(p.From), Current: string(op.State)}
		}
		if err == nil && p.Owner != "" && op.OwnerRun != p.Owner {
			err = &NotOwnerError{ID: p.ID, Owner: op.OwnerRun, Caller: p.Owner}
		}
	}
	return wrapped[Operation](c, what)(op, err)
}

// OperationFinishParams records an operation's definitive outcome.
type OperationFinishParams struct {
	ID      string
	Outcome Outcome
	Error   string // a detail for people, usually of an outcome other than success
	// Owner, when set, is the run that must own the row (*NotOwnerError otherwise; a
	// row Owner finished with the same outcome is returned unchanged).
	Owner string
	// Result, when set, is the result the operation reported (JSON), kept with its outcome.
	Result json.RawMessage
}

// OperationFinish moves a running or in_doubt operation to done with its outcome and, in
// the same transaction, releases its pins. An operation already done with the same
// outcome is returned unchanged; done with another outcome is a *StateConflictError.
func (c *Catalog) OperationFinish(ctx context.Context, p OperationFinishParams) (Operation, error) {
	return inTx(ctx, c, func(tx pgx.Tx) (Operation, error) { return c.OperationFinishTx(ctx, tx, p) })
}

// OperationFinishTx is OperationFinish inside the caller's transaction. It takes the
// operation's graph lock in shared mode, held until the transaction ends.
func (c *Catalog) OperationFinishTx(ctx context.Context, tx pgx.Tx, p OperationFinishParams) (Operation, error) {
	what := fmt.Sprintf("finish operation %q", p.ID)
	if !slices.Contains(Outcomes, p.Outcome) {
		return Operation{}, c.wrap(what, invalid("unknown outcome %q", p.Outcome))
	}
	result, err := jsonArg(p.Result, "", "result is")
	if err != nil {
		return Operation{}, c.wrap(what, err)
	}
	// One round trip (pipeline): the graph's lock, then the update.
	var graph string
	var op Operation
	b := &pgx.Batch{}
	queueLockGraphOf(b, "operation", p.ID, shared, &graph)
	b.Queue(`
		UPDATE operations
		SET state = 'done', outcome = $2, error = NULLIF($3, ''), updated_at = now(), finished_at = now(),
		    pending = NULL, phase = 'done', waiting = NULL, result = $5::jsonb
		WHERE id = $1 AND state <> 'done' AND ($4 = '' OR owner_run = $4)
		RETURNING `+operationColumns, p.ID, p.Outcome, p.Error, p.Owner, result).QueryRow(func(row pgx.Row) error {
		op, err = scanOperation(row)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // answered below
		}
		return err
	})
	if berr := tx.SendBatch(ctx, b).Close(); berr != nil {
		return Operation{}, c.wrap(what, berr)
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		op, err = getOperation(ctx, tx, p.ID)
		if err == nil && p.Owner != "" && op.OwnerRun != p.Owner {
			err = &NotOwnerError{ID: p.ID, Owner: op.OwnerRun, Caller: p.Owner}
		}
		if err == nil && op.Outcome != p.Outcome {
			err = &StateConflictError{Entity: "operation", ID: p.ID,
				Expected: "running or in_doubt", Current: fmt.Sprintf("done (%s)", op.Outcome)}
		}
	case err == nil:
		err = releasePins(ctx, tx, p.ID, graph)
	}
	return wrapped[Operation](c, what)(op, err)
}

// lockGraphOf returns the graph of the operation or cleanup run (entity) id, or
// ErrNotFound, and takes its lock (lockGraph) in mode, in one statement.
func lockGraphOf(ctx context.Context, tx pgx.Tx, entity, id string, mode lockMode) (string, error) {
	var graph string
	err := scanLockedGraph(tx.QueryRow(ctx, lockGraphOfSQL(entity, mode), id), entity, id, &graph)
	return graph, err
}

// queueLockGraphOf queues lockGraphOf's statement in b; graph is set when b's results
// are read.
func queueLockGraphOf(b *pgx.Batch, entity, id string, mode lockMode, graph *string) {
	b.Queue(lockGraphOfSQL(entity, mode), id).QueryRow(func(row pgx.Row) error {
		return scanLockedGraph(row, entity, id, graph)
	})
}

// lockGraphOfSQL reads the graph of the row and takes the graph's lock (the function's
// void result, as text, is ignored).
func lockGraphOfSQL(entity string, mode lockMode) string {
	table := map[string]string{"operation": "operations", "cleanup run": "cleanup_runs"}[entity]
	return `SELECT graph, ` + graphLockCall(mode, "graph") + `::text FROM ` + table + ` WHERE id = $1`
}

func scanLockedGraph(row pgx.Row, entity, id string, graph *string) error {
	var void string
	err := row.Scan(graph, &void)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: %s %q", ErrNotFound, entity, id)
	}
	return err
}

// OperationListParams filters the audit log; empty fields do not filter. Limit caps the
// rows, newest first: defaults to 100, at most 1000.
type OperationListParams struct {
	Graph string
	Kind  OperationKind
	State OperationState
	// Phase, when set, selects unfinished operations in that phase ("waiting", say).
	Phase string
	Limit int
}

// pageSize is a list's page size when none is asked for, and the largest it takes.
type pageSize struct{ def, most int }

var listPage, condemnedPage = pageSize{def: 100, most: 1000}, pageSize{def: 1000, most: 10000}

// OperationList returns operations matching the filters, newest first.
func (c *Catalog) OperationList(ctx context.Context, p OperationListParams) ([]Operation, error) {
	return queryPage(ctx, c, "list operations", p.Limit, listPage, scanned(scanOperation), `
		SELECT `+operationColumns+` FROM operations
		WHERE ($1 = '' OR graph = $1) AND ($2 = '' OR kind = $2) AND ($3 = '' OR state = $3)
			AND ($4 = '' OR (phase = $4 AND state <> 'done'))
		ORDER BY created_at DESC, id DESC
		LIMIT $5`, p.Graph, p.Kind, p.State, p.Phase)
}

// queryPage is queryAll on the pool for one page of a list, whose size, limit or else
// size.def, is the query's last argument.
func queryPage[T any](ctx context.Context, c *Catalog, what string, limit int, size pageSize,
	scan pgx.RowToFunc[T], sql string, args ...any) ([]T, error) {
	switch {
	case limit == 0:
		limit = size.def
	case limit < 0 || limit > size.most:
		return nil, c.wrap(what, invalid("limit must be between 1 and %d, got %d", size.most, limit))
	}
	return queryAll(ctx, c, c.pool, what, scan, sql, append(args, limit)...)
}

// requestDifferences names, for people, how a request (kind, graph, inputs) differs from
// the operation recorded: the kind, the graph, and each top-level input that differs.
func requestDifferences(recorded Operation, kind OperationKind, graph string, inputs json.RawMessage) []string {
	var out []string
	if kind != recorded.Kind {
		out = append(out, fmt.Sprintf("the kind is %s, the first request's %s", kind, recorded.Kind))
	}
	if graph != recorded.Graph {
		out = append(out, fmt.Sprintf("graph is %q, the first request's %q", graph, recorded.Graph))
	}
	var now, first map[string]json.RawMessage
	if json.Unmarshal(inputs, &now) != nil || json.Unmarshal(recorded.Inputs, &first) != nil {
		return append(out, "the inputs differ")
	}
	keys := slices.AppendSeq(slices.Collect(maps.Keys(now)), maps.Keys(first))
	slices.Sort(keys)
	for _, k := range slices.Compact(keys) {
		a, b := canonicalJSON(now[k]), canonicalJSON(first[k])
		if a != b {
			out = append(out, fmt.Sprintf("%s is %s, the first request's %s", k, a, b))
		}
	}
	return out
}

// canonicalJSON re-encodes a JSON value (jsonb drops the input's spacing), "none" when absent.
func canonicalJSON(v json.RawMessage) string {
	if len(v) == 0 {
		return "none"
	}
	var x any
	if json.Unmarshal(v, &x) != nil {
		return string(v)
	}
	b, _ := json.Marshal(x)
	return string(b)
}
