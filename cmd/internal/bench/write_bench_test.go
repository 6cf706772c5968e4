package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/graph"
)

// writeEngine writes one file of 1 KiB as the whole of table "w" on main through the
// client (client.WriteTable: its upload, the workflow, the wait).
func (st *createStack) writeEngine(file string) func(context.Context) error {
	return func(ctx context.Context) error {
		res, err := st.gc.WriteTable(ctx, st.store, client.WriteTableRequest{Graph: st.graph, Branch: graph.DefaultBranch, Table: "w",
			Files: []string{file}})
		if err == nil && res.Outcome != outcome.Done {
			err = fmt.Errorf("outcome %s", res.Outcome)
		}
		return err
	}
}

// BenchmarkWriteTable measures table writes through the client — one file of 1 KiB,
// replacing a table of main in a graph of 4 tables, one at a time — interleaved with the
// Temporal floor, in two passes. It reports p50/p99 latency (ms, nearest rank), writes
// per second, object-store requests and ledger transactions per write, and the
// engine/floor ratio.
func BenchmarkWriteTable(b *testing.B) {
	b.Run("tables=4/c=1", func(b *testing.B) {
		st := newCreateStack(b, 0, 4)
		file := filepath.Join(b.TempDir(), "part.bin")
		if err := os.WriteFile(file, make([]byte, 1024), 0o644); err != nil {
			b.Fatal(err)
		}
		n := rowOps(b, 1)
		for _, op := range []func(context.Context) error{st.writeEngine(file), st.floor} {
			measure(b, 2, 1, op)
		}
		b.ResetTimer()
		eng := &path{name: "engine", op: st.writeEngine(file)}
		floor := &path{name: "floor", op: st.floor}
		interleave(b, st.store, st.cat, n, 1, 2, floor, eng)
		b.StopTimer()
		b.ReportMetric(eng.p(0.5), "p50-ms")
		b.ReportMetric(eng.p(0.99), "p99-ms")
		b.ReportMetric(eng.perSecond(), "writes/s")
		b.ReportMetric(eng.perOp(int64(eng.requests)), "requests/write")
		b.ReportMetric(eng.perOp(eng.ledger.Transactions), "ledger-tx/write")
		b.ReportMetric(floor.p(0.5), "floor-p50-ms")
		b.ReportMetric(eng.p(0.5)/floor.p(0.5), "engine/floor-p50")
		b.ReportMetric(0, "ns/op")
	})
	runtime.GC()
}
