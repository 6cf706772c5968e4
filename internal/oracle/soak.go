package oracle

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/storage"
)

// SoakConfig says what the soak's own checks look at (CheckSoak), after a schedule has
// quiesced and the reconciler ran; Check runs beside it.
type SoakConfig struct {
	// Store holds the graph; read directly, never through fault injection. Required.
	Store storage.Store
	// Catalog is the ledger. Required.
	Catalog *catalog.Catalog
	// Graph is the graph's name. Required.
	Graph string
	// Immutable maps keys of immutable objects (commits, table versions, data objects)
	// an operation reported to the sha256 of their bytes when it reported them. Their
	// bytes never change. Defaults to none.
	Immutable map[string][32]byte
	// Reclaimed says a sweeping cleanup ran, so a reported immutable key may be gone
	// (never changed). Defaults to false: every one must still be there.
	Reclaimed bool
	// OpIDs lists the operation ids the schedule used; each that the ledger knows has
	// ended. Defaults to none (every unfinished operation of the graph is a violation
	// anyway).
	OpIDs []string
}

// CheckSoak checks that a reported immutable key's bytes never changed, and that every
// operation ended: no operation of the graph is unfinished once its workflows closed and
// the reconciler ran.
func CheckSoak(ctx context.Context, cfg SoakConfig) ([]Violation, error) {
	var out []Violation
	add := func(rule, f string, args ...any) {
		out = append(out, Violation{Rule: rule, Detail: fmt.Sprintf(f, args...)})
	}
	for _, k := range slices.Sorted(maps.Keys(cfg.Immutable)) {
		obj, err := cfg.Store.Get(ctx, k)
		switch {
		case errors.Is(err, storage.ErrNotFound):
			if !cfg.Reclaimed {
				add("immutable-key", "%s was reported and is gone, though no cleanup swept", k)
			}
		case err != nil:
			return out, fmt.Errorf("read %s: %w", k, err)
		case sha256.Sum256(obj.Body) != cfg.Immutable[k]:
			add("immutable-key", "%s holds other bytes than when it was reported", k)
		}
	}
	for _, id := range cfg.OpIDs {
		op, err := cfg.Catalog.OperationGet(ctx, catalog.OperationGetParams{ID: id})
		if errors.Is(err, catalog.ErrNotFound) {
			continue // never recorded: refused before the ledger, e.g. invalid or not found
		}
		if err != nil {
			return out, err
		}
		if op.State != catalog.OperationDone {
			add("every-op-ended", "operation %s (%s) is %s after quiescence and a reconciler pass (phase %q, waiting %q)", op.ID, op.Kind, op.State, op.Phase, op.Waiting)
		}
	}
	unfinished, err := cfg.Catalog.OperationListUnfinished(ctx, catalog.OperationListUnfinishedParams{Graph: cfg.Graph, Limit: 1000})
	if err != nil {
		return out, err
	}
	for _, op := range unfinished {
		if !slices.Contains(cfg.OpIDs, op.ID) {
			add("every-op-ended", "operation %s (%s) is %s after quiescence and a reconciler pass (phase %q, waiting %q)", op.ID, op.Kind, op.State, op.Phase, op.Waiting)
		}
	}
	return out, nil
}
