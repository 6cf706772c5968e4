package graph

import (
	"context"
	"fmt"
	"sync"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage"
)

// Commit is a commit as this package reads and writes it.
type Commit = format.Commit

// ReadCommit reads the commit with the given id: one GET.
func ReadCommit(ctx context.Context, s storage.Store, graph, commitID string) (Commit, error) {
	if err := format.ValidateGraphName(graph); err != nil {
		return Commit{}, invalid("Graph", err)
	}
	id, err := format.ParseCommitID(commitID)
	if err != nil {
		return Commit{}, invalid("CommitID", err)
	}
	return (&Graph{S: s, Name: graph}).Commit(ctx, id)
}

// Commit reads a commit by id: one GET, none for a commit this Graph keeps (KeepCommits).
func (g *Graph) Commit(ctx context.Context, id format.CommitID) (Commit, error) {
	g.mu.Lock()
	c, kept := g.commits[id]
	g.mu.Unlock()
	if kept {
		return c, nil
	}
	c, err := getDecoded(ctx, g.S, format.CommitIDKey(g.Name, id), "read commit "+id.String(), ErrCommitNotFound,
		format.DecodeCommit, func(c Commit) error {
			why := "is " + c.ID.String() + ", not the commit its key names"
			return misnamed(c.ID != id, format.KindCommit, "id", why)
		})
	if err == nil {
		g.Keep(c)
	}
	return c, err
}

// KeepCommits makes g keep every commit it reads or is given (Keep) and answer
// later reads of them without a request: for one step's reads, where a commit
// read once need not be read again (a commit's bytes never change), never for a
// Graph that outlives the step (a kept commit may be reclaimed meanwhile).
func (g *Graph) KeepCommits() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.commits == nil {
		g.commits = map[format.CommitID]Commit{}
	}
}

// Keep gives g commits read elsewhere (a branch's head), when it keeps commits.
func (g *Graph) Keep(cs ...Commit) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.commits == nil {
		return
	}
	for _, c := range cs {
		g.commits[c.ID] = c
	}
}

// Pin returns the version of table that c pins, or false.
func (g *Graph) Pin(ctx context.Context, c Commit, table string) (ulid.ULID, bool, error) {
	e, ok, err := g.pinsOf(c).get(ctx, table)
	return e.Version, ok, err
}

// EachPin calls fn for every table c pins, in name order, chunk by chunk.
func (g *Graph) EachPin(ctx context.Context, c Commit, fn func(format.PinEntry) error) error {
	return g.pinsOf(c).each(ctx, fn)
}

// Graph reads and writes one graph through one store; safe for concurrent use.
type Graph struct {
	S       storage.Store
	Name    string
	pins    *mapReader[format.PinEntry]
	lineage *mapReader[format.LineageEntry]

	mu     sync.Mutex
	tables map[string]*mapReader[format.ManifestEntry]
	// commits, when not nil, are the commits read or given (KeepCommits).
	commits map[format.CommitID]Commit
	shared  *ChunkCache // ShareChunks; nil: none
}

// Open returns the API of graph on s. It reads nothing.
func Open(s storage.Store, graph string) (*Graph, error) {
	if err := format.ValidateGraphName(graph); err != nil {
		return nil, invalid("Graph", err)
	}
	return &Graph{S: s, Name: graph,
		pins:    newMapReader(s, format.PinsMap, graph, ""),
		lineage: newMapReader(s, format.LineageMap, graph, "")}, nil
}

// ShareChunks makes g read and keep pins and lineage chunks in cache, shared with
// the graphs of other operations (a worker's). It returns g.
func (g *Graph) ShareChunks(cache *ChunkCache) *Graph {
	g.shared = cache
	g.pins.shared, g.lineage.shared = cache, cache
	return g
}

// HasPinsChunk reports whether c's pins map has ch, a chunk a plan built: false for
// a chunk of another map. It reads only the chunks on the way to where ch would be.
func (g *Graph) HasPinsChunk(ctx context.Context, c Commit, ch Chunk) (bool, error) {
	leaf, node, err := format.PinsMap.DecodeChunk(ch.Body)
	if err != nil {
		return false, nil // a lineage chunk
	}
	key, level := "", 0
	if node != nil {
		key, level = node.Children[0].Last, node.Level
	} else {
		key = leaf[0].Table
	}
	return g.pinsOf(c).holds(ctx, ch.Hash, key, level)
}

func (g *Graph) pinsOf(c Commit) mapTree[format.PinEntry] {
	return mapTree[format.PinEntry]{r: g.pins, ref: c.Pins}
}

func (g *Graph) lineageOf(c Commit) mapTree[format.LineageEntry] {
	return mapTree[format.LineageEntry]{r: g.lineage, ref: c.Lineage}
}

// ancestorAt returns c, or c's highest ancestor in tree, from c's lineage.
func (g *Graph) ancestorAt(ctx context.Context, c Commit, tree ulid.ULID) (format.CommitID, bool, error) {
	if tree == c.ID.Tree {
		return c.ID, true, nil
	}
	e, ok, err := g.lineageOf(c).get(ctx, tree.String())
	if err != nil || !ok {
		return format.CommitID{}, false, err
	}
	return e.ID(), true, nil
}

// IsAncestorOf reports whether id (on its tree's history) is c or its ancestor.
func (g *Graph) IsAncestorOf(ctx context.Context, id format.CommitID, c Commit) (bool, error) {
	at, ok, err := g.ancestorAt(ctx, c, id.Tree)
	if err != nil || !ok {
		return false, err
	}
	if at.Seq == id.Seq {
		// One position on a tree's history is one commit.
		return at == id, nil
	}
	return id.Seq < at.Seq, nil
}

// childLineage returns the lineage of a commit in tree with the given parents
// (first first): the max-union of the parents' ancestries without tree, and
// the new chunks; a merge reads only where the lineages differ.
func (g *Graph) childLineage(ctx context.Context, tree ulid.ULID, parents ...Commit) (format.MapRef[format.LineageEntry], []Chunk, error) {
	if len(parents) == 0 {
		return format.MapRef[format.LineageEntry]{}, nil, nil
	}
	first := parents[0]
	base := g.lineageOf(first)
	var edits []mapEdit[format.LineageEntry]
	raise := func(e format.LineageEntry) {
		if e.Tree == tree {
			return
		}
		edits = append(edits, mapEdit[format.LineageEntry]{Key: e.Tree.String(), Entry: &e})
	}
	if first.ID.Tree != tree {
		raise(format.LineageOf(first.ID)) // a fork: the parent's own position
	}
	for _, m := range parents[1:] {
		// max-union with the merged parent's ancestry.
		own, ok, err := base.get(ctx, m.ID.Tree.String())
		if err != nil {
			return format.MapRef[format.LineageEntry]{}, nil, err
		}
		if !ok || own.Seq < m.ID.Seq {
			raise(format.LineageOf(m.ID))
		}
		err = walkMaps(ctx, base, g.lineageOf(m), walkFuncs[format.LineageEntry]{
			onlyB: func(e format.LineageEntry) error { raise(e); return nil },
			both: func(a, b format.LineageEntry) error {
				if b.Seq > a.Seq {
					raise(b)
				}
				return nil
			},
		})
		if err != nil {
			return format.MapRef[format.LineageEntry]{}, nil, fmt.Errorf("merge lineages: %w", err)
		}
	}
	return base.apply(ctx, edits)
}
