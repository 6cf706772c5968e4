package prodtier

import (
	"fmt"

	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/oracle"
	"github.com/graftworks/graft/worker"
)

// checkInvariants checks, after a scenario has settled, what must hold of a
// graph's store and ledger whatever happened to the processes running it:
// the oracle's every rule (internal/oracle: storage, ledger hygiene, and no
// unfinished operation whose workflow is closed), and — the tier runs no
// operator action that could leave one in doubt — every operation of the
// graph done: nothing left running or in doubt.
func (st *stack) checkInvariants(g string) {
	st.t.Helper()
	if err := invariants(st, g); err != nil {
		st.t.Fatalf("invariant of graph %s: %v", g, err)
	}
}

func invariants(st *stack, g string) error {
	vs, err := oracle.Check(st.ctx, oracle.Config{Store: st.store, Catalog: st.cat, Graph: g, Workflows: worker.TemporalWorkflows(st.tc)})
	if err != nil {
		return fmt.Errorf("oracle could not check: %w", err)
	}
	if err := oracle.Error(vs); err != nil {
		return err
	}
	for _, state := range []catalog.OperationState{catalog.OperationRunning, catalog.OperationInDoubt} {
		ops, err := st.cat.OperationList(st.ctx, catalog.OperationListParams{Graph: g, State: state, Limit: 1000})
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
