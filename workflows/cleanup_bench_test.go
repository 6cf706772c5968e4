package workflows_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	sdkclient "go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/catalog/catalogtest"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/internal/testenv"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/s3"
	"github.com/graftworks/graft/storage/storagetest"
	"github.com/graftworks/graft/worker"
	"github.com/graftworks/graft/workflows"
)

// Sweep throughput on the real S3 server (versitygw): a graph of 16 tables holding 1,000
// live objects (one version per table, committed on main) and 100,000 garbage objects
// that no version lists, cleaned by one worker and by two. Run it with
//
//	go test -run '^$' -bench BenchmarkSweep -benchtime 1x ./workflows/
//
// It reports the sweep's deletions per second (objects/s, from the workflow's own sweep
// duration), the whole cleanup's wall time, and the mark phase's requests and duration.
const (
	benchTables  = 16
	benchLive    = 1000
	benchGarbage = 100_000
)

func BenchmarkSweep(b *testing.B) {
	for _, workers := range []int{1, 2} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				s := newBenchStack(b)
				for range workers {
					s.startWorker()
				}
				b.StartTimer()
				started := time.Now()
				res, err := s.gc.Cleanup(s.ctx, client.CleanupRequest{Graph: s.graph, KeepNewest: 1, Mode: workflows.CleanupModeSweep,
					GuardWindow: noGuard(), Tuning: &workflows.CleanupTuning{Parallelism: benchTables}})
				wall := time.Since(started)
				b.StopTimer()
				if err != nil {
					b.Fatalf("cleanup: %v", err)
				}
				if res.Deleted.Objects != benchGarbage {
					b.Fatalf("deleted %+v, want %d objects", res.Deleted, benchGarbage)
				}
				if left := s.count(); left != benchLive+benchTables {
					b.Fatalf("%d keys left under tables/, want the %d live objects and %d versions", left, benchLive, benchTables)
				}
				b.ReportMetric(float64(res.Deleted.Objects)/res.Sweep.Duration.Seconds(), "objects/s")
				b.ReportMetric(wall.Seconds(), "wall-s")
				b.ReportMetric(res.Mark.Duration.Seconds(), "mark-s")
				b.ReportMetric(float64(res.Mark.Requests.Total()), "mark-requests")
				b.ReportMetric(float64(res.Mark.Requests.List), "mark-lists")
				b.ReportMetric(res.Sweep.Duration.Seconds(), "sweep-s")
				b.Logf("workers=%d: %+v; mark %s (%+v); sweep %s, %d activities; wall %s; seeded at %.0f objects/s",
					workers, res.Deleted, res.Mark.Duration, res.Mark.Requests, res.Sweep.Duration, res.Sweep.Activities, wall, s.seedRate)
			}
		})
	}
}

// benchStack is the real stack for one benchmark iteration (the test rig needs a *testing.T).
type benchStack struct {
	b         *testing.B
	ctx       context.Context
	store     storage.Store
	cat       *catalog.Catalog
	tc        sdkclient.Client
	gc        *client.Client
	taskQueue string
	graph     string
	seedRate  float64
}

func newBenchStack(b *testing.B) *benchStack {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	b.Cleanup(cancel)
	srv := testenv.VersityGW(b)
	store, err := s3.New(ctx, s3.Config{Endpoint: srv.Endpoint, Region: srv.Region, Bucket: srv.NewBucket(b), PathStyle: true,
		AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey})
	if err != nil {
		b.Fatalf("s3 store: %v", err)
	}
	s := &benchStack{b: b, ctx: ctx, store: store, cat: catalogtest.Open(b), taskQueue: randomName("graft-bench-"), graph: randomName("g")}
	ts := testenv.Temporal(b)
	if s.tc, err = sdkclient.DialContext(ctx, sdkclient.Options{HostPort: ts.HostPort, Namespace: ts.Namespace, Logger: quietLogger()}); err != nil {
		b.Fatalf("dial temporal: %v", err)
	}
	b.Cleanup(s.tc.Close)
	s.gc = client.New(s.tc, client.Options{TaskQueue: s.taskQueue})
	s.seed()
	return s
}

// seed writes the graph: main with one version per table listing its live objects, and
// the garbage objects beside them.
func (s *benchStack) seed() {
	b, ctx := s.b, s.ctx
	now := time.Now().UTC().Truncate(time.Millisecond)
	if _, err := graph.Init(ctx, s.store, graph.InitParams{Graph: s.graph, MainTree: ulid.Make(), Op: "init", Time: now}); err != nil {
		b.Fatalf("init graph: %v", err)
	}
	g, err := graph.Open(s.store, s.graph)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := s.cat.GraphInsert(ctx, catalog.GraphInsertParams{Name: s.graph, Locator: "bench"}); err != nil {
		b.Fatalf("ledger graph: %v", err)
	}
	pins := map[string]ulid.ULID{}
	for i := range benchTables {
		table := fmt.Sprintf("t%02d", i)
		var entries []format.ManifestEntry
		bodies := map[string][]byte{}
		sum := sha256.Sum256([]byte("live"))
		for j := i; j < benchLive; j += benchTables {
			id := ulid.Make()
			entries = append(entries, format.ManifestEntry{Name: id.String(), Object: id, Size: 4, SHA256: hex.EncodeToString(sum[:])})
			bodies[format.ObjectKey(s.graph, table, id)] = []byte("live")
		}
		if _, err := storagetest.PutMany(ctx, s.store, bodies, 32); err != nil {
			b.Fatalf("put objects: %v", err)
		}
		v, err := g.PutVersion(ctx, graph.VersionSpec{Table: table, VersionID: ulid.Make(), Put: entries, Op: "seed", Time: now})
		if err != nil {
			b.Fatalf("write table: %v", err)
		}
		pins[table] = v.Version.ID
	}
	if _, err := g.Append(ctx, graph.CommitSpec{Branch: graph.DefaultBranch, SetPins: pins, Author: "bench", Message: "seed", Time: now, Op: "seed"}); err != nil {
		b.Fatalf("append commit: %v", err)
	}
	garbage := make(map[string][]byte, benchGarbage)
	for i := range benchGarbage {
		garbage[format.ObjectKey(s.graph, fmt.Sprintf("t%02d", i%benchTables), ulid.Make())] = []byte("garbage")
	}
	started := time.Now()
	if _, err := storagetest.PutMany(ctx, s.store, garbage, 32); err != nil {
		b.Fatalf("seed garbage: %v", err)
	}
	s.seedRate = float64(benchGarbage) / time.Since(started).Seconds()
}

func (s *benchStack) startWorker() {
	w := sdkworker.New(s.tc, s.taskQueue, sdkworker.Options{})
	worker.Register(w, &activities.Activities{Store: s.store, Catalog: s.cat})
	if err := w.Start(); err != nil {
		s.b.Fatalf("start worker: %v", err)
	}
	s.b.Cleanup(w.Stop)
}

// count counts the keys under the graph's tables/.
func (s *benchStack) count() int {
	n := 0
	if err := storage.ListAll(s.ctx, s.store, s.graph+"/tables/", func(storage.ObjectInfo) error { n++; return nil }); err != nil {
		s.b.Fatalf("list: %v", err)
	}
	return n
}
