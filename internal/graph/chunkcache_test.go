package graph

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage/faults"
	"github.com/graftworks/graft/storage/memstore"
)

// chunkGets counts the GETs of pins and lineage chunks s received.
func chunkGets(s *faults.Store) int {
	return s.CountMatching(faults.Rule{Op: faults.OpGet, KeyPrefix: format.ChunksPrefix("sales")}).Attempted
}

// Operations sharing a worker's chunk cache read each pins chunk from the store
// once: a second operation reads none of the chunks the first read, nor those
// the first wrote; one without the cache reads them all again.
func TestSharedChunks_ReadOrWrittenOnce_ThenServedToTheNextOperation(t *testing.T) {
	s := faults.Wrap(memstore.New())
	ctx := context.Background()
	g, _ := mustInitGraph(t, s)
	pins := map[string]ulid.ULID{}
	for i := range 300 {
		pins[fmt.Sprintf("t%03d", i)] = vid(i + 1)
	}
	mustAppend(t, g, spec("main", 1, pins))
	head := headOf(t, g, "main").Commit
	if head.Pins.IsInline() {
		t.Fatal("300 pins are inline; the test needs a chunked map")
	}
	each := func(g *Graph, c Commit) int {
		t.Helper()
		n := 0
		if err := g.EachPin(ctx, c, func(format.PinEntry) error { n++; return nil }); err != nil || n != 300 {
			t.Fatalf("pins: %d, %v", n, err)
		}
		return n
	}
	cache := NewChunkCache(DefaultChunkCacheBytes)
	open := func() *Graph {
		g, err := Open(s, "sales")
		if err != nil {
			t.Fatal(err)
		}
		return g.ShareChunks(cache)
	}

	s.ResetCounts()
	each(open(), head)
	first := chunkGets(s)
	if first == 0 || cache.Len() != first {
		t.Fatalf("the first read: %d chunk GETs, %d chunks kept", first, cache.Len())
	}
	s.ResetCounts()
	each(open(), head)
	if n := chunkGets(s); n != 0 {
		t.Fatalf("the second operation sent %d chunk GETs; the cache holds them all", n)
	}
	plain, _ := Open(s, "sales")
	each(plain, head)
	if n := chunkGets(s); n != first {
		t.Fatalf("a graph without the cache sent %d chunk GETs, want %d", n, first)
	}

	// An append through the cache keeps the chunks it writes: the next read needs none.
	w := open()
	mustAppend(t, w, spec("main", 2, map[string]ulid.ULID{"t150": vid(999)}))
	s.ResetCounts()
	each(open(), headOf(t, g, "main").Commit)
	if n := chunkGets(s); n != 0 {
		t.Fatalf("reading the appended commit's pins sent %d chunk GETs; it wrote or read them all", n)
	}
}

// The cache holds at most its bytes, dropping the chunks least recently used.
func TestChunkCache_BoundedByBytes_LeastRecentlyUsedDropped(t *testing.T) {
	c := NewChunkCache(10)
	c.add("a", []byte("1234"))
	c.add("b", []byte("1234"))
	if _, ok := c.get("a"); !ok { // a is now the most recently used
		t.Fatal("a missing")
	}
	c.add("c", []byte("1234")) // 12 bytes: b goes
	if _, ok := c.get("b"); ok || c.Len() != 2 {
		t.Fatalf("b kept, or %d chunks held; want a and c", c.Len())
	}
	c.add("huge", []byte(strings.Repeat("x", 11)))
	if _, ok := c.get("huge"); ok {
		t.Fatal("a chunk larger than the cache was kept")
	}
}

// Manifest chunks are not kept: a table's can be many, each read once.
func TestSharedChunks_ManifestChunksReadFromTheStoreEachTime(t *testing.T) {
	s := faults.Wrap(memstore.New())
	ctx := context.Background()
	g, _ := mustInitGraph(t, s)
	var entries []format.ManifestEntry
	for i := range 3000 {
		entries = append(entries, objEntry(i))
	}
	v := putEvents(t, g, 0, ulid.ULID{}, entries, nil)
	cache := NewChunkCache(DefaultChunkCacheBytes)
	manifestGets := func() int {
		return s.CountMatching(faults.Rule{Op: faults.OpGet, KeyPrefix: format.TableChunksPrefix("sales", "events")}).Attempted
	}
	for range 2 {
		g, _ := Open(s, "sales")
		g.ShareChunks(cache)
		ver, err := g.Version(ctx, "events", v)
		if err != nil {
			t.Fatal(err)
		}
		s.ResetCounts()
		n := 0
		if err := g.EachEntry(ctx, ver, func(format.ManifestEntry) error { n++; return nil }); err != nil || n != 3000 {
			t.Fatalf("entries: %d, %v", n, err)
		}
		if manifestGets() == 0 {
			t.Fatal("the manifest's chunks were served from the cache")
		}
	}
	if cache.Len() != 0 {
		t.Fatalf("the cache holds %d chunks; manifest chunks are not kept", cache.Len())
	}
}

// HasPinsChunk finds a chunk of a commit's pins map by following the chunk's first
// key down: a leaf or node the map holds is found, a chunk of another pins map or
// of a lineage map is not, and an inline map holds no chunk.
func TestHasPinsChunk_FindsTheMapsOwnChunksOnly(t *testing.T) {
	s := faults.Wrap(memstore.New())
	ctx := context.Background()
	g, _ := mustInitGraph(t, s)
	if has, err := g.HasPinsChunk(ctx, headOf(t, g, "main").Commit, Chunk{}); has || err != nil {
		t.Fatalf("an inline map: %v, %v", has, err)
	}
	pins := map[string]ulid.ULID{}
	for i := range 300 {
		pins[fmt.Sprintf("t%03d", i)] = vid(i + 1)
	}
	first := mustAppend(t, g, spec("main", 1, pins))
	second := mustAppend(t, g, spec("main", 2, map[string]ulid.ULID{"t150": vid(999)}))
	if len(first.Plan.Chunks) < 3 || len(second.Plan.Chunks) == 0 {
		t.Fatalf("chunks written: %d, then %d", len(first.Plan.Chunks), len(second.Plan.Chunks))
	}
	c1, c2 := first.Plan.Commit, second.Plan.Commit
	for _, ch := range first.Plan.Chunks {
		has, err := g.HasPinsChunk(ctx, c1, ch)
		if err != nil || !has {
			t.Fatalf("commit 1 does not hold its own chunk %s: %v", ch.Key, err)
		}
	}
	for _, ch := range second.Plan.Chunks {
		has, err := g.HasPinsChunk(ctx, c1, ch)
		if err != nil || has {
			t.Fatalf("commit 1 holds commit 2's new chunk %s: %v, %v", ch.Key, has, err)
		}
		if has, _ := g.HasPinsChunk(ctx, c2, ch); !has {
			t.Fatalf("commit 2 does not hold its own chunk %s", ch.Key)
		}
	}
	lineage, err := format.LineageMap.EncodeLeaf([]format.LineageEntry{format.LineageOf(c1.ID)})
	if err != nil {
		t.Fatal(err)
	}
	if has, err := g.HasPinsChunk(ctx, c1, Chunk{Hash: format.HashOf(lineage), Body: lineage}); has || err != nil {
		t.Fatalf("a lineage chunk: %v, %v", has, err)
	}
}
