package graph

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/internal/format"
)

// Cleanup's mark (activities/cleanup_mark.go): a streaming walk over what the
// retained commits and versions name.
//
// Retention: a retained commit keeps its pins and lineage chunks and the
// versions it pins; a retained version keeps its manifest chunks and the
// objects graft wrote that it names. A chunk is kept if any retained root
// reaches it. Keys an in-flight operation pins (a writer pins chunks before it
// writes or reuses them) and keys younger than the guard window are kept
// whatever the walk says. External objects are never deleted (MarkExternal
// only reports them).
//
// Deletion order, so a probe that pins a referrer and then finds it proves its
// referents are there: commits, pins and lineage chunks, versions, manifest
// chunks, data objects.

// MarkKind says what a marked key is.
type MarkKind string

// The kinds of marked key.
const (
	MarkCommit        MarkKind = "commit"
	MarkPinsChunk     MarkKind = "pins_chunk"
	MarkLineageChunk  MarkKind = "lineage_chunk"
	MarkVersion       MarkKind = "version"
	MarkManifestChunk MarkKind = "manifest_chunk"
	MarkObject        MarkKind = "object"
	MarkExternal      MarkKind = "external"
)

// Mark is one key a retained root names.
type Mark struct {
	Kind MarkKind
	Key  string
	// Table is set for versions, manifest chunks and objects.
	Table string
	// Size is an object's size from its entry (0 for control objects).
	Size int64
}

// Marker walks retained roots, calling visit for every key they name: each
// commit, version and chunk once, each object once per leaf that lists it (a
// set such as ObjectFilter absorbs repeats). Its memory grows with the
// distinct chunks, not with entries. Not safe for concurrent use.
type Marker struct {
	g     *Graph
	visit func(Mark) error

	chunks   map[format.Hash]bool
	versions map[string]bool
	commits  map[string]bool
	// Reads counts the objects the walk read.
	Reads int
}

// NewMarker returns a Marker over g that reports to visit.
func (g *Graph) NewMarker(visit func(Mark) error) *Marker {
	return &Marker{g: g, visit: visit, chunks: map[format.Hash]bool{}, versions: map[string]bool{}, commits: map[string]bool{}}
}

// Commit marks a retained commit, its chunks and every version it pins.
func (m *Marker) Commit(ctx context.Context, c Commit) error {
	var pinned []format.PinEntry
	err := m.CommitOnly(ctx, c, func(e format.PinEntry) error {
		pinned = append(pinned, e)
		if len(pinned) >= 1024 {
			if err := m.versionsOf(ctx, pinned); err != nil {
				return err
			}
			pinned = pinned[:0]
		}
		return nil
	})
	if err != nil {
		return err
	}
	return m.versionsOf(ctx, pinned)
}

func (m *Marker) versionsOf(ctx context.Context, pins []format.PinEntry) error {
	for _, p := range pins {
		if err := m.Version(ctx, p.Table, p.Version); err != nil {
			return err
		}
	}
	return nil
}

// Version marks a retained version, its manifest chunks and its objects.
func (m *Marker) Version(ctx context.Context, table string, id ulid.ULID) error {
	key := format.TableVersionKey(m.g.Name, table, id)
	if m.versions[key] {
		return nil
	}
	m.versions[key] = true
	v, err := m.g.Version(ctx, table, id)
	if err != nil {
		return fmt.Errorf("mark version: %w", err)
	}
	m.Reads++
	if err := m.visit(Mark{Kind: MarkVersion, Key: key, Table: table}); err != nil {
		return err
	}
	return markChunks(ctx, m, m.g.manifestOf(v), MarkManifestChunk, table, func(e format.ManifestEntry) error {
		if e.IsExternal() {
			return m.visit(Mark{Kind: MarkExternal, Key: e.External, Table: table, Size: e.Size})
		}
		return m.visit(Mark{Kind: MarkObject, Key: format.ObjectKey(m.g.Name, table, e.Object), Table: table, Size: e.Size})
	})
}

// markChunks visits a map's unvisited chunks, passing their entries to each.
func markChunks[E any](ctx context.Context, m *Marker, t mapTree[E], kind MarkKind, table string, each func(E) error) error {
	eachOf := func(entries []E) error {
		for _, e := range entries {
			if err := each(e); err != nil {
				return err
			}
		}
		return nil
	}
	if each == nil {
		eachOf = func([]E) error { return nil }
	}
	if t.ref.IsInline() {
		return eachOf(t.ref.Entries)
	}
	var walk func(h format.Hash) error
	walk = func(h format.Hash) error {
		if m.chunks[h] {
			return nil
		}
		m.chunks[h] = true
		if err := m.visit(Mark{Kind: kind, Key: t.r.key(h), Table: table}); err != nil {
			return err
		}
		c, err := t.r.chunk(ctx, h)
		if err != nil {
			return err
		}
		m.Reads++
		if c.node == nil {
			return eachOf(c.leaf)
		}
		for _, child := range c.node.Children {
			if err := walk(child.Chunk); err != nil {
				return err
			}
		}
		return nil
	}
	return walk(t.ref.Root)
}

// ObjectFilter is a Bloom filter over keys: no false negatives, so nothing a
// retained version names is condemned; a false positive keeps a garbage object
// until a later run with another seed.
type ObjectFilter struct {
	bits []uint64
	k    int
	seed uint64
}

// minFilterBits is the least a filter holds: on a filter of a few words double
// hashing repeats positions and the real false-positive rate is hundreds of
// times the asked one; 8 KiB per table keeps small filters exact in practice.
const minFilterBits = 1 << 16

// NewObjectFilter sizes a filter for n keys at false-positive rate p, seeded.
func NewObjectFilter(n int, p float64, seed uint64) *ObjectFilter {
	n = max(n, 1)
	p = min(max(p, 1e-9), 0.5)
	m := int(math.Ceil(-float64(n) * math.Log(p) / (math.Ln2 * math.Ln2)))
	k := max(1, int(math.Round(float64(m)/float64(n)*math.Ln2)))
	m = max(m, minFilterBits)
	return &ObjectFilter{bits: make([]uint64, (m+63)/64), k: k, seed: seed}
}

func (f *ObjectFilter) hashes(key string) (uint64, uint64) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], f.seed)
	h := sha256.New()
	h.Write(b[:])
	h.Write([]byte(key))
	sum := h.Sum(nil)
	return binary.LittleEndian.Uint64(sum[:8]), binary.LittleEndian.Uint64(sum[8:16]) | 1
}

// Add adds key.
func (f *ObjectFilter) Add(key string) {
	h1, h2 := f.hashes(key)
	n := uint64(len(f.bits) * 64)
	for i := 0; i < f.k; i++ {
		bit := (h1 + uint64(i)*h2) % n
		f.bits[bit/64] |= 1 << (bit % 64)
	}
}

// MayContain reports whether key may have been added (always true if it was).
func (f *ObjectFilter) MayContain(key string) bool {
	h1, h2 := f.hashes(key)
	n := uint64(len(f.bits) * 64)
	for i := 0; i < f.k; i++ {
		bit := (h1 + uint64(i)*h2) % n
		if f.bits[bit/64]&(1<<(bit%64)) == 0 {
			return false
		}
	}
	return true
}

// Bytes is the filter's size in memory.
func (f *ObjectFilter) Bytes() int { return len(f.bits) * 8 }
