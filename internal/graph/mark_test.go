package graph

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/faults"
)

// The mark walks every key a retained commit names — each chunk, version
// and commit once, however many roots share it — and nothing else: the
// chunks of a version no retained commit pins are left for the sweep.
func TestMarker_ReportsEveryRetainedKeyOnce_AndNoGarbage(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *faults.Store) {
		ctx := context.Background()
		g, _ := mustInitGraph(t, s)
		var put []format.ManifestEntry
		for i := 0; i < 3000; i++ {
			put = append(put, objEntry(i))
		}
		ext := format.ManifestEntry{Name: "zzz/external", External: "landing/x", Size: 5, ETag: `"e"`}
		put = append(put, ext)
		if _, err := g.PutVersion(ctx, VersionSpec{Table: "events", VersionID: vid(1), Put: put, Time: t0, Op: "op-1"}); err != nil {
			t.Fatal(err)
		}
		// v2 shares all but the last chunks with v1.
		if _, err := g.PutVersion(ctx, VersionSpec{Table: "events", VersionID: vid(2), Base: vid(1), Put: []format.ManifestEntry{objEntry(5000)}, Time: t0, Op: "op-2"}); err != nil {
			t.Fatal(err)
		}
		// v3 is abandoned: nothing pins it.
		if _, err := g.PutVersion(ctx, VersionSpec{Table: "events", VersionID: vid(3), Base: vid(1), Put: []format.ManifestEntry{objEntry(7000)}, Time: t0, Op: "op-3"}); err != nil {
			t.Fatal(err)
		}
		pins := map[string]ulid.ULID{"events": vid(1)}
		for i := 0; i < 100; i++ {
			pins[fmt.Sprintf("dim_%03d", i)] = vid(1)
		}
		a := mustAppend(t, g, spec("main", 1, pins))
		b := mustAppend(t, g, spec("main", 2, map[string]ulid.ULID{"events": vid(2)}))
		for i := 0; i < 100; i++ {
			// dimension tables' versions exist (empty) so the walk can read them
			if _, err := g.PutVersion(ctx, VersionSpec{Table: fmt.Sprintf("dim_%03d", i), VersionID: vid(1), Time: t0, Op: "op-d"}); err != nil {
				t.Fatal(err)
			}
		}
		seen := map[string]int{}
		m := g.NewMarker(func(mk Mark) error { seen[mk.Key]++; return nil })
		for _, id := range []format.CommitID{a.Commit().ID, b.Commit().ID} {
			c, err := g.Commit(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Commit(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
		for k, n := range seen {
			// An object is reported once per leaf that lists it: a leaf a
			// later version rewrote lists some of the same objects again.
			if n != 1 && !strings.Contains(k, "/objects/") && k != "landing/x" {
				t.Fatalf("%s marked %d times", k, n)
			}
		}
		// Every chunk and version in storage is marked, but v3's own.
		v3only := map[string]bool{}
		m3 := g.NewMarker(func(mk Mark) error { v3only[mk.Key] = true; return nil })
		m3.Version(ctx, "events", vid(3))
		err := storage.ListAll(ctx, s, "sales/", func(o storage.ObjectInfo) error {
			k := o.Key
			if !strings.Contains(k, "/chunks/") && !strings.Contains(k, "/versions/") {
				return nil
			}
			if seen[k] == 0 && !v3only[k] {
				t.Errorf("%s is neither marked nor the abandoned version's", k)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if seen[format.TableVersionKey("sales", "events", vid(3))] != 0 {
			t.Error("the abandoned version was marked")
		}
		objs := 0
		for k := range seen {
			if strings.Contains(k, "/objects/") {
				objs++
			}
		}
		if objs != 3001 || seen["landing/x"] == 0 {
			t.Fatalf("%d objects marked (want 3001) and the external %d times", objs, seen["landing/x"])
		}
		if !v3only[format.ObjectKey("sales", "events", objID(7000))] || seen[format.ObjectKey("sales", "events", objID(7000))] != 0 {
			t.Fatal("the abandoned version's own object is marked, or not found under it")
		}
	})
}

func TestObjectFilter_NoFalseNegatives_BoundedFalsePositives(t *testing.T) {
	f := NewObjectFilter(100000, 0.01, 42)
	for i := 0; i < 100000; i++ {
		f.Add(fmt.Sprintf("sales/tables/t/objects/%d", i))
	}
	for i := 0; i < 100000; i++ {
		if !f.MayContain(fmt.Sprintf("sales/tables/t/objects/%d", i)) {
			t.Fatalf("false negative for %d", i)
		}
	}
	fp := 0
	for i := 0; i < 100000; i++ {
		if f.MayContain(fmt.Sprintf("sales/tables/t/other/%d", i)) {
			fp++
		}
	}
	if fp > 2000 || f.Bytes() > 200<<10 {
		t.Fatalf("%d false positives in 100,000, %d bytes", fp, f.Bytes())
	}
}

// A filter for a handful of keys — a table whose kept versions name one or two
// objects — answers near the rate it was asked for: at 1e-6, no false positive in
// 200,000 other keys. Sized by the formula alone it was a single 64-bit word that
// answered yes to about one key in a thousand, and a cleanup kept that garbage.
func TestObjectFilter_FewKeys_FalsePositivesNearTheAskedRate(t *testing.T) {
	for n := range 4 {
		f := NewObjectFilter(n, 1e-6, 7)
		for i := range n + 2 { // a mark may add a key or two more than it counted
			f.Add(fmt.Sprintf("sales/tables/t/objects/kept-%d", i))
		}
		fp := 0
		for i := range 200000 {
			if f.MayContain(fmt.Sprintf("sales/tables/u/objects/garbage-%d", i)) {
				fp++
			}
		}
		if fp > 0 {
			t.Fatalf("filter for %d keys: %d false positives in 200,000 (%d bytes)", n, fp, f.Bytes())
		}
	}
}

// Bytes is the filter's size in memory.
func (f *ObjectFilter) Bytes() int { return len(f.bits) * 8 }
