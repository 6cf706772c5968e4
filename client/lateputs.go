package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
)

// LatePut is a key an operation put with an answer that was ambiguous — the put may still
// be delivered, whatever the operation settled — and that the ledger therefore keeps
// pinned past the operation's end: cleanup keeps the key and what it pins, so a late
// delivery can never refill a key cleanup emptied (docs/operations.md, "Late-put pins").
type LatePut struct {
	OpID  string `json:"op_id"`
	Graph string `json:"graph"`
	// Kind is the kind of object the key holds (commit); HeldSince when the pin was taken.
	Kind      string    `json:"kind"`
	Key       string    `json:"key"`
	HeldSince time.Time `json:"held_since"`
}

// LatePutsFilter selects late-put pins. Empty fields do not filter.
type LatePutsFilter struct {
	Graph string
	OpID  string
}

// LatePuts lists the pins held for puts that may still land, oldest first.
func (o *Ops) LatePuts(ctx context.Context, f LatePutsFilter) ([]LatePut, error) {
	pins, err := o.cat.PinsLatePutList(ctx, catalog.PinsLatePutListParams{Graph: f.Graph, OpID: f.OpID})
	if err != nil {
		return nil, fmt.Errorf("list late-put pins: %w", ledgerErr(err))
	}
	out := make([]LatePut, len(pins))
	for i, p := range pins {
		out[i] = LatePut{OpID: p.OpID, Graph: p.Graph, Kind: string(p.Kind), Key: p.Key, HeldSince: p.CreatedAt}
	}
	return out, nil
}

// ReleaseLatePuts releases the late-put pins of a finished operation and returns how many
// it released: the caller's word that no put the operation sent can be delivered any more
// (every connection that carried one is closed, or the store's own request timeout has
// passed). Cleanup may then reclaim the keys as it judges them. An unknown operation is
// not_found; an unfinished one, conflict (its end decides).
func (o *Ops) ReleaseLatePuts(ctx context.Context, opID string) (int, error) {
	n, err := o.cat.PinsReleaseLatePuts(ctx, catalog.PinsReleaseLatePutsParams{OpID: opID})
	var conflict *catalog.StateConflictError
	switch {
	case errors.Is(err, catalog.ErrNotFound):
		return 0, outcome.Errorf(outcome.NotFound, "", "operation %q does not exist", opID)
	case errors.As(err, &conflict):
		return 0, outcome.Errorf(outcome.Conflict, "", "operation %q is %s, not done: its end decides its pins", opID, conflict.Current)
	case err != nil:
		return 0, fmt.Errorf("release the late-put pins of operation %s: %w", opID, ledgerErr(err))
	}
	return n, nil
}
