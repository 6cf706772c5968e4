package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/storage"
)

// InitGraphInput is the input of InitGraph.
type InitGraphInput struct {
	OpID, Graph, Author string
	WorkflowID, RunID   string // the workflow's; RunID claims the ledger row
}

// InitGraphResult is what InitGraph proved: done (the graph exists with this operation's
// bytes), conflict (another record or operation's main holds the keys), invalid or refused.
type InitGraphResult struct {
	Outcome outcome.Outcome
	Message string
	Owned   bool   // the ledger row is this run's: the kernel finishes it
	Main    string // native name of main's first incarnation
	Root    string // main's root commit id
	Created bool   // false when the graph was already there with our bytes
	// ForeignKey, with conflict, is a key under the graph's prefix graft did not write for it.
	ForeignKey string
	// Recorded is the result this run recorded when it finished the operation, found
	// when the step runs again after that end (docs/operations.md).
	Recorded json.RawMessage `json:",omitempty"`
}

// InitGraph creates a graph: it records the operation, witnesses main's first incarnation,
// writes the root commit, main's ref and the graph record (graph.Init), then records main
// live and the graph in the ledger. Every byte is a function of the operation's id and time.
func (a *Activities) InitGraph(ctx context.Context, in InitGraphInput) (InitGraphResult, error) {
	if err := firstError(format.ValidateGraphName(in.Graph), format.ValidateOp(in.OpID), validAuthor(in.Author)); err != nil {
		return InitGraphResult{Outcome: outcome.Invalid, Message: err.Error()}, nil
	}
	// Checked before the operation is recorded, so the same init runs again once the
	// prefix is cleared (docs/format.md, *Ownership*).
	if res, err := a.checkInitPrefix(ctx, in); err != nil || res.Outcome != "" {
		return res, err
	}
	c, err := a.claim(ctx, nil, opRecord(catalog.OpInitGraph, in.OpID, in.Graph, in.WorkflowID, in.RunID, map[string]string{"author": in.Author}))
	if err != nil {
		return InitGraphResult{}, err
	}
	op := c.op
	if c.outcome != "" && op.ID == "" { // another request's id, or another workflow's run
		return InitGraphResult{Outcome: c.outcome, Message: c.message, Recorded: c.recorded}, nil
	}
	at := op.CreatedAt.UTC()
	tree := nativeULID(in.OpID, 0, at)
	res := InitGraphResult{
		Owned: c.owned,
		Main:  format.NativeName(graph.DefaultBranch, tree),
		Root:  format.CommitID{Tree: tree}.String(),
	}
	conflict := func(f string, args ...any) (InitGraphResult, error) {
		res.Outcome, res.Message = outcome.Conflict, fmt.Sprintf(f, args...)
		return res, nil
	}

	existing, err := graph.ReadGraph(ctx, a.Store, in.Graph)
	switch {
	case err == nil && existing.Op == in.OpID:
		// This operation initialised the graph already: make sure the ledger says so too.
		// The root's id carries its digest, which the same init's bytes name (a read only).
		again, err := graph.Init(ctx, a.Store, graph.InitParams{Graph: in.Graph, MainTree: tree, Op: in.OpID, Time: at, Author: in.Author})
		if err != nil {
			return InitGraphResult{}, fmt.Errorf("read back the root: %w", err)
		}
		res.Root = again.Root.ID.String()
		if err := a.recordInitLedger(ctx, in, res.Main, tree.String()); err != nil {
			return InitGraphResult{}, err
		}
		res.Outcome = outcome.Done
		return res, nil
	case err == nil:
		return conflict("graph %q already exists (initialised by operation %s at %s)", in.Graph, existing.Op, format.FormatTime(existing.CreatedAt))
	case isUnreadableObject(err):
		return conflict("graph %q: its graph record is unreadable: %v", in.Graph, err)
	case !errors.Is(err, graph.ErrGraphNotFound):
		return InitGraphResult{}, fmt.Errorf("read graph: %w", err)
	}

	// Witness main before its ref can be written.
	if _, err := a.Catalog.IncarnationInsert(ctx, catalog.IncarnationInsertParams{
		Graph: in.Graph, Logical: graph.DefaultBranch, Native: res.Main, Tree: tree.String(), OpID: in.OpID,
	}); err != nil {
		var exists *catalog.IncarnationExistsError
		if errors.As(err, &exists) {
			return conflict("graph %q already has a %s branch in the ledger: %s (%s, operation %s); re-run that init with its idempotency key",
				in.Graph, graph.DefaultBranch, exists.Existing.Native, exists.Existing.State, exists.Existing.OpID)
		}
		return InitGraphResult{}, fmt.Errorf("witness main: %w", err)
	}
	// checkInitPrefix checked the prefix before the operation was recorded.
	params := graph.InitParams{Graph: in.Graph, MainTree: tree, Op: in.OpID, Time: at, Author: in.Author, PrefixChecked: true}
	init, err := graph.Init(ctx, a.Store, params)
	res.Root = init.Root.ID.String()
	switch {
	case errors.Is(err, graph.ErrGraphExists), errors.Is(err, graph.ErrInvalid):
		// Nothing of ours is live: nothing was sent, or Init fenced our main ref.
		if werr := a.moveWitness(ctx, in.Graph, res.Main, catalog.IncarnationUnpublished); werr != nil {
			return InitGraphResult{}, werr
		}
		res.Outcome, res.Message = outcome.Conflict, err.Error()
		if errors.Is(err, graph.ErrInvalid) {
			res.Outcome = outcome.Invalid
		}
		return res, nil
	case errors.Is(err, storage.ErrRefused):
		// Puts may have landed before it: the witness stays intent for a re-run.
		res.Outcome, res.Message = outcome.Refused, err.Error()
		return res, nil
	case err != nil:
		return InitGraphResult{}, fmt.Errorf("init graph: %w", err)
	}
	if err := a.recordInitLedger(ctx, in, res.Main, tree.String()); err != nil {
		return InitGraphResult{}, err
	}
	res.Outcome, res.Created = outcome.Done, init.Created
	return res, nil
}

// checkInitPrefix ends an init of a missing graph as conflict when its prefix holds any key,
// before anything is recorded or written. Only an operation the ledger has not recorded is
// checked: a later attempt may find the root and main's ref it wrote.
func (a *Activities) checkInitPrefix(ctx context.Context, in InitGraphInput) (InitGraphResult, error) {
	_, err := graph.ReadGraph(ctx, a.Store, in.Graph)
	switch {
	case err == nil, isUnreadableObject(err):
		return InitGraphResult{}, nil
	case !errors.Is(err, graph.ErrGraphNotFound):
		return InitGraphResult{}, fmt.Errorf("read graph: %w", err)
	}
	_, err = a.Catalog.OperationGet(ctx, catalog.OperationGetParams{ID: in.OpID})
	switch {
	case err == nil:
		return InitGraphResult{}, nil
	case !errors.Is(err, catalog.ErrNotFound):
		return InitGraphResult{}, fmt.Errorf("read operation: %w", err)
	}
	err = graph.CheckInitPrefix(ctx, a.Store, in.Graph, func(string) bool { return false })
	var taken *graph.PrefixTakenError
	switch {
	case errors.As(err, &taken):
		return InitGraphResult{Outcome: outcome.Conflict, Message: fmt.Sprintf("%v; nothing was written", taken), ForeignKey: taken.Key}, nil
	case err != nil:
		return InitGraphResult{}, fmt.Errorf("check the graph's prefix: %w", err)
	}
	return InitGraphResult{}, nil
}

// recordInitLedger records main's incarnation live and the graph itself.
func (a *Activities) recordInitLedger(ctx context.Context, in InitGraphInput, main, tree string) error {
	inc, err := a.Catalog.IncarnationInsert(ctx, catalog.IncarnationInsertParams{
		Graph: in.Graph, Logical: graph.DefaultBranch, Native: main, Tree: tree, OpID: in.OpID,
	})
	switch {
	case errors.Is(err, catalog.ErrIncarnationExists):
		// Another incarnation of main is open (a repair adopted one): the ledger names it.
	case err != nil:
		return fmt.Errorf("witness main: %w", err)
	case !inc.State.Settled():
		if err := a.moveWitness(ctx, in.Graph, main, catalog.IncarnationLive); err != nil {
			return err
		}
	}
	// The locator is the graph's key prefix in the store this worker serves.
	_, err = a.Catalog.GraphInsert(ctx, catalog.GraphInsertParams{Name: in.Graph, Locator: format.GraphPrefix(in.Graph)})
	if err != nil && !errors.Is(err, catalog.ErrDuplicate) { // registered already, by hand at another locator
		return fmt.Errorf("register graph: %w", err)
	}
	return nil
}

// moveWitness moves an incarnation's witness from whatever state it is in to to.
func (a *Activities) moveWitness(ctx context.Context, graphName, native string, to catalog.IncarnationState) error {
	inc, err := a.Catalog.IncarnationGetByNative(ctx, catalog.IncarnationGetByNativeParams{Graph: graphName, Native: native})
	if err != nil {
		return fmt.Errorf("read witness: %w", err)
	}
	if inc.State == to {
		return nil
	}
	if _, err := a.Catalog.IncarnationSetState(ctx, catalog.IncarnationSetStateParams{
		Graph: graphName, Native: native, From: inc.State, To: to,
	}); err != nil {
		return fmt.Errorf("witness %s: %w", to, err)
	}
	return nil
}

// isUnreadableObject reports an object that exists but cannot be read as format v1.
func isUnreadableObject(err error) bool {
	return errors.Is(err, format.ErrMalformed) || errors.Is(err, format.ErrUnsupportedFormat) || errors.Is(err, format.ErrTooLarge)
}
