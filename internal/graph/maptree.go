package graph

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage"
)

// ErrChunkNotFound reports a map chunk that is not in storage.
var ErrChunkNotFound = errors.New("graph: map chunk not found")

// ErrCorrupt reports a chunk that disagrees with its hash or its parent.
var ErrCorrupt = errors.New("graph: corrupt map")

// Chunk is one chunk of a map to be written: its key and exact bytes.
type Chunk struct {
	Key  string
	Hash format.Hash
	Body []byte
}

// maxKey sorts after every valid key (0xff never occurs in UTF-8).
const maxKey = "\xff"

// chunkCacheSize bounds the decoded chunks a mapReader keeps: 512 manifest leaves
// hold about 260,000 entries.
const chunkCacheSize = 512

// mapReader reads, checks and caches chunks of one map kind; concurrency-safe.
type mapReader[E any] struct {
	s     storage.Store
	spec  format.MapSpec[E]
	graph string
	table string

	mu      sync.Mutex
	cache   map[format.Hash]decodedChunk[E]
	pending map[format.Hash][]byte // chunks built but not yet written, readable during their build
	shared  *ChunkCache            // the worker's, across operations (Graph.ShareChunks); nil: none
}

type decodedChunk[E any] struct {
	leaf []E
	node *format.MapNode
}

func newMapReader[E any](s storage.Store, spec format.MapSpec[E], graph, table string) *mapReader[E] {
	return &mapReader[E]{s: s, spec: spec, graph: graph, table: table, cache: map[format.Hash]decodedChunk[E]{}}
}

func (r *mapReader[E]) key(h format.Hash) string {
	return format.ChunkKey(r.graph, r.spec.Kind, r.table, h)
}

// chunk reads and decodes the chunk h.
func (r *mapReader[E]) chunk(ctx context.Context, h format.Hash) (decodedChunk[E], error) {
	r.mu.Lock()
	c, ok := r.cache[h]
	body, isPending := r.pending[h]
	r.mu.Unlock()
	if ok {
		return c, nil
	}
	key := r.key(h)
	kept := false // in the worker's cache: stored once, and never other bytes
	if !isPending && r.shared != nil {
		body, kept = r.shared.get(key)
	}
	if !isPending && !kept {
		obj, err := r.s.Get(ctx, key)
		if errors.Is(err, storage.ErrNotFound) {
			return c, fmt.Errorf("read %s chunk %s: %w: %w", r.spec.Kind, h, ErrChunkNotFound, err)
		}
		if err != nil {
			return c, fmt.Errorf("read %s chunk %s: %w", r.spec.Kind, h, err)
		}
		if body = obj.Body; format.HashOf(body) != h {
			return c, fmt.Errorf("read %s chunk %s: %w: its bytes hash to %s", r.spec.Kind, key, ErrCorrupt, format.HashOf(body))
		}
		if r.shared != nil {
			r.shared.add(key, body)
		}
	}
	leaf, node, err := r.spec.DecodeChunk(body)
	if err != nil {
		return c, fmt.Errorf("read %s chunk %s: %w", r.spec.Kind, key, err)
	}
	c = decodedChunk[E]{leaf: leaf, node: node}
	if isPending {
		return c, nil // not cached: it may never be written
	}
	r.mu.Lock()
	if len(r.cache) >= chunkCacheSize {
		clear(r.cache)
	}
	r.cache[h] = c
	r.mu.Unlock()
	return c, nil
}

// builder is the streaming chunker: entries go in in key order, and chunks
// end where the map's BoundaryAfter or the size cap says; levels[k] holds the
// pending items of level k (entries at 0, child refs above).
type builder[E any] struct {
	spec   format.MapSpec[E]
	key    func(format.Hash) string
	levels []*levelBuilder[E]
	chunks []Chunk
	seen   map[format.Hash]bool
	old    map[format.Hash]bool // chunks of the edited map the build read; need not be rewritten
	count  int64
	sizes  []int  // the encoded size of an empty chunk of each level, once known
	enc    []byte // the entry addEntry encodes, reused
}

type levelBuilder[E any] struct {
	entries  []E
	encoded  []byte // the entries' encodings, comma-separated: the leaf's entries as they are
	children []format.ChildRef
	size     int   // encoded size of the chunk so far
	count    int64 // entries under the pending items
	received int   // items added to this level in all
}

func newBuilder[E any](spec format.MapSpec[E], key func(format.Hash) string) *builder[E] {
	return &builder[E]{spec: spec, key: key, seen: map[format.Hash]bool{}, old: map[format.Hash]bool{}}
}

func (b *builder[E]) level(k int) *levelBuilder[E] {
	for len(b.levels) <= k {
		b.levels = append(b.levels, &levelBuilder[E]{})
	}
	return b.levels[k]
}

// fresh reports whether levels 0..k hold nothing pending.
func (b *builder[E]) fresh(k int) bool {
	for i := 0; i <= k && i < len(b.levels); i++ {
		if lb := b.levels[i]; len(lb.entries) > 0 || len(lb.children) > 0 {
			return false
		}
	}
	return true
}

func (lb *levelBuilder[E]) pending() int { return len(lb.entries) + len(lb.children) }

func (b *builder[E]) overhead(level int) int {
	for len(b.sizes) <= level {
		if k := len(b.sizes); k == 0 {
			b.sizes = append(b.sizes, b.spec.LeafOverhead())
		} else {
			b.sizes = append(b.sizes, b.spec.NodeOverhead(k))
		}
	}
	return b.sizes[level]
}

// addEntry adds the next entry (keys strictly ascending).
func (b *builder[E]) addEntry(e E) error {
	enc, err := b.spec.AppendEntry(b.enc[:0], e)
	if err != nil {
		return err
	}
	b.enc = enc
	lb := b.level(0)
	if n := len(lb.entries); n > 0 && b.spec.Key(lb.entries[n-1]) >= b.spec.Key(e) {
		return fmt.Errorf("map entries out of order: %q after %q", b.spec.Key(e), b.spec.Key(lb.entries[n-1]))
	}
	b.count++
	return b.push(0, len(enc), b.spec.Key(e), 1, func(lb *levelBuilder[E]) {
		if len(lb.entries) > 0 {
			lb.encoded = append(lb.encoded, ',')
		}
		lb.entries, lb.encoded = append(lb.entries, e), append(lb.encoded, enc...)
	})
}

// addChild adds a reference to a chunk of level k-1 to level k.
func (b *builder[E]) addChild(k int, c format.ChildRef) error {
	return b.push(k, b.spec.ChildSize(c), c.Last, c.Count, func(lb *levelBuilder[E]) { lb.children = append(lb.children, c) })
}

// push adds an item of encoded size n, ending at key last and holding count
// entries, to level k, flushing before it if it would not fit, after it on a boundary.
func (b *builder[E]) push(k, n int, last string, count int64, add func(*levelBuilder[E])) error {
	lb := b.level(k)
	if lb.pending() > 0 && b.overhead(k)+lb.size+1+n > format.MaxChunkSize {
		if err := b.flush(k); err != nil {
			return err
		}
	}
	if lb.pending() > 0 {
		lb.size++
	}
	add(lb)
	lb.size += n
	lb.count += count
	lb.received++
	if b.spec.BoundaryAfter(k, last) {
		return b.flush(k)
	}
	return nil
}

// flush ends the chunk pending at level k and adds it to level k+1.
func (b *builder[E]) flush(k int) error {
	lb := b.level(k)
	if lb.pending() == 0 {
		return nil
	}
	var (
		body []byte
		last string
		err  error
	)
	if k == 0 {
		body = b.spec.LeafOf(lb.encoded) // addEntry encoded and ordered them
		last = b.spec.Key(lb.entries[len(lb.entries)-1])
	} else {
		body, err = b.spec.EncodeNode(format.MapNode{Level: k, Children: lb.children})
		last = lb.children[len(lb.children)-1].Last
	}
	if err != nil {
		return err
	}
	h := format.HashOf(body)
	if !b.seen[h] {
		b.seen[h] = true
		b.chunks = append(b.chunks, Chunk{Key: b.key(h), Hash: h, Body: body})
	}
	ref := format.ChildRef{Last: last, Count: lb.count, Chunk: h}
	// The entries' slices are reused: the leaf's bytes hold them now.
	lb.entries, lb.encoded, lb.children, lb.size, lb.count = lb.entries[:0], lb.encoded[:0], nil, 0, 0
	return b.addChild(k+1, ref)
}

// finish flushes every level and returns the root (none for an empty map).
func (b *builder[E]) finish() (format.ChildRef, bool, error) {
	for k := 0; k < len(b.levels); k++ {
		lb := b.levels[k]
		top := k == len(b.levels)-1
		if k >= 1 && top && lb.received == 1 && len(lb.children) == 1 {
			return lb.children[0], true, nil
		}
		if err := b.flush(k); err != nil {
			return format.ChildRef{}, false, err
		}
	}
	return format.ChildRef{}, false, nil
}

// mapTree is one map of one kind, read through a mapReader.
type mapTree[E any] struct {
	r   *mapReader[E]
	ref format.MapRef[E]
	// sub makes the tree the subtree ref.Root, of level subLevel, after subLow,
	// of a larger map (so comparable, chunk for chunk, with that map).
	sub      bool
	subLevel int
	subLast  string
	subLow   string
}

// subtree returns the subtree c, a chunk of level after key low, of r's map.
func subtree[E any](r *mapReader[E], c format.ChildRef, level int, low string) mapTree[E] {
	return mapTree[E]{r: r, ref: format.MapRef[E]{Root: c.Chunk, Count: c.Count}, sub: true, subLevel: level, subLast: c.Last, subLow: low}
}

// allEntries returns every entry of the map, in key order.
func (t mapTree[E]) allEntries(ctx context.Context) ([]E, error) {
	var out []E
	err := t.each(ctx, func(e E) error { out = append(out, e); return nil })
	return out, err
}

// each calls fn for every entry in key order, reading the chunks ahead of it.
func (t mapTree[E]) each(ctx context.Context, fn func(E) error) error {
	c := newCursor(t)
	c.readAhead(func(format.ChildRef) bool { return true })
	defer c.close()
	for it := c.peek(); !it.end; it = c.peek() {
		if err := c.take(ctx, it, fn); err != nil {
			return err
		}
	}
	return nil
}

// get returns the entry with key, O(height) chunk reads.
func (t mapTree[E]) get(ctx context.Context, key string) (E, bool, error) {
	var zero E
	find := func(entries []E) (E, bool, error) {
		i, ok := slices.BinarySearchFunc(entries, key, func(e E, k string) int { return strings.Compare(t.r.spec.Key(e), k) })
		if !ok {
			return zero, false, nil
		}
		return entries[i], true, nil
	}
	if t.ref.IsInline() {
		return find(t.ref.Entries)
	}
	for h := t.ref.Root; ; {
		c, err := t.r.chunk(ctx, h)
		if err != nil {
			return zero, false, err
		}
		if c.node == nil {
			return find(c.leaf)
		}
		var ok bool
		if h, ok = childFor(c.node, key); !ok {
			return zero, false, nil
		}
	}
}

// childFor returns the child of n whose subtree would hold key, or false when key is
// past n's last.
func childFor(n *format.MapNode, key string) (format.Hash, bool) {
	i, _ := slices.BinarySearchFunc(n.Children, key, func(ch format.ChildRef, k string) int { return strings.Compare(ch.Last, k) })
	if i == len(n.Children) {
		return format.Hash{}, false
	}
	return n.Children[i].Chunk, true
}

// holds reports whether the tree has the chunk h, of level (0: a leaf), which holds
// key: it follows key down as a lookup does, reading the chunks a lookup reads.
func (t mapTree[E]) holds(ctx context.Context, h format.Hash, key string, level int) (bool, error) {
	if t.ref.IsInline() {
		return false, nil
	}
	for cur := t.ref.Root; ; {
		if cur == h {
			return true, nil
		}
		c, err := t.r.chunk(ctx, cur)
		if err != nil {
			return false, err
		}
		if c.node == nil || c.node.Level <= level {
			return false, nil
		}
		var ok bool
		if cur, ok = childFor(c.node, key); !ok {
			return false, nil
		}
	}
}

// mapEdit sets (Entry non-nil, whose key is Key) or removes (nil) the entry of Key.
type mapEdit[E any] struct {
	Key   string
	Entry *E
}

// strictlyAscending reports whether edits' keys ascend with no key twice (equal
// neighbours compare as out of order).
func strictlyAscending[E any](edits []mapEdit[E]) bool {
	return slices.IsSortedFunc(edits, func(a, b mapEdit[E]) int { return cmp.Or(strings.Compare(a.Key, b.Key), -1) })
}

// sortEdits sorts edits by key; a key edited twice keeps the last edit.
func sortEdits[E any](edits []mapEdit[E]) []mapEdit[E] {
	if strictlyAscending(edits) {
		return edits // as a table written in name order is
	}
	out := slices.Clone(edits)
	slices.Reverse(out) // the last edit of a key sorts first, and compacting keeps it
	slices.SortStableFunc(out, func(a, b mapEdit[E]) int { return strings.Compare(a.Key, b.Key) })
	return slices.CompactFunc(out, func(a, b mapEdit[E]) bool { return a.Key == b.Key })
}

// apply returns the edited map and the chunks it needs that the old one did
// not have. Unchanged subtrees are reused whole: the cost is the paths to the
// edits, the right edge, and the chunks until the chunking is back in step.
func (t mapTree[E]) apply(ctx context.Context, edits []mapEdit[E]) (format.MapRef[E], []Chunk, error) {
	edits = sortEdits(edits)
	if len(edits) == 0 && (!t.ref.IsInline() || t.r.spec.InlineFits(t.ref.Entries)) {
		return t.ref, nil, nil
	}
	// (An inline map too large to be inline is rebuilt even without edits.)
	spec := t.r.spec
	b := newBuilder(spec, t.r.key)
	if t.ref.IsInline() {
		if err := feedMerged(b, spec, t.ref.Entries, edits); err != nil {
			return format.MapRef[E]{}, nil, err
		}
	} else {
		rest, err := t.visit(ctx, b, t.rootRef(), -1, "", "", true, edits)

		if err != nil {
			return format.MapRef[E]{}, nil, err
		}
		if len(rest) != 0 {
			return format.MapRef[E]{}, nil, fmt.Errorf("map edits left over after the walk: %d", len(rest))
		}
	}
	return t.result(ctx, b)
}

// result finishes b: inline when the entries fit, chunks otherwise.
func (t mapTree[E]) result(ctx context.Context, b *builder[E]) (format.MapRef[E], []Chunk, error) {
	root, ok, err := b.finish()
	if err != nil {
		return format.MapRef[E]{}, nil, err
	}
	if !ok {
		return format.MapRef[E]{}, nil, nil // empty
	}
	t.r.seed(b.chunks)
	defer t.r.unseed(b.chunks)
	// A root node with one child is replaced by the child.
	dropped := map[format.Hash]bool{}
	for {
		c, err := t.r.chunk(ctx, root.Chunk)
		if err != nil {
			return format.MapRef[E]{}, nil, err
		}
		if c.node == nil || len(c.node.Children) != 1 {
			break
		}
		dropped[root.Chunk] = true
		root = c.node.Children[0]
	}
	if root.Count <= format.MapInlineMaxEntries {
		built := mapTree[E]{r: t.r, ref: format.MapRef[E]{Root: root.Chunk, Count: root.Count}}
		entries, err := built.allEntries(ctx)
		if err != nil {
			return format.MapRef[E]{}, nil, err
		}
		if t.r.spec.InlineFits(entries) {
			return format.MapRef[E]{Entries: entries}, nil, nil
		}
	}
	// Every flushed chunk is reachable from the root but the dropped wrappers.
	chunks := b.chunks[:0:0]
	for _, c := range b.chunks {
		if !dropped[c.Hash] && !b.old[c.Hash] {
			chunks = append(chunks, c)
		}
	}
	return format.MapRef[E]{Root: root.Chunk, Count: root.Count}, chunks, nil
}

// seed makes unwritten chunks readable to their build; unseed forgets them.
func (r *mapReader[E]) seed(chunks []Chunk) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pending == nil {
		r.pending = map[format.Hash][]byte{}
	}
	for _, c := range chunks {
		r.pending[c.Hash] = c.Body
	}
}

func (r *mapReader[E]) unseed(chunks []Chunk) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range chunks {
		delete(r.pending, c.Hash)
	}
}

// feedMerged feeds the sorted entries with the sorted edits applied.
func feedMerged[E any](b *builder[E], spec format.MapSpec[E], entries []E, edits []mapEdit[E]) error {
	i, j := 0, 0
	for i < len(entries) || j < len(edits) {
		if j == len(edits) || i < len(entries) && spec.Key(entries[i]) < edits[j].Key {
			if err := b.addEntry(entries[i]); err != nil {
				return err
			}
			i++
			continue
		}
		if i < len(entries) && spec.Key(entries[i]) == edits[j].Key {
			i++ // same key: the edit wins
		}
		if e := edits[j].Entry; e != nil {
			if err := b.addEntry(*e); err != nil {
				return err
			}
		}
		j++
	}
	return nil
}

// visit feeds the subtree ref (a chunk of level; -1: the root) covering keys
// (low, ref.Last], or to the map's end when rightmost, with its edits applied, and
// returns the edits after it. next is the last key of the subtree holding the item
// after this chunk at its level ("" when rightmost).
func (t mapTree[E]) visit(ctx context.Context, b *builder[E], ref format.ChildRef, level int, low, next string, rightmost bool, edits []mapEdit[E]) ([]mapEdit[E], error) {
	n := 0
	for n < len(edits) && (rightmost || edits[n].Key <= ref.Last) {
		n++
	}
	mine, rest := edits[:n], edits[n:]
	// Reuse the chunk whole when nothing in it changes and nothing is
	// pending below its level, if the chunker would end it where it ends: on
	// a key boundary; at the end of the map, which it still is; or, ended
	// because the next item did not fit, if that item is unchanged.
	if len(mine) == 0 && level >= 0 && b.fresh(level) &&
		(t.r.spec.BoundaryAfter(level, ref.Last) || rightmost || len(rest) == 0 || rest[0].Key > next && next != "") {
		b.count += ref.Count
		return rest, b.addChild(level+1, ref)
	}
	c, err := t.r.chunk(ctx, ref.Chunk)
	if err != nil {
		return nil, err
	}
	b.old[ref.Chunk] = true
	if err := checkChunk(t.r.spec, ref, level, low, c); err != nil {
		return nil, err
	}
	if c.node == nil {
		return rest, feedMerged(b, t.r.spec, c.leaf, mine)
	}
	node := c.node
	prev := low
	for i, child := range node.Children {
		last := i == len(node.Children)-1
		childNext := next
		if !last {
			childNext = node.Children[i+1].Last
		}
		if mine, err = t.visit(ctx, b, child, node.Level-1, prev, childNext, rightmost && last, mine); err != nil {
			return nil, err
		}
		prev = child.Last
	}
	if len(mine) != 0 {
		return nil, fmt.Errorf("map edits beyond a subtree's range")
	}
	return rest, nil
}

// checkChunk checks chunk c against ref, naming it at level (-1: root) after low.
func checkChunk[E any](spec format.MapSpec[E], ref format.ChildRef, level int, low string, c decodedChunk[E]) error {
	bad := func(f string, args ...any) error {
		return fmt.Errorf("%s chunk %s: %w: %s", spec.Kind, ref.Chunk, ErrCorrupt, fmt.Sprintf(f, args...))
	}
	root := level < 0
	if leaf := c.leaf; c.node == nil {
		last := spec.Key(leaf[len(leaf)-1])
		switch {
		case level > 0:
			return bad("a leaf where a level-%d node was named", level)
		case !root && (int64(len(leaf)) != ref.Count || last != ref.Last):
			return bad("leaf of %d entries ending at %q, named with %d ending at %q", len(leaf), last, ref.Count, ref.Last)
		case root && int64(len(leaf)) != ref.Count:
			return bad("root leaf of %d entries, the map says %d", len(leaf), ref.Count)
		case low != "" && spec.Key(leaf[0]) <= low:
			return bad("leaf starts at %q, not after %q", spec.Key(leaf[0]), low)
		}
		return nil
	}
	node := c.node
	var sum int64
	for _, c := range node.Children {
		sum += c.Count
	}
	last := node.Children[len(node.Children)-1].Last
	switch {
	case !root && node.Level != level:
		return bad("a level-%d node where level %d was named", node.Level, level)
	case sum != ref.Count:
		return bad("node counts %d entries, named with %d", sum, ref.Count)
	case !root && last != ref.Last:
		return bad("node ends at %q, named ending at %q", last, ref.Last)
	case low != "" && node.Children[0].Last <= low:
		return bad("node's first child ends at %q, not after %q", node.Children[0].Last, low)
	}
	return nil
}

// cursor steps through a map in key order by entries and whole subtrees.
type cursor[E any] struct {
	t     mapTree[E]
	stack []*frame[E]
	low   string // the last key passed

	// ahead, when set, says which subtrees the cursor will open: opening one
	// starts reading the next readAhead of them at its level, so a walk over
	// a large map decodes on every core while the store answers.
	ahead   func(format.ChildRef) bool
	fetches map[format.Hash]*fetch[E]
}

// readAhead bounds the chunks of one level a cursor reads before it opens
// them: the memory of a walk is that many chunks per level of the map (three
// levels at a million entries), whatever the map's size.
const readAhead = 16

// fetch is a chunk read ahead of its opening.
type fetch[E any] struct {
	done  chan struct{}
	chunk decodedChunk[E]
	err   error
}

// readAhead makes the cursor read ahead the subtrees will says it will open.
func (c *cursor[E]) readAhead(will func(format.ChildRef) bool) {
	c.ahead, c.fetches = will, map[format.Hash]*fetch[E]{}
}

// close waits for the reads started ahead that were not opened (the walk
// ended early), so none outlives the walk.
func (c *cursor[E]) close() {
	for _, ft := range c.fetches {
		<-ft.done
	}
}

// open reads the chunk of ref, the next item of frame f, first starting the
// reads of the items after it.
func (c *cursor[E]) open(ctx context.Context, f *frame[E], ref format.ChildRef) (decodedChunk[E], error) {
	if c.ahead == nil {
		return c.t.r.chunk(ctx, ref.Chunk)
	}
	for _, next := range f.children[f.i:min(f.i+readAhead, len(f.children))] {
		if _, started := c.fetches[next.Chunk]; started || !c.ahead(next) {
			continue
		}
		ft := &fetch[E]{done: make(chan struct{})}
		c.fetches[next.Chunk] = ft
		go func() {
			defer close(ft.done)
			ft.chunk, ft.err = c.t.r.chunk(ctx, next.Chunk)
		}()
	}
	ft, ok := c.fetches[ref.Chunk]
	if !ok {
		return c.t.r.chunk(ctx, ref.Chunk)
	}
	delete(c.fetches, ref.Chunk)
	<-ft.done
	return ft.chunk, ft.err
}

type frame[E any] struct {
	entries  []E
	children []format.ChildRef
	level    int // of the items' chunks (children) or 0 (entries)
	i        int
}

type item[E any] struct {
	end     bool
	isEntry bool
	entry   E
	ref     format.ChildRef
	level   int // the chunk's level; -1 for the root, not yet read
}

func newCursor[E any](t mapTree[E]) *cursor[E] {
	switch {
	case t.sub:
		top := &frame[E]{children: []format.ChildRef{{Last: t.subLast, Count: t.ref.Count, Chunk: t.ref.Root}},
			level: t.subLevel}
		return &cursor[E]{t: t, stack: []*frame[E]{top}, low: t.subLow}
	case t.ref.IsInline():
		return &cursor[E]{t: t, stack: []*frame[E]{{entries: t.ref.Entries}}}
	}
	return &cursor[E]{t: t, stack: []*frame[E]{{children: []format.ChildRef{t.rootRef()}, level: -1}}}
}

// rootRef names the root chunk of a chunked map.
func (t mapTree[E]) rootRef() format.ChildRef {
	return format.ChildRef{Last: maxKey, Count: t.ref.Count, Chunk: t.ref.Root}
}

func (c *cursor[E]) peek() item[E] {
	for len(c.stack) > 0 {
		f := c.stack[len(c.stack)-1]
		if f.children != nil {
			if f.i < len(f.children) {
				return item[E]{ref: f.children[f.i], level: f.level}
			}
		} else if f.i < len(f.entries) {
			return item[E]{isEntry: true, entry: f.entries[f.i]}
		}
		c.stack = c.stack[:len(c.stack)-1]
	}
	return item[E]{end: true}
}

// advance passes the current item.
func (c *cursor[E]) advance() {
	f := c.stack[len(c.stack)-1]
	if f.children != nil {
		c.low = f.children[f.i].Last
	} else {
		c.low = c.t.r.spec.Key(f.entries[f.i])
	}
	f.i++
}

// step passes the current entry e, giving it to fn when fn is set.
func (c *cursor[E]) step(fn func(E) error, e E) error {
	c.advance()
	if fn == nil {
		return nil
	}
	return fn(e)
}

// take steps past the current item it if an entry, else opens its subtree.
func (c *cursor[E]) take(ctx context.Context, it item[E], fn func(E) error) error {
	if it.isEntry {
		return c.step(fn, it.entry)
	}
	return c.expand(ctx)
}

// expand replaces the current subtree item by its chunk's items.
func (c *cursor[E]) expand(ctx context.Context) error {
	f := c.stack[len(c.stack)-1]
	ref, level := f.children[f.i], f.level
	ch, err := c.open(ctx, f, ref)
	if err != nil {
		return err
	}
	f.i++
	if err := checkChunk(c.t.r.spec, ref, level, c.low, ch); err != nil {
		return err
	}
	if ch.node == nil {
		c.stack = append(c.stack, &frame[E]{entries: ch.leaf})
	} else {
		c.stack = append(c.stack, &frame[E]{children: ch.node.Children, level: ch.node.Level - 1})
	}
	return nil
}

// walkFuncs receive what walkMaps finds. Any of them may be nil.
type walkFuncs[E any] struct {
	// onlyA and onlyB get entries only one map holds; when nil, such runs are
	// skipped unread where the walk can tell.
	onlyA, onlyB func(E) error
	both         func(a, b E) error // the entries of a key both maps hold that were read
	// shared gets each subtree both hold (unread), its level and low.
	shared func(c format.ChildRef, level int, low string) error
}

func (fn walkFuncs[E]) share(c format.ChildRef, level int, low string) error {
	if fn.shared == nil {
		return nil
	}
	return fn.shared(c, level, low)
}

// walkMaps walks a and b in key order together, skipping the subtrees they
// share: it reads the chunks in which they differ (and, where only one side's
// entries are wanted, that side's chunks around them).
func walkMaps[E any](ctx context.Context, a, b mapTree[E], fn walkFuncs[E]) error {
	if !a.ref.IsInline() && !b.ref.IsInline() && a.ref.Root == b.ref.Root && !a.sub && !b.sub {
		return fn.share(a.rootRef(), -1, "")
	}
	ca, cb := newCursor(a), newCursor(b)
	spec := a.r.spec
	// height orders subtrees for opening: a root is higher than anything.
	height := func(level int) int {
		if level < 0 {
			return format.MaxMapLevel + 1
		}
		return level
	}
	for {
		ia, ib := ca.peek(), cb.peek()
		var err error
		switch {
		case ia.end && ib.end:
			return nil
		case ia.end || ib.end:
			c, it, only := cb, ib, fn.onlyB
			if ib.end {
				c, it, only = ca, ia, fn.onlyA
			}
			if only == nil {
				return nil
			}
			err = c.take(ctx, it, only)
		case !ia.isEntry && fn.onlyA == nil && ia.level >= 0 && ia.ref.Last <= cb.low:
			ca.advance() // wholly before b's next key: only a's entries
		case !ib.isEntry && fn.onlyB == nil && ib.level >= 0 && ib.ref.Last <= ca.low:
			cb.advance()
		case !ia.isEntry && !ib.isEntry && ia.level >= 0 && ia.level == ib.level && ia.ref.Chunk == ib.ref.Chunk:
			err = fn.share(ia.ref, ia.level, ca.low)
			ca.advance()
			cb.advance()
		case ia.isEntry && ib.isEntry:
			switch ka, kb := spec.Key(ia.entry), spec.Key(ib.entry); {
			case ka < kb:
				err = ca.step(fn.onlyA, ia.entry)
			case kb < ka:
				err = cb.step(fn.onlyB, ib.entry)
			default:
				ca.advance()
				cb.advance()
				if fn.both != nil {
					err = fn.both(ia.entry, ib.entry)
				}
			}
		case ia.isEntry || ib.isEntry: // one is a subtree: skipped if wholly before the other's entry
			c, sub, only, key := cb, ib, fn.onlyB, spec.Key(ia.entry)
			if ib.isEntry {
				c, sub, only, key = ca, ia, fn.onlyA, spec.Key(ib.entry)
			}
			if sub.ref.Last < key && only == nil && sub.level >= 0 {
				c.advance()
			} else {
				err = c.expand(ctx)
			}
		default: // two subtrees: open the higher; at one height, the one that ends first, or both
			ha, hb, la, lb := height(ia.level), height(ib.level), ia.ref.Last, ib.ref.Last
			switch {
			case ha > hb || ha == hb && la < lb:
				err = ca.expand(ctx)
			case hb > ha || lb < la:
				err = cb.expand(ctx)
			default:
				if err = ca.expand(ctx); err == nil {
					err = cb.expand(ctx)
				}
			}
		}
		if err != nil {
			return err
		}
	}
}
