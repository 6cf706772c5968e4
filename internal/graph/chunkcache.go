package graph

import (
	"container/list"
	"sync"
)

// ChunkCache keeps the bytes of pins and lineage chunks across operations, for a
// worker: the chunks one operation read or wrote are the ones the next reads
// (main's pins and lineage, merge after merge). Safe for concurrent use.
//
// A chunk's key names the SHA-256 of its bytes, so a kept copy is never stale. A
// chunk cleanup has since reclaimed may still be served, and that is safe because
// no read of a chunk proves it is still stored: an operation that names a chunk
// relies on its pins and on the probe after them (a commit present after its pin
// has what it names), never on having read it, and the reads that settle a put go
// to the store, not through here. Manifest chunks are not kept: a table's can be
// many, each read once.
type ChunkCache struct {
	mu       sync.Mutex
	maxBytes int
	bytes    int
	order    *list.List // of *cachedChunk, most recently used first
	byKey    map[string]*list.Element
}

type cachedChunk struct {
	key  string
	body []byte
}

// NewChunkCache returns a cache holding at most maxBytes of chunk bytes.
func NewChunkCache(maxBytes int) *ChunkCache {
	return &ChunkCache{maxBytes: maxBytes, order: list.New(), byKey: map[string]*list.Element{}}
}

// DefaultChunkCacheBytes is a worker's chunk cache: some 2,000 chunks of 128 pins
// or lineage entries.
const DefaultChunkCacheBytes = 32 << 20

func (c *ChunkCache) get(key string) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byKey[key]
	if !ok {
		return nil, false
	}
	c.order.MoveToFront(e)
	return e.Value.(*cachedChunk).body, true
}

// add keeps body, the bytes stored at key; the caller checked they hash to it.
func (c *ChunkCache) add(key string, body []byte) {
	if len(body) > c.maxBytes {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byKey[key]; ok {
		c.order.MoveToFront(e)
		return
	}
	c.byKey[key] = c.order.PushFront(&cachedChunk{key: key, body: body})
	c.bytes += len(body)
	for c.bytes > c.maxBytes {
		last := c.order.Back()
		old := last.Value.(*cachedChunk)
		c.order.Remove(last)
		delete(c.byKey, old.key)
		c.bytes -= len(old.body)
	}
}

// Len returns how many chunks the cache holds.
func (c *ChunkCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
