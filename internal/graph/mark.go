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

// Cleanup's mark (activities/cleanup_mark.go, docs/format.md *Cleanup*): a
// streaming walk over what retained commits and versions name. A retained commit
// keeps its pins and lineage chunks and the versions it pins; a retained version
// its manifest chunks and the objects graft wrote that it names. Keys an
// in-flight operation pins (a writer pins chunks before it writes or reuses
// them) and keys younger than the guard window are kept whatever the walk says;
// external objects are never deleted. Deletion goes commits, pins and lineage
// chunks, versions, manifest chunks, data objects, so a probe that pins a
// referrer and then finds it proves its referents are there.

// MarkKind says what a marked key is.
type MarkKind string

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
	Kind  MarkKind
	Key   string
	Table string // for versions, manifest chunks and objects
	Size  int64  // an object's size from its entry
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
	Reads    int // the objects the walk read
}

// NewMarker returns a Marker over g that reports to visit.
func (g *Graph) NewMarker(visit func(Mark) error) *Marker {
	return &Marker{g: g, visit: visit, chunks: map[format.Hash]bool{}, versions: map[string]bool{}, commits: map[string]bool{}}
}

// Commit marks a retained commit, its chunks and every version it pins.
func (m *Marker) Commit(ctx context.Context, c Commit) error {
	var pinned []format.PinEntry
	versions := func() error {
		for _, p := range pinned {
			if err := m.Version(ctx, p.Table, p.Version); err != nil {
				return err
			}
		}
		pinned = pinned[:0]
		return nil
	}
	err := m.CommitOnly(ctx, c, func(e format.PinEntry) error {
		if pinned = append(pinned, e); len(pinned) < 1024 {
			return nil
		}
		return versions()
	})
	if err != nil {
		return err
	}
	return versions()
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
	c := newCursor(t)
	c.readAhead(func(ref format.ChildRef) bool { return !m.chunks[ref.Chunk] })
	defer c.close()
	for it := c.peek(); !it.end; it = c.peek() {
		var err error
		switch h := it.ref.Chunk; {
		case it.isEntry:
			err = c.step(each, it.entry)
		case m.chunks[h]:
			c.advance()
		default:
			m.chunks[h] = true
			if err = m.visit(Mark{Kind: kind, Key: t.r.key(h), Table: table}); err == nil {
				err = c.expand(ctx)
				m.Reads++
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// ObjectFilter is a Bloom filter over keys: no false negatives, so nothing a
// retained version names is condemned; a false positive keeps a garbage object
// until a later run with another seed.
type ObjectFilter struct {
	bits []uint64
	k    int
	seed uint64
}

// minFilterBits (8 KiB) is the least a filter holds: on a few words double hashing
// repeats positions, for hundreds of times the asked false-positive rate.
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

// eachBit calls fn with the word and mask of each of key's k bits while fn says go on.
func (f *ObjectFilter) eachBit(key string, fn func(word *uint64, mask uint64) bool) {
	h := sha256.New()
	h.Write(binary.LittleEndian.AppendUint64(nil, f.seed))
	h.Write([]byte(key))
	sum := h.Sum(nil)
	h1, h2 := binary.LittleEndian.Uint64(sum[:8]), binary.LittleEndian.Uint64(sum[8:16])|1
	n := uint64(len(f.bits) * 64)
	for i := 0; i < f.k; i++ {
		bit := (h1 + uint64(i)*h2) % n
		if !fn(&f.bits[bit/64], 1<<(bit%64)) {
			return
		}
	}
}

// Add adds key.
func (f *ObjectFilter) Add(key string) {
	f.eachBit(key, func(w *uint64, mask uint64) bool { *w |= mask; return true })
}

// MayContain reports whether key may have been added (always true if it was).
func (f *ObjectFilter) MayContain(key string) (in bool) {
	in = true
	f.eachBit(key, func(w *uint64, mask uint64) bool { in = *w&mask != 0; return in })
	return in
}

// CommitOnly marks a commit and its chunks, passing newly seen pins to pinned.
func (m *Marker) CommitOnly(ctx context.Context, c Commit, pinned func(format.PinEntry) error) error {
	key := format.CommitIDKey(m.g.Name, c.ID)
	if m.commits[key] {
		return nil
	}
	m.commits[key] = true
	if err := m.visit(Mark{Kind: MarkCommit, Key: key}); err != nil {
		return err
	}
	if err := markChunks(ctx, m, m.g.lineageOf(c), MarkLineageChunk, "", nil); err != nil {
		return fmt.Errorf("mark lineage of %s: %w", c.ID, err)
	}
	if err := markChunks(ctx, m, m.g.pinsOf(c), MarkPinsChunk, "", pinned); err != nil {
		return fmt.Errorf("mark pins of %s: %w", c.ID, err)
	}
	return nil
}

// EachLineage calls fn for every entry of c's lineage, in tree order.
func (g *Graph) EachLineage(ctx context.Context, c Commit, fn func(format.LineageEntry) error) error {
	return g.lineageOf(c).each(ctx, fn)
}
