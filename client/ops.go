package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/api/serviceerror"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/workflows"
)

// LedgerConfig says how Ops reaches the ledger (graft's Postgres database).
type LedgerConfig struct {
	// DatabaseURL is the Postgres connection string. Defaults to $DATABASE_URL, or
	// postgres://postgres@127.0.0.1:5432/test?sslmode=disable.
	DatabaseURL string
	// Schema holds the ledger's tables (the workers' --db-schema). Defaults to "", the
	// connection's own search_path (normally public).
	Schema string
	// MaxConns bounds the connection pool. Defaults to 4.
	MaxConns int
}

// Ops reads graft's operations from the ledger — the audit log every workflow writes —
// and waits on their workflows.
type Ops struct {
	cat *catalog.Catalog
	c   *Client
}

// The ledger's failures: OpenOps's and every Ops method's errors match them with
// errors.Is when that was the cause.
var (
	ErrLedgerUnavailable = errors.New("graft: the ledger (Postgres) is unavailable")
	// ErrLedgerNotMigrated: the schema holds no ledger tables; apply the migrations
	// (graft-worker migrate) or name the workers' schema.
	ErrLedgerNotMigrated = errors.New("graft: the ledger's schema is not migrated")
)

// ledgerErr makes a ledger error match the client's sentinels, so a caller never needs
// graft's internal packages.
func ledgerErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, catalog.ErrUnavailable):
		return &ledgerError{err: err, kind: ErrLedgerUnavailable}
	case errors.Is(err, catalog.ErrNotMigrated):
		return &ledgerError{err: err, kind: ErrLedgerNotMigrated}
	}
	return err
}

type ledgerError struct{ err, kind error }

func (e *ledgerError) Error() string   { return e.err.Error() }
func (e *ledgerError) Unwrap() []error { return []error{e.err, e.kind} }

// OpenOps connects to the ledger. c lets Wait follow an operation's workflow and Stuck
// and Detail ask running workflows what they wait for; with c nil, Wait polls the
// ledger and the views say only what the ledger holds.
func OpenOps(ctx context.Context, cfg LedgerConfig, c *Client) (*Ops, error) {
	maxConns := cfg.MaxConns
	if maxConns <= 0 {
		maxConns = 4
	}
	cat, err := catalog.Open(ctx, catalog.Config{DatabaseURL: cfg.DatabaseURL, Schema: cfg.Schema, MaxConns: int32(maxConns)})
	if err != nil {
		return nil, fmt.Errorf("open the ledger: %w", ledgerErr(err))
	}
	return &Ops{cat: cat, c: c}, nil
}

// Close closes the ledger's connections.
func (o *Ops) Close() { o.cat.Close() }

// OperationState is where an operation stands: running, in_doubt (a write may still
// land; the workflow settles it), then done.
type OperationState string

// The operation states.
const (
	OperationRunning OperationState = "running"
	OperationInDoubt OperationState = "in_doubt"
	OperationDone    OperationState = "done"
)

// OperationKinds are the kinds an operation row can have.
var OperationKinds = []string{"create_branch", "init_graph", "write_table", "cleanup", "merge", "restore", "delete_branch", "tag"}

// OutcomeFailed is the ledger's outcome of an operation that gave up on an
// infrastructure error (its Error says why); not in the vocabulary, it exits 1.
const OutcomeFailed outcome.Outcome = "failed"

// Operation is one row of the ledger's audit log.
type Operation struct {
	ID     string          `json:"id"`
	Kind   string          `json:"kind"` // one of OperationKinds
	Graph  string          `json:"graph"`
	Inputs json.RawMessage `json:"inputs,omitempty"` // as its workflow recorded them
	State  OperationState  `json:"state"`
	// Outcome is set once State is done: an outcome of the vocabulary, or OutcomeFailed.
	Outcome    outcome.Outcome `json:"outcome,omitempty"`
	Error      string          `json:"error,omitempty"`
	WorkflowID string          `json:"workflow_id,omitempty"`
	RunID      string          `json:"run_id,omitempty"`
	CreatedAt  time.Time       `json:"created_at"`
	UpdatedAt  time.Time       `json:"updated_at"`
	// FinishedAt is zero until State is done.
	FinishedAt time.Time `json:"finished_at,omitzero"`
	// Phase and Waiting say where an unfinished operation stands and what it waits for
	// (a waiting merge: "checks: quality passed, schema running; approvals 0/1").
	Phase   string `json:"phase,omitempty"`
	Waiting string `json:"waiting,omitempty"`
}

func operationOf(op catalog.Operation) Operation {
	o := Operation{
		ID: op.ID, Kind: string(op.Kind), Graph: op.Graph, State: OperationState(op.State), Outcome: outcome.Outcome(op.Outcome),
		Error: op.Error, WorkflowID: op.WorkflowID, RunID: op.RunID, CreatedAt: op.CreatedAt, UpdatedAt: op.UpdatedAt,
		FinishedAt: op.FinishedAt,
	}
	if op.State != catalog.OperationDone {
		o.Phase, o.Waiting = op.Phase, op.Waiting
	}
	if len(op.Inputs) > 0 && json.Valid(op.Inputs) {
		o.Inputs = op.Inputs
	}
	return o
}

// OpsFilter selects operations. Empty fields do not filter.
type OpsFilter struct {
	Graph string
	// Kind is one of OperationKinds.
	Kind string
	// State is running, in_doubt or done.
	State string
	// Waiting selects merges waiting for checks and approvals.
	Waiting bool
	// Limit caps the operations returned, newest first. Defaults to 100; at most 1000.
	Limit int
}

// List returns the operations matching f, newest first; a bad filter is invalid.
func (o *Ops) List(ctx context.Context, f OpsFilter) ([]Operation, error) {
	if f.Kind != "" && !slices.Contains(OperationKinds, f.Kind) {
		return nil, outcome.Errorf(outcome.Invalid, "", "unknown operation kind %q; one of %v", f.Kind, OperationKinds)
	}
	states := []OperationState{OperationRunning, OperationInDoubt, OperationDone}
	if f.State != "" && !slices.Contains(states, OperationState(f.State)) {
		return nil, outcome.Errorf(outcome.Invalid, "", "unknown operation state %q; one of %v", f.State, states)
	}
	ops, err := o.cat.OperationList(ctx, catalog.OperationListParams{
		Graph: f.Graph, Kind: catalog.OperationKind(f.Kind), State: catalog.OperationState(f.State), Limit: f.Limit,
		Phase: map[bool]string{true: workflows.PhaseWaiting}[f.Waiting],
	})
	if errors.Is(err, catalog.ErrInvalid) {
		return nil, outcome.Errorf(outcome.Invalid, "", "%v", err)
	}
	if err != nil {
		return nil, fmt.Errorf("list operations: %w", ledgerErr(err))
	}
	out := make([]Operation, len(ops))
	for i, op := range ops {
		out[i] = operationOf(op)
	}
	return out, nil
}

// Show returns one operation; an unknown id is not_found.
func (o *Ops) Show(ctx context.Context, id string) (Operation, error) {
	op, err := o.cat.OperationGet(ctx, catalog.OperationGetParams{ID: id})
	if errors.Is(err, catalog.ErrNotFound) {
		return Operation{}, outcome.Errorf(outcome.NotFound, "", "operation %q does not exist", id)
	}
	if err != nil {
		return Operation{}, fmt.Errorf("show operation %s: %w", id, ledgerErr(err))
	}
	return operationOf(op), nil
}

// Wait waits until the operation's workflow completes — through any in-doubt settling —
// and returns its ledger row then; without a workflow to follow it polls the ledger. A
// workflow that ended while its row is not done (terminated, say: the reconciler
// settles such rows) is an error.
func (o *Ops) Wait(ctx context.Context, id string) (Operation, error) {
	op, err := o.Show(ctx, id)
	if err != nil || op.State == OperationDone {
		return op, err
	}
	if o.c != nil && op.WorkflowID != "" {
		h := &OperationHandle[json.RawMessage]{c: o.c, WorkflowID: op.WorkflowID, RunID: op.RunID, OpID: op.ID,
			run: o.c.tc.GetWorkflow(ctx, op.WorkflowID, op.RunID)}
		_, werr := h.await(ctx, nil)
		if ctx.Err() != nil {
			return op, ctx.Err()
		}
		if op, err = o.Show(ctx, id); err != nil || op.State == OperationDone {
			return op, err
		}
		var nf *serviceerror.NotFound
		var we *WorkflowError
		switch {
		case errors.As(werr, &nf):
			return op, fmt.Errorf("operation %s is %s, and its workflow %s no longer exists", id, op.State, op.WorkflowID)
		case errors.As(werr, &we):
			return op, fmt.Errorf("operation %s is %s: its workflow %s %s", id, op.State, op.WorkflowID, we.Status)
		case werr != nil:
			return op, fmt.Errorf("operation %s is %s: waiting for its workflow %s: %w", id, op.State, op.WorkflowID, werr)
		}
		// The workflow finished its row in the step that ended it; the ledger may lag the
		// history by a moment.
	}
	interval := time.Second
	if o.c != nil {
		interval = o.c.opts.PollInterval
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for op.State != OperationDone {
		select {
		case <-ctx.Done():
			return op, ctx.Err()
		case <-tick.C:
		}
		if op, err = o.Show(ctx, id); err != nil {
			return op, err
		}
	}
	return op, nil
}

// WithClient returns Ops over the same ledger connections that waits and describes
// through c. Closing either closes both.
func (o *Ops) WithClient(c *Client) *Ops { return &Ops{cat: o.cat, c: c} }
