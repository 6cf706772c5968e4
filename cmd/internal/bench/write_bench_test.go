package bench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	sdkclient "go.temporal.io/sdk/client"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/workflows"
)

// writeEngine writes one file of 1 KiB as the whole of table "w" on main through the
// client gc (client.WriteTable: its upload, the workflow, the wait).
func (st *createStack) writeEngine(gc *client.Client, file string) func(context.Context) error {
	return func(ctx context.Context) error {
		res, err := gc.WriteTable(ctx, st.store, client.WriteTableRequest{Graph: st.graph, Branch: graph.DefaultBranch, Table: "w",
			Files: []string{file}})
		if err == nil && res.Outcome != outcome.Done {
			err = fmt.Errorf("outcome %s", res.Outcome)
		}
		return err
	}
}

// writeUploadFirst is the order a write had before pin-first, for comparison: upload the
// file put-if-absent, then start graft.WriteTable (eagerly or not) without await_upload,
// so its first step pins and probes the stored object, and wait.
func (st *createStack) writeUploadFirst(body []byte, eager bool) func(context.Context) error {
	sum := sha256.Sum256(body)
	return func(ctx context.Context) error {
		id := ulid.Make()
		if _, err := graph.UploadObject(ctx, st.store, st.graph, "w", id, bytes.NewReader(body), int64(len(body)), graph.UploadOptions{}); err != nil {
			return err
		}
		key := ulid.Make().String()
		run, err := st.tc.ExecuteWorkflow(ctx, sdkclient.StartWorkflowOptions{ID: client.WriteTableWorkflowID(st.graph, graph.DefaultBranch, key),
			TaskQueue: st.queue, EnableEagerStart: eager}, workflows.WriteTableName, workflows.WriteTableInput{Graph: st.graph,
			Branch: graph.DefaultBranch, Table: "w", OpID: key,
			Objects: []workflows.TableObject{{ID: id.String(), Size: int64(len(body)), SHA256: hex.EncodeToString(sum[:])}}})
		if err != nil {
			return err
		}
		var res workflows.WriteTableResult
		if err := run.Get(ctx, &res); err != nil {
			return err
		}
		if res.Outcome != outcome.Done {
			return fmt.Errorf("outcome %s", res.Outcome)
		}
		return nil
	}
}

// BenchmarkWriteTable measures table writes through the client — one file of 1 KiB,
// replacing a table of main in a graph of 4 tables, one at a time — interleaved with the
// Temporal floor, taking turns one write each (interleave). It reports p50/p99 latency (ms, nearest rank), writes
// per second, object-store requests and ledger transactions per write, and the
// engine/floor ratio. Beside them run the same write by a client that cannot start
// eagerly (as the graft CLI, whose worker is another process) and, for each, the order
// before pin-first (writeUploadFirst): what pinning first adds to the p50 of each.
func BenchmarkWriteTable(b *testing.B) {
	b.Run("tables=4/c=1", func(b *testing.B) {
		st := newCreateStack(b, 0, 4)
		file := filepath.Join(b.TempDir(), "part.bin")
		if err := os.WriteFile(file, make([]byte, 1024), 0o644); err != nil {
			b.Fatal(err)
		}
		lazy := client.New(st.tc, client.Options{TaskQueue: st.queue, PollInterval: 5 * time.Second})
		n := rowOps(b, 1)
		eng := &path{name: "engine", op: st.writeEngine(st.gc, file)}
		first := &path{name: "upload-first", op: st.writeUploadFirst(make([]byte, 1024), true)}
		lazyEng := &path{name: "engine, not eager", op: st.writeEngine(lazy, file)}
		lazyFirst := &path{name: "upload-first, not eager", op: st.writeUploadFirst(make([]byte, 1024), false)}
		floor := &path{name: "floor", op: st.floor}
		paths := []*path{floor, first, eng, lazyFirst, lazyEng}
		for _, p := range paths {
			measure(b, 2, 1, p.op)
		}
		b.ResetTimer()
		interleave(b, st.store, st.cat, n, 1, 2, paths...)
		b.StopTimer()
		b.ReportMetric(eng.p(0.5), "p50-ms")
		b.ReportMetric(eng.p(0.99), "p99-ms")
		b.ReportMetric(eng.perSecond(), "writes/s")
		b.ReportMetric(eng.perOp(int64(eng.requests)), "requests/write")
		b.ReportMetric(eng.perOp(eng.ledger.Transactions), "ledger-tx/write")
		b.ReportMetric(floor.p(0.5), "floor-p50-ms")
		b.ReportMetric(eng.p(0.5)/floor.p(0.5), "engine/floor-p50")
		b.ReportMetric(eng.p(0.5)-first.p(0.5), "pin-first-added-p50-ms")
		b.ReportMetric(lazyEng.p(0.5), "not-eager-p50-ms")
		b.ReportMetric(lazyEng.p(0.5)-lazyFirst.p(0.5), "not-eager-pin-first-added-p50-ms")
		b.ReportMetric(first.perOp(int64(first.requests)), "upload-first-requests/write")
		b.ReportMetric(0, "ns/op")
	})
	runtime.GC()
}
