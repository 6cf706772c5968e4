package graph

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/testenv"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/memstore"
)

// Benchmarks at scale (benchmark tier only:
// go test -run '^$' -bench . -benchtime 1x ./internal/graph). The ordinary
// suite holds the same shapes flat at smaller sizes (TestAppend100_...,
// TestMergeCost_..., TestCreateAndMergeCost_...).
//
//	GRAFT_BENCH_ENTRIES entries of the big table (default 1,000,000)
//	GRAFT_BENCH_OBJECT bytes of the big object (default 6 GiB)

// meter counts the requests that reach a store and the bytes written.
type meter struct {
	storage.Store
	requests, written atomic.Int64
}

func (m *meter) Get(ctx context.Context, key string) (storage.Object, error) {
	m.requests.Add(1)
	return m.Store.Get(ctx, key)
}

func (m *meter) Head(ctx context.Context, key string) (storage.ObjectInfo, error) {
	m.requests.Add(1)
	return m.Store.Head(ctx, key)
}

func (m *meter) Put(ctx context.Context, key string, body []byte, opts storage.PutOptions) (storage.PutResult, error) {
	m.requests.Add(1)
	m.written.Add(int64(len(body)))
	return m.Store.Put(ctx, key, body, opts)
}

func (m *meter) List(ctx context.Context, opts storage.ListOptions) (storage.ListPage, error) {
	m.requests.Add(1)
	return m.Store.List(ctx, opts)
}

func (m *meter) mp() storage.Multipart { mp, _ := storage.AsMultipart(m.Store); return mp }

func (m *meter) SupportsMultipart() bool                  { _, ok := storage.AsMultipart(m.Store); return ok }
func (m *meter) MultipartLimits() storage.MultipartLimits { return m.mp().MultipartLimits() }
func (m *meter) CreateMultipart(ctx context.Context, key string) (string, error) {
	m.requests.Add(1)
	return m.mp().CreateMultipart(ctx, key)
}
func (m *meter) UploadPart(ctx context.Context, key, id string, n int, body io.ReadSeeker, size int64) (storage.Part, error) {
	m.requests.Add(1)
	m.written.Add(size)
	return m.mp().UploadPart(ctx, key, id, n, body, size)
}
func (m *meter) CompleteMultipart(ctx context.Context, key, id string, parts []storage.Part) (storage.PutResult, error) {
	m.requests.Add(1)
	return m.mp().CompleteMultipart(ctx, key, id, parts)
}
func (m *meter) AbortMultipart(ctx context.Context, key, id string) error {
	m.requests.Add(1)
	return m.mp().AbortMultipart(ctx, key, id)
}
func (m *meter) ListMultipart(ctx context.Context, opts storage.ListMultipartOptions) (storage.MultipartPage, error) {
	m.requests.Add(1)
	return m.mp().ListMultipart(ctx, opts)
}

var _ storage.Multipart = (*meter)(nil)

// step measures fn: requests, bytes written and time, reported as metrics
// "<name>-req", "<name>-bytes" and "<name>-ms", and logged as a table row.
func step(b *testing.B, m *meter, name string, fn func() error) {
	b.Helper()
	testenv.ResetPeakRSS()
	r0, w0, t0 := m.requests.Load(), m.written.Load(), time.Now()
	if err := fn(); err != nil {
		b.Fatalf("%s: %v", name, err)
	}
	d := time.Since(t0)
	req, written := m.requests.Load()-r0, m.written.Load()-w0
	unit := strings.Map(func(r rune) rune {
		if r == ' ' || r == '(' || r == ')' || r == '+' {
			return '_'
		}
		return r
	}, name)
	b.ReportMetric(float64(req), unit+"-req")
	b.ReportMetric(float64(written), unit+"-bytes")
	b.ReportMetric(float64(d.Milliseconds()), unit+"-ms")
	rss := testenv.PeakRSSMiB()
	b.ReportMetric(rss, unit+"-peak-rss-MiB")
	fmt.Printf("| %-28s | %9d | %13d | %10.1f | %13.0f |\n", name, req, written, float64(d.Microseconds())/1000, rss)
}

func envInt(name string, def int64) int64 {
	if v, err := strconv.ParseInt(os.Getenv(name), 10, 64); err == nil && v > 0 {
		return v
	}
	return def
}

func benchBackends() []backend {
	return []backend{
		{"memstore", func(t testing.TB) storage.Store { return memstore.New() }},
		{"localfs", func(t testing.TB) storage.Store { return newStore(t) }},
		backends()[3], // versitygw
	}
}

// BenchmarkMillionEntryTable: a table of 1,000,000 entries (the objects
// themselves are not written): write, append 100, read the version, create a
// branch, merge an append from the branch into an appended main, restore,
// and the cleanup mark's walk — each with its requests, bytes and time.
func BenchmarkMillionEntryTable(b *testing.B) {
	n := int(envInt("GRAFT_BENCH_ENTRIES", 1000000))
	for _, be := range benchBackends() {
		b.Run(be.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				benchMillion(b, be, n)
			}
		})
	}
}

func benchMillion(b *testing.B, be backend, n int) {
	ctx := context.Background()
	m := &meter{Store: be.open(b)}
	if _, err := Init(ctx, m, initParams()); err != nil {
		b.Fatal(err)
	}
	g, _ := Open(m, "sales")
	fmt.Printf("\n%s, a table of %d entries\n| %-28s | %9s | %13s | %10s | %13s |\n", be.name, n, "step", "requests", "bytes written", "ms", "peak RSS MiB")
	entries := make([]format.ManifestEntry, n)
	for i := range entries {
		entries[i] = objEntry(i)
	}
	step(b, m, fmt.Sprintf("write version (%d)", n), func() error {
		_, err := g.PutVersion(ctx, VersionSpec{Table: "events", VersionID: vid(1), Put: entries, Time: t0, Op: "op-w"})
		return err
	})
	entries = nil
	step(b, m, "commit it", func() error {
		_, err := g.Append(ctx, spec("main", 1, map[string]ulid.ULID{"events": vid(1)}))
		return err
	})
	g, _ = Open(m, "sales") // cold caches from here on
	more := func(from int) []format.ManifestEntry {
		var out []format.ManifestEntry
		for i := from; i < from+100; i++ {
			out = append(out, objEntry(i))
		}
		return out
	}
	step(b, m, "append 100 (version+commit)", func() error {
		if _, err := g.PutVersion(ctx, VersionSpec{Table: "events", VersionID: vid(2), Base: vid(1), Put: more(n), Time: t0, Op: "op-a"}); err != nil {
			return err
		}
		_, err := g.Append(ctx, spec("main", 2, map[string]ulid.ULID{"events": vid(2)}))
		return err
	})
	g, _ = Open(m, "sales")
	step(b, m, "read version (all entries)", func() error {
		h, err := g.BranchHead(ctx, "main")
		if err != nil {
			return err
		}
		v, err := g.TableAt(ctx, h.Commit, "events")
		if err != nil {
			return err
		}
		count := 0
		if err := g.EachEntry(ctx, v, func(format.ManifestEntry) error { count++; return nil }); err != nil {
			return err
		}
		if count != n+100 {
			return fmt.Errorf("%d entries", count)
		}
		return nil
	})
	g, _ = Open(m, "sales")
	step(b, m, "read one entry", func() error {
		h, _ := g.BranchHead(ctx, "main")
		v, err := g.TableAt(ctx, h.Commit, "events")
		if err != nil {
			return err
		}
		_, ok, err := g.Entry(ctx, v, objEntry(n/2).Name)
		if !ok && err == nil {
			err = fmt.Errorf("entry missing")
		}
		return err
	})
	g, _ = Open(m, "sales")
	var forkFrom format.CommitID
	step(b, m, "create branch", func() error {
		h, err := g.BranchHead(ctx, "main")
		if err != nil {
			return err
		}
		forkFrom = h.Commit.ID
		_, err = g.CreateBranch(ctx, ForkSpec{Branch: "feature", Tree: treeFeature, Source: h.Commit.ID.String(), Author: "a", Message: "f", Time: t0, Op: "op-f"})
		return err
	})
	// Both sides append 100 different objects.
	if _, err := g.PutVersion(ctx, VersionSpec{Table: "events", VersionID: vid(3), Base: vid(2), Put: more(n + 1000), Time: t0, Op: "op-b"}); err != nil {
		b.Fatal(err)
	}
	if _, err := g.Append(ctx, spec("feature", 3, map[string]ulid.ULID{"events": vid(3)})); err != nil {
		b.Fatal(err)
	}
	if _, err := g.PutVersion(ctx, VersionSpec{Table: "events", VersionID: vid(4), Base: vid(2), Put: more(n + 2000), Time: t0, Op: "op-c"}); err != nil {
		b.Fatal(err)
	}
	if _, err := g.Append(ctx, spec("main", 4, map[string]ulid.ULID{"events": vid(4)})); err != nil {
		b.Fatal(err)
	}
	g, _ = Open(m, "sales")
	step(b, m, "merge (both appended 100)", func() error {
		res, err := g.Merge(ctx, "feature", "main", MergeSpec{NewVersionID: func(string) ulid.ULID { return vid(5) }, Time: t0, Op: "op-m"}, "a", "merge")
		if err == nil && (res.Plan.Conflicts != 0 || res.Plan.Tables[0].Action != TableMerged || res.Plan.Tables[0].Added != 100) {
			err = fmt.Errorf("merge plan %+v", res.Plan.Tables)
		}
		return err
	})
	g, _ = Open(m, "sales")
	step(b, m, "restore", func() error {
		_, err := g.Append(ctx, CommitSpec{Branch: "main", PinsFrom: forkFrom.String(), RestoredFrom: forkFrom.String(), Author: "a", Message: "restore", Time: t0, Op: "op-r"})
		return err
	})
	g, _ = Open(m, "sales")
	step(b, m, "cleanup mark (walk head)", func() error {
		filter := NewObjectFilter(n+400, 0.01, 1)
		mk := g.NewMarker(func(mk Mark) error {
			if mk.Kind == MarkObject {
				filter.Add(mk.Key)
			}
			return nil
		})
		for _, branch := range []string{"main", "feature"} {
			h, err := g.BranchHead(ctx, branch)
			if err != nil {
				return err
			}
			if err := mk.Commit(ctx, h.Commit); err != nil {
				return err
			}
		}
		if !filter.MayContain(format.ObjectKey("sales", "events", objID(7))) {
			return fmt.Errorf("object 7 not marked")
		}
		fmt.Printf("  (mark: %d chunk and version reads, object filter %d KiB)\n", mk.Reads, filter.Bytes()>>10)
		return nil
	})
}

// patternReader yields n deterministic bytes without holding them.
type patternReader struct{ off, n int64 }

func (r *patternReader) Read(p []byte) (int, error) {
	if r.off >= r.n {
		return 0, io.EOF
	}
	k := int(min(int64(len(p)), r.n-r.off))
	for i := 0; i < k; i++ {
		x := r.off + int64(i)
		p[i] = byte(x*131 + x/4099)
	}
	r.off += int64(k)
	return k, nil
}

// BenchmarkMultipartObject6GiB uploads a 6 GiB object of generated data in
// 64 MiB parts, four at a time.
func BenchmarkMultipartObject6GiB(b *testing.B) {
	size := envInt("GRAFT_BENCH_OBJECT", 6<<30)
	for _, be := range benchBackends()[1:] {
		b.Run(be.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				m := &meter{Store: be.open(b)}
				ctx := context.Background()
				b.SetBytes(size)
				var res UploadResult
				step(b, m, fmt.Sprintf("upload %d MiB", size>>20), func() error {
					var err error
					res, err = UploadObject(ctx, m, "sales", "big", objID(1), &patternReader{n: size}, size, UploadOptions{PartSize: 64 << 20, Concurrency: 4})
					return err
				})
				info, err := m.Head(ctx, format.ObjectKey("sales", "big", objID(1)))
				if err != nil || info.Size != size || res.Parts != int((size+(64<<20)-1)/(64<<20)) {
					b.Fatalf("object: %+v, %d parts, %v", info, res.Parts, err)
				}
				fmt.Printf("  %s: %d parts of 64 MiB, sha256 %s\n", be.name, res.Parts, res.Entry.SHA256)
			}
		})
	}
}
