package graph

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/memstore"
)

func entryN(i int, v int) format.ManifestEntry {
	return format.ManifestEntry{Name: fmt.Sprintf("k%07d", i), Object: objectA, Size: int64(v), SHA256: sha64}
}

const sha64 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

func newManifestReader(s *memstore.Store) *mapReader[format.ManifestEntry] {
	return newMapReader(s, format.ManifestMap, "g", "t")
}

func mustBuild(t *testing.T, r *mapReader[format.ManifestEntry], entries []format.ManifestEntry) format.MapRef[format.ManifestEntry] {
	t.Helper()
	ref, chunks, err := buildMap(context.Background(), r, entries)
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	if err := (&Graph{S: r.s}).PutChunks(context.Background(), chunks); err != nil {
		t.Fatalf("put chunks: %v", err)
	}
	return ref
}

func allOf(t *testing.T, r *mapReader[format.ManifestEntry], ref format.MapRef[format.ManifestEntry]) []format.ManifestEntry {
	t.Helper()
	es, err := mapTree[format.ManifestEntry]{r: r, ref: ref}.allEntries(context.Background())
	if err != nil {
		t.Fatalf("read entries: %v", err)
	}
	return es
}

// Applying edits gives exactly the map a fresh build of the result gives
// (history independence), with the right entries, whatever the edits.
func TestMapApply_EqualsFreshBuild_ForRandomEdits(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 40; round++ {
		s := memstore.New()
		r := newManifestReader(s)
		n := []int{0, 1, 5, 64, 65, 300, 2000, 6000}[round%8]
		model := map[int]int{}
		var entries []format.ManifestEntry
		for i := 0; i < n; i++ {
			k := i * 3
			model[k] = i
			entries = append(entries, entryN(k, i))
		}
		ref := mustBuild(t, r, entries)
		for step := 0; step < 4; step++ {
			var edits []mapEdit[format.ManifestEntry]
			for e := 0; e < 1+rng.IntN(40); e++ {
				k := rng.IntN(3*n + 300)
				if rng.IntN(3) == 0 {
					edits = append(edits, mapEdit[format.ManifestEntry]{Key: fmt.Sprintf("k%07d", k)})
					delete(model, k)
				} else {
					v := rng.IntN(1000)
					en := entryN(k, v)
					edits = append(edits, mapEdit[format.ManifestEntry]{Key: en.Name, Entry: &en})
					model[k] = v
				}
			}
			// Edits apply in order: a later edit of a key wins.
			next, chunks, err := mapTree[format.ManifestEntry]{r: r, ref: ref}.apply(ctx, edits)
			if err != nil {
				t.Fatalf("round %d: apply: %v", round, err)
			}
			if err := (&Graph{S: s}).PutChunks(ctx, chunks); err != nil {
				t.Fatal(err)
			}
			var want []format.ManifestEntry
			keys := make([]int, 0, len(model))
			for k := range model {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				want = append(want, entryN(k, model[k]))
			}
			fresh, _, err := buildMap(ctx, newManifestReader(memstore.New()), want)
			if err != nil {
				t.Fatal(err)
			}
			if fresh.Root != next.Root || fresh.Count != next.Count || len(fresh.Entries) != len(next.Entries) {
				t.Fatalf("round %d step %d: applied map %x/%d differs from fresh build %x/%d", round, step, next.Root, next.Len(), fresh.Root, fresh.Len())
			}
			if got := allOf(t, r, next); !slices.Equal(got, want) {
				t.Fatalf("round %d step %d: %d entries, want %d", round, step, len(got), len(want))
			}
			ref = next
		}
	}
}

func TestMapGet_FindsEveryKeyAndNoOther(t *testing.T) {
	ctx := context.Background()
	r := newManifestReader(memstore.New())
	var entries []format.ManifestEntry
	for i := 0; i < 5000; i++ {
		entries = append(entries, entryN(2*i, i))
	}
	ref := mustBuild(t, r, entries)
	tree := mapTree[format.ManifestEntry]{r: r, ref: ref}
	for _, i := range []int{0, 1, 2, 777, 4999 * 2, 4999*2 + 1, 20000} {
		e, ok, err := tree.get(ctx, fmt.Sprintf("k%07d", i))
		if err != nil {
			t.Fatal(err)
		}
		if ok != (i%2 == 0 && i < 10000) || ok && e != entryN(i, i/2) {
			t.Fatalf("get k%07d = %+v, %v", i, e, ok)
		}
	}
}

// Appending k entries after n rewrites O(1) chunks whatever n is.
func TestMapApply_AppendAtEnd_WritesFewChunks(t *testing.T) {
	ctx := context.Background()
	counts := map[int]int{}
	for _, n := range []int{10000, 100000} {
		r := newManifestReader(memstore.New())
		var entries []format.ManifestEntry
		for i := 0; i < n; i++ {
			entries = append(entries, entryN(i, i))
		}
		ref := mustBuild(t, r, entries)
		var edits []mapEdit[format.ManifestEntry]
		for i := n; i < n+100; i++ {
			e := entryN(i, i)
			edits = append(edits, mapEdit[format.ManifestEntry]{Key: e.Name, Entry: &e})
		}
		_, chunks, err := mapTree[format.ManifestEntry]{r: r, ref: ref}.apply(ctx, edits)
		if err != nil {
			t.Fatal(err)
		}
		counts[n] = len(chunks)
	}
	if d := counts[100000] - counts[10000]; d < -1 || d > 1 || counts[10000] > 6 {
		t.Fatalf("chunks written appending 100: %v, want equal ± 1 and few", counts)
	}
}

func TestWalkMaps_FindsTheDifferencesAndSkipsSharedChunks(t *testing.T) {
	ctx := context.Background()
	s := memstore.New()
	r := newManifestReader(s)
	var entries []format.ManifestEntry
	for i := 0; i < 20000; i++ {
		entries = append(entries, entryN(i, i))
	}
	a := mustBuild(t, r, entries)
	changed := entryN(100, 7)
	added := entryN(50000, 1)
	b, chunks, err := mapTree[format.ManifestEntry]{r: r, ref: a}.apply(ctx, []mapEdit[format.ManifestEntry]{
		{Key: changed.Name, Entry: &changed}, {Key: "k0010000"}, {Key: added.Name, Entry: &added},
	})
	if err != nil {
		t.Fatal(err)
	}
	(&Graph{S: s}).PutChunks(ctx, chunks)
	r2 := newManifestReader(s) // cold cache: count the walk's reads
	var onlyA, onlyB, diff []string
	var shared int64
	before := s.Len()
	_ = before
	err = walkMaps(ctx, mapTree[format.ManifestEntry]{r: r2, ref: a}, mapTree[format.ManifestEntry]{r: r2, ref: b}, walkFuncs[format.ManifestEntry]{
		onlyA: func(e format.ManifestEntry) error { onlyA = append(onlyA, e.Name); return nil },
		onlyB: func(e format.ManifestEntry) error { onlyB = append(onlyB, e.Name); return nil },
		both: func(x, y format.ManifestEntry) error {
			if x != y {
				diff = append(diff, x.Name)
			}
			return nil
		},
		shared: func(c format.ChildRef, _ int, _ string) error { shared += c.Count; return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(onlyA, []string{"k0010000"}) || !slices.Equal(onlyB, []string{added.Name}) || !slices.Equal(diff, []string{changed.Name}) {
		t.Fatalf("onlyA %v onlyB %v diff %v", onlyA, onlyB, diff)
	}
	// Each difference costs the leaf it is in, and the next until the chunking is back in step.
	if shared < 20000-6*format.ManifestBoundaryModulus {
		t.Fatalf("only %d of 20000 entries skipped as shared", shared)
	}
	if got := len(r2.cache); got > 20 {
		t.Fatalf("walk read %d chunks to find 3 differences", got)
	}
}

func TestMapReader_RejectsAChunkWhoseBytesAreNotItsHash(t *testing.T) {
	ctx := context.Background()
	s := memstore.New()
	r := newManifestReader(s)
	var entries []format.ManifestEntry
	for i := 0; i < 1000; i++ {
		entries = append(entries, entryN(i, i))
	}
	ref := mustBuild(t, r, entries)
	// Overwrite the root chunk with another valid chunk's bytes.
	other, _ := format.ManifestMap.EncodeLeaf([]format.ManifestEntry{entryN(1, 1)})
	s.Put(ctx, r.key(ref.Root), other, storageOpts())
	_, err := mapTree[format.ManifestEntry]{r: newManifestReader(s), ref: ref}.allEntries(ctx)
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("err = %v, want ErrCorrupt", err)
	}
	s.Delete(ctx, r.key(ref.Root))
	_, err = mapTree[format.ManifestEntry]{r: newManifestReader(s), ref: ref}.allEntries(ctx)
	if !errors.Is(err, ErrChunkNotFound) {
		t.Fatalf("err = %v, want ErrChunkNotFound", err)
	}
}

// walkMaps reports exactly the naive differences of two maps, with or
// without one-sided callbacks, for maps that share structure or not.
func TestWalkMaps_MatchesNaiveComparison_RandomMaps(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 8))
	for round := 0; round < 60; round++ {
		s := memstore.New()
		r := newManifestReader(s)
		n := []int{0, 3, 70, 500, 3000, 9000}[round%6]
		var base []format.ManifestEntry
		for i := 0; i < n; i++ {
			base = append(base, entryN(i*2, i))
		}
		aRef := mustBuild(t, r, base)
		// b: a with random edits (shares most chunks), or an unrelated map.
		var bRef format.MapRef[format.ManifestEntry]
		if round%5 == 4 {
			var other []format.ManifestEntry
			for i := 0; i < rng.IntN(4000); i++ {
				other = append(other, entryN(i*3+rng.IntN(3), i))
			}
			slices.SortFunc(other, func(x, y format.ManifestEntry) int { return strings.Compare(x.Name, y.Name) })
			other = slices.CompactFunc(other, func(x, y format.ManifestEntry) bool { return x.Name == y.Name })
			bRef = mustBuild(t, r, other)
		} else {
			var edits []mapEdit[format.ManifestEntry]
			for e := 0; e < rng.IntN(60); e++ {
				k := rng.IntN(2*n + 200)
				if rng.IntN(3) == 0 {
					edits = append(edits, mapEdit[format.ManifestEntry]{Key: fmt.Sprintf("k%07d", k)})
				} else {
					en := entryN(k, rng.IntN(9))
					edits = append(edits, mapEdit[format.ManifestEntry]{Key: en.Name, Entry: &en})
				}
			}
			var chunks []Chunk
			var err error
			bRef, chunks, err = mapTree[format.ManifestEntry]{r: r, ref: aRef}.apply(ctx, edits)
			if err != nil {
				t.Fatal(err)
			}
			(&Graph{S: s}).PutChunks(ctx, chunks)
		}
		aAll, bAll := allOf(t, r, aRef), allOf(t, r, bRef)
		am, bm := map[string]format.ManifestEntry{}, map[string]format.ManifestEntry{}
		for _, e := range aAll {
			am[e.Name] = e
		}
		for _, e := range bAll {
			bm[e.Name] = e
		}
		for mode := 0; mode < 4; mode++ {
			var onlyA, onlyB, diff, same []string
			var sharedCount int64
			fn := walkFuncs[format.ManifestEntry]{
				both: func(x, y format.ManifestEntry) error {
					if x != y {
						diff = append(diff, x.Name)
					} else {
						same = append(same, x.Name)
					}
					return nil
				},
				shared: func(c format.ChildRef, _ int, _ string) error { sharedCount += c.Count; return nil },
			}
			if mode&1 != 0 {
				fn.onlyA = func(e format.ManifestEntry) error { onlyA = append(onlyA, e.Name); return nil }
			}
			if mode&2 != 0 {
				fn.onlyB = func(e format.ManifestEntry) error { onlyB = append(onlyB, e.Name); return nil }
			}
			if err := walkMaps(ctx, mapTree[format.ManifestEntry]{r: r, ref: aRef}, mapTree[format.ManifestEntry]{r: r, ref: bRef}, fn); err != nil {
				t.Fatal(err)
			}
			var wantA, wantB, wantDiff []string
			var common int64
			for _, e := range aAll {
				if o, ok := bm[e.Name]; !ok {
					wantA = append(wantA, e.Name)
				} else {
					common++
					if o != e {
						wantDiff = append(wantDiff, e.Name)
					}
				}
			}
			for _, e := range bAll {
				if _, ok := am[e.Name]; !ok {
					wantB = append(wantB, e.Name)
				}
			}
			if !slices.Equal(diff, wantDiff) || int64(len(diff)+len(same))+sharedCount != common {
				t.Fatalf("round %d mode %d: diff %v want %v; %d same + %d shared, want %d common", round, mode, diff, wantDiff, len(same), sharedCount, common)
			}
			if mode&1 != 0 && !slices.Equal(onlyA, wantA) || mode&2 != 0 && !slices.Equal(onlyB, wantB) {
				t.Fatalf("round %d mode %d: onlyA %d want %d, onlyB %d want %d", round, mode, len(onlyA), len(wantA), len(onlyB), len(wantB))
			}
		}
	}
}

// slowStore counts the GETs in flight, each taking a millisecond, so a test
// sees how many a reader sends at once.
type slowStore struct {
	*memstore.Store
	mu                  sync.Mutex
	inFlight, max, gets int
}

func (s *slowStore) Get(ctx context.Context, key string) (storage.Object, error) {
	s.mu.Lock()
	s.inFlight++
	s.gets++
	s.max = max(s.max, s.inFlight)
	s.mu.Unlock()
	time.Sleep(time.Millisecond)
	s.mu.Lock()
	s.inFlight--
	s.mu.Unlock()
	return s.Store.Get(ctx, key)
}

// Reading every entry of a large map reads its chunks ahead of the entries it
// gives, at most readAhead of a level at a time (this map has a root, two
// nodes and leaves), each chunk once, the entries in order.
func TestEach_ReadsChunksAheadBoundedAndOnce(t *testing.T) {
	ms := memstore.New()
	var entries []format.ManifestEntry
	for i := range 30000 {
		entries = append(entries, entryN(i, i))
	}
	ref := mustBuild(t, newManifestReader(ms), entries)
	s := &slowStore{Store: ms}
	got := allOf(t, newMapReader(s, format.ManifestMap, "g", "t"), ref)
	if !slices.EqualFunc(got, entries, func(a, b format.ManifestEntry) bool { return a == b }) {
		t.Fatalf("read %d entries, not the %d written in order", len(got), len(entries))
	}
	if s.gets != ms.Len() { // the store holds the map's chunks alone
		t.Fatalf("%d GETs for a map of %d chunks", s.gets, ms.Len())
	}
	if s.max < 2 || s.max > 2*readAhead {
		t.Fatalf("at most %d GETs at once; want 2..%d", s.max, 2*readAhead)
	}
	t.Logf("%d chunks, up to %d read at once", s.gets, s.max)

	// A walk that ends early leaves no read behind it.
	stop := errors.New("stop")
	err := mapTree[format.ManifestEntry]{r: newMapReader(s, format.ManifestMap, "g", "t"), ref: ref}.each(context.Background(),
		func(e format.ManifestEntry) error { return stop })
	s.mu.Lock()
	defer s.mu.Unlock()
	if !errors.Is(err, stop) || s.inFlight != 0 {
		t.Fatalf("a walk ended by its callback: %v, %d reads still in flight", err, s.inFlight)
	}
}
