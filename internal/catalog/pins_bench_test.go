package catalog_test

import (
	"fmt"
	"testing"

	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/catalog/catalogtest"
)

// BenchmarkPinsRegisterAndFinish measures the ledger's share of a create
// that pins a commit and its tables' versions: register the pins, then
// finish the operation (which releases them), with no cleanup running —
// the common case. docs/benchmarks.md reads it beside BenchmarkCreateBranch.
func BenchmarkPinsRegisterAndFinish(b *testing.B) {
	for _, tables := range []int{4, 121} {
		b.Run(fmt.Sprintf("tables=%d", tables), func(b *testing.B) {
			c := catalogtest.Open(b)
			keys := make([]string, tables+1)
			for i := range keys {
				keys[i] = fmt.Sprintf("g/tables/t%03d/versions/01J00000000000000000000000.json", i)
			}
			ctx := b.Context()
			ops := make([]string, b.N)
			for i := range ops {
				ops[i] = catalog.NewID()
				if _, err := c.OperationInsert(ctx, catalog.OperationInsertParams{ID: ops[i], Kind: catalog.OpCreateBranch, Graph: "g", Inputs: []byte(`{}`)}); err != nil {
					b.Fatal(err)
				}
			}
			before := c.Stats()
			b.ResetTimer()
			for i := range b.N {
				if err := c.PinsRegister(ctx, catalog.PinsRegisterParams{OpID: ops[i], Pins: pins(keys...)}); err != nil {
					b.Fatal(err)
				}
				if _, err := c.OperationFinish(ctx, catalog.OperationFinishParams{ID: ops[i], Outcome: catalog.OutcomeCreated}); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			s := c.Stats().Sub(before)
			b.ReportMetric(float64(s.Statements)/float64(b.N), "stmts/op")
		})
	}
}
