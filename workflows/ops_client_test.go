package workflows_test

import (
	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/internal/catalog/catalogtest"
)

// ops opens the public client's Ops on the rig's ledger, waiting through
// the rig's client (nil waits by polling the ledger).
func (r *rig) ops(c *client.Client) *client.Ops {
	r.t.Helper()
	ops, err := client.OpenOps(r.ctx, client.LedgerConfig{DatabaseURL: catalogtest.DatabaseURL(), Schema: r.cat.Schema()}, c)
	if err != nil {
		r.t.Fatalf("open ops: %v", err)
	}
	r.t.Cleanup(ops.Close)
	return ops
}
