package activities

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/internal/catalog/catalogtest"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/internal/testenv"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/localfs"
)

// BenchmarkCleanupMark_MillionEntryTable runs cleanup's real mark — CleanupBegin,
// CleanupMarkTrees, CleanupMarkTable, on the ledger — over a graph on the
// local store whose main holds a table of GRAFT_BENCH_ENTRIES entries (default
// 1,000,000; entries only, the objects are not written) and then the same table with
// 100 appended: keeping the newest commit, the mark keeps the new version and every
// chunk it shares and condemns the old version and the chunks only it used. Reports
// the mark's requests, bytes written and time (benchmark tier:
// go test -run '^$' -bench CleanupMark_ -benchtime 1x ./activities).
func BenchmarkCleanupMark_MillionEntryTable(b *testing.B) {
	n := 1000000
	if v, err := strconv.Atoi(os.Getenv("GRAFT_BENCH_ENTRIES")); err == nil && v > 0 {
		n = v
	}
	for i := 0; i < b.N; i++ {
		benchMark(b, n)
	}
}

// putMeter counts the requests and bytes written through a store.
type putMeter struct {
	storage.Store
	puts, written atomic.Int64
}

func (m *putMeter) Put(ctx context.Context, key string, body []byte, opts storage.PutOptions) (storage.PutResult, error) {
	m.puts.Add(1)
	m.written.Add(int64(len(body)))
	return m.Store.Put(ctx, key, body, opts)
}

func benchMark(b *testing.B, n int) {
	ctx := context.Background()
	st, err := localfs.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	s := &putMeter{Store: st}
	const g = "bench"
	t0 := time.Now().UTC().Add(-2 * time.Hour).Truncate(time.Millisecond)
	if _, err := graph.Init(ctx, s, graph.InitParams{Graph: g, MainTree: ulid.Make(), Op: "op-init", Time: t0}); err != nil {
		b.Fatal(err)
	}
	gr, _ := graph.Open(s, g)
	entry := func(i int) format.ManifestEntry {
		var id ulid.ULID
		id[0], id[1] = 1, 0x90
		id[10], id[11], id[12], id[13], id[14], id[15] = byte(i>>40), byte(i>>32), byte(i>>24), byte(i>>16), byte(i>>8), byte(i)
		sum := sha256.Sum256([]byte(id.String()))
		return format.ManifestEntry{Name: id.String(), Object: id, Size: 1 << 20, SHA256: hex.EncodeToString(sum[:])}
	}
	entries := make([]format.ManifestEntry, n)
	for i := range entries {
		entries[i] = entry(i)
	}
	v1, v2 := ulid.Make(), ulid.Make()
	if _, err := gr.PutVersion(ctx, graph.VersionSpec{Table: "events", VersionID: v1, Put: entries, Time: t0, Op: "op-v1"}); err != nil {
		b.Fatal(err)
	}
	entries = nil // not held through the mark: its peak memory is the mark's own
	for i := n; i < n+100; i++ {
		entries = append(entries, entry(i))
	}
	if _, err := gr.PutVersion(ctx, graph.VersionSpec{Table: "events", VersionID: v2, Base: v1, Put: entries, Time: t0, Op: "op-v2"}); err != nil {
		b.Fatal(err)
	}
	for i, v := range []ulid.ULID{v1, v2} {
		if _, err := gr.Append(ctx, graph.CommitSpec{Branch: "main", SetPins: map[string]ulid.ULID{"events": v}, Author: "a",
			Message: "write", Time: t0.Add(time.Duration(i) * time.Second), Op: fmt.Sprintf("op-c%d", i)}); err != nil {
			b.Fatal(err)
		}
	}
	cat := catalogtest.Open(b)
	a := &Activities{Store: s, Catalog: cat}
	run := ulid.Make().String()
	begin, err := a.CleanupBegin(ctx, CleanupBeginInput{RunID: run, Graph: g, Mode: CleanupModeMark, Policy: []byte(`{}`)})
	if err != nil || begin.Outcome != "" {
		b.Fatalf("begin: %+v, %v", begin, err)
	}
	testenv.ResetPeakRSS()
	p0, w0, started := s.puts.Load(), s.written.Load(), time.Now()
	trees, err := a.CleanupMarkTrees(ctx, CleanupMarkTreesInput{RunID: run, Graph: g, Mode: CleanupModeMark, KeepNewest: 1,
		MaxPlanKeys: 10, GuardWindow: 0})
	if err != nil {
		b.Fatal(err)
	}
	table, err := a.CleanupMarkTable(ctx, CleanupMarkTableInput{RunID: run, Graph: g, Table: "events", Mode: CleanupModeMark,
		Retained: trees.Retained["events"], GuardWindow: 0, Now: trees.Now, MaxPlanKeys: 10, Seed: 7})
	if err != nil {
		b.Fatal(err)
	}
	d := time.Since(started)
	req := trees.Requests
	req.Add(table.Requests)
	if table.Condemned.Versions != 1 || table.Chunks == 0 || table.Kept.Referenced == 0 {
		b.Fatalf("mark: trees %+v, table %+v", trees.Condemned, table)
	}
	fmt.Printf("\ncleanup mark (localfs + Postgres), a table of %d entries then +100\n", n)
	rss := testenv.PeakRSSMiB()
	fmt.Printf("| %-28s | %9s | %13s | %10s | %13s |\n", "step", "requests", "bytes written", "ms", "peak RSS MiB")
	fmt.Printf("| %-28s | %9d | %13d | %10.1f | %13.0f |\n", "cleanup mark (trees+table)", req.Total(), s.written.Load()-w0, float64(d.Microseconds())/1000, rss)
	fmt.Printf("  (GET %d, LIST %d, PUT %d; kept %d chunks+version, condemned 1 version and %d chunks; store puts %d)\n",
		req.Get, req.List, req.Put, table.Kept.Referenced, table.Chunks, s.puts.Load()-p0)
	b.ReportMetric(float64(req.Total()), "mark-req")
	b.ReportMetric(float64(s.written.Load()-w0), "mark-bytes")
	b.ReportMetric(float64(d.Milliseconds()), "mark-ms")
	b.ReportMetric(rss, "mark-peak-rss-MiB")
}
