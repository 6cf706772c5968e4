package oracle

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/storage"
)

// quiesced checks, once a soak schedule has quiesced and the reconciler ran, that a
// reported immutable key's bytes never changed, and that every operation ended: none of
// the graph is unfinished.
func (c *checker) quiesced() error {
	if !c.cfg.Quiesced {
		return nil
	}
	for _, k := range slices.Sorted(maps.Keys(c.cfg.Immutable)) {
		obj, err := c.cfg.Store.Get(c.ctx, k)
		switch {
		case errors.Is(err, storage.ErrNotFound):
			if !c.cfg.Reclaimed {
				c.add("immutable-key", "%s was reported and is gone, though no cleanup swept", k)
			}
		case err != nil:
			return fmt.Errorf("read %s: %w", k, err)
		case sha256.Sum256(obj.Body) != c.cfg.Immutable[k]:
			c.add("immutable-key", "%s holds other bytes than when it was reported", k)
		}
	}
	unended := func(op catalog.Operation) {
		if op.State != catalog.OperationDone {
			c.add("every-op-ended", "operation %s (%s) is %s after quiescence and a reconciler pass (phase %q, waiting %q)",
				op.ID, op.Kind, op.State, op.Phase, op.Waiting)
		}
	}
	for _, id := range c.cfg.OpIDs {
		op, err := c.cfg.Catalog.OperationGet(c.ctx, catalog.OperationGetParams{ID: id})
		if errors.Is(err, catalog.ErrNotFound) {
			continue // never recorded: refused before the ledger, e.g. invalid or not found
		}
		if err != nil {
			return err
		}
		unended(op)
	}
	for _, op := range c.unfinished {
		if !slices.Contains(c.cfg.OpIDs, op.ID) {
			unended(op)
		}
	}
	return nil
}
