package prodtier

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/storage"
)

// checkInvariants checks, after a scenario has settled, what must hold of a
// graph's store and ledger whatever happened to the processes running it.
// It is the tier's one place for these checks: when internal/oracle lands,
// this function becomes a call to it.
//
// Store:
//   - every live branch ref names a tree with a head; every commit reachable
//     from a live ref or a live tag exists where a ref or tag names it
//     directly, and pins table versions whose data objects all exist;
//   - no logical branch has two live refs.
//
// Ledger:
//   - no logical branch has two live incarnations, and the live incarnations
//     are exactly the live refs in the store (the ledger's witness and the
//     store agree once nothing is in flight);
//   - every operation of the graph is done: nothing is left running or in
//     doubt.
func (st *stack) checkInvariants(g string) {
	st.t.Helper()
	if err := invariants(st, g); err != nil {
		st.t.Fatalf("invariant of graph %s: %v", g, err)
	}
}

func invariants(st *stack, g string) error {
	ctx, s := st.ctx, st.store
	seen := map[format.CommitID]bool{}
	var walk func(from string, id format.CommitID, named bool) error
	walk = func(from string, id format.CommitID, named bool) error {
		if seen[id] {
			return nil
		}
		seen[id] = true
		c, err := graph.ReadCommit(ctx, s, g, id.String())
		if errors.Is(err, graph.ErrCommitNotFound) {
			if named {
				return fmt.Errorf("%s names commit %s, which does not exist", from, id)
			}
			return nil // an ancestor a cleanup reclaimed: nothing names it
		}
		if err != nil {
			return fmt.Errorf("read commit %s (from %s): %w", id, from, err)
		}
		for table, v := range c.Pins {
			tv, err := graph.ReadTableVersion(ctx, s, g, table, v)
			if err != nil {
				return fmt.Errorf("commit %s (from %s) pins version %s of %s: %w", id, from, v, table, err)
			}
			for _, o := range tv.Objects {
				if _, err := s.Head(ctx, format.ObjectKey(g, table, o.ID)); err != nil {
					return fmt.Errorf("commit %s (from %s) needs object %s of %s: %w", id, from, o.ID, table, err)
				}
			}
		}
		for _, p := range c.Parents {
			if err := walk(from, p, false); err != nil {
				return err
			}
		}
		return nil
	}

	storeLive := map[string][]string{} // logical → natives
	err := storage.ListAll(ctx, s, format.BranchRefsPrefix(g), func(o storage.ObjectInfo) error {
		obj, err := s.Get(ctx, o.Key)
		if err != nil {
			return err
		}
		ref, err := format.DecodeBranchRef(obj.Body)
		if err != nil {
			return fmt.Errorf("%s: %w", o.Key, err)
		}
		if ref.State != format.RefLive {
			return nil
		}
		storeLive[ref.Branch] = append(storeLive[ref.Branch], ref.Native)
		head, err := graph.ReadHead(ctx, s, g, ref.Tree)
		if err != nil {
			return fmt.Errorf("live ref %s names tree %s, which has no head: %w", ref.Native, ref.Tree, err)
		}
		return walk("live ref "+ref.Native, head.ID, true)
	})
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	err = storage.ListAll(ctx, s, format.TagsPrefix(g), func(o storage.ObjectInfo) error {
		obj, err := s.Get(ctx, o.Key)
		if err != nil {
			return err
		}
		tag, err := format.DecodeTag(obj.Body)
		if err != nil {
			return fmt.Errorf("%s: %w", o.Key, err)
		}
		if tag.State == format.TagLive {
			return walk("tag "+tag.Name, tag.Commit, true)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	for logical, natives := range storeLive {
		if len(natives) > 1 {
			return fmt.Errorf("store: branch %s has %d live refs: %v", logical, len(natives), natives)
		}
	}

	incs, err := st.cat.IncarnationListByGraph(ctx, catalog.IncarnationListByGraphParams{Graph: g, States: []catalog.IncarnationState{catalog.IncarnationLive}})
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	ledgerLive := map[string][]string{}
	for _, inc := range incs {
		ledgerLive[inc.Logical] = append(ledgerLive[inc.Logical], inc.Native)
	}
	for logical, natives := range ledgerLive {
		if len(natives) > 1 {
			return fmt.Errorf("ledger: branch %s has %d live incarnations: %v", logical, len(natives), natives)
		}
	}
	var onlyStore, onlyLedger []string
	for logical, natives := range storeLive {
		if !slices.Equal(natives, ledgerLive[logical]) {
			onlyStore = append(onlyStore, fmt.Sprintf("%s=%v (ledger %v)", logical, natives, ledgerLive[logical]))
		}
	}
	for logical, natives := range ledgerLive {
		if _, ok := storeLive[logical]; !ok {
			onlyLedger = append(onlyLedger, fmt.Sprintf("%s=%v", logical, natives))
		}
	}
	if len(onlyStore)+len(onlyLedger) > 0 {
		return fmt.Errorf("ledger and store disagree on live branches: in the store %s; only in the ledger %s",
			strings.Join(onlyStore, ", "), strings.Join(onlyLedger, ", "))
	}

	for _, state := range []catalog.OperationState{catalog.OperationRunning, catalog.OperationInDoubt} {
		ops, err := st.cat.OperationList(ctx, catalog.OperationListParams{Graph: g, State: state, Limit: 1000})
		if err != nil {
			return fmt.Errorf("ledger: %w", err)
		}
		if len(ops) > 0 {
			var ids []string
			for _, op := range ops {
				ids = append(ids, string(op.Kind)+" "+op.ID)
			}
			return fmt.Errorf("ledger: %d operations still %s: %v", len(ops), state, ids)
		}
	}
	return nil
}
