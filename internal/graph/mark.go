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

// Cleanup's mark (activities/cleanup_mark.go): a streaming walk over everything a retained commit or version names.
//
// Retention rule. A key is retained when a retained root reaches it: a
// retained commit keeps its pins chunks, its lineage chunks and every
// version it pins; a retained version keeps its manifest chunks and every
// object its entries name that graft wrote. A chunk shared by several roots
// is kept if any of them is retained — chunks are content-addressed, so the
// same chunk serves every version with those entries — and an unreferenced
// chunk is garbage like any other unreferenced object. Keys an in-flight
// operation pins are kept whatever the walk says (a writer pins the chunks it
// is about to write or reuse before it writes them: a put-if-absent that
// finds a chunk already there is a new reference to it), and so are keys
// younger than the guard window. External objects are never deleted: the
// walk reports them (MarkExternal) only so a caller can check them.
//
// Deletion order, so a probe that finds a referrer after pinning it proves
// its referents are there: commits, then pins and lineage chunks, then table
// versions, then manifest chunks, then data objects: an operation that pins a
// commit and then finds it probes everything the commit reaches.

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
// commit, version and chunk once however many roots share it, and each
// object once per leaf chunk that lists it (a leaf a later version rewrote
// lists some objects again; a set such as ObjectFilter absorbs that). It
// holds the hashes of the
// chunks it visited and the keys of the versions, so its memory grows with
// the number of distinct chunks (one per ~128 entries), never with a table's
// entries. Not safe for concurrent use.
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

// Commit marks a retained commit: itself, its pins and lineage chunks, and
// every version it pins (Version).
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

// Version marks a retained table version: itself, its manifest chunks and
// the objects its entries name.
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

// markChunks visits every chunk of a map not visited before, and passes the
// entries under them to each; a subtree already visited is skipped whole
// (its entries were passed then).
func markChunks[E any](ctx context.Context, m *Marker, t mapTree[E], kind MarkKind, table string, each func(E) error) error {
	if t.ref.IsInline() {
		if each == nil {
			return nil
		}
		for _, e := range t.ref.Entries {
			if err := each(e); err != nil {
				return err
			}
		}
		return nil
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
		if c.node != nil {
			for _, child := range c.node.Children {
				if err := walk(child.Chunk); err != nil {
					return err
				}
			}
			return nil
		}
		if each == nil {
			return nil
		}
		for _, e := range c.leaf {
			if err := each(e); err != nil {
				return err
			}
		}
		return nil
	}
	return walk(t.ref.Root)
}

// ObjectFilter is a Bloom filter over keys: a set in bounded memory with no
// false negatives, for a mark that must tell, for each listed object,
// whether a retained version names it. A false positive keeps a garbage
// object one more run (a later run, with another seed, reclaims it); a
// false negative cannot happen, so nothing named is ever condemned for it.
type ObjectFilter struct {
	bits []uint64
	k    int
	seed uint64
}

// minFilterBits is the least a filter holds. The sizing formula assumes
// independent hash positions; over a filter of a few words, double hashing
// repeats positions across keys and the real rate is hundreds of times the
// asked one (a one-key filter of 64 bits answered yes to 1 key in 1,000).
// 64 Kib (8 KiB) per table marked costs nothing and keeps small filters
// exact in practice.
const minFilterBits = 1 << 16

// NewObjectFilter sizes a filter for n keys at false-positive rate p
// (0 < p < 1), hashing with seed.
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

// MayContain reports whether key may have been added: always true for a
// key that was.
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
