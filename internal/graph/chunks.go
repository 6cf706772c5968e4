package graph

import (
	"context"
	"fmt"

	"github.com/graftworks/graft/internal/bounded"
	"github.com/graftworks/graft/storage"
)

// chunkWriteConcurrency bounds the parallel puts of putChunks.
const chunkWriteConcurrency = 8

// putChunks writes content-addressed chunks put-if-absent, in parallel.
func putChunks(ctx context.Context, s storage.Store, chunks []Chunk) error {
	if len(chunks) == 0 {
		return nil
	}
	errs := make([]error, len(chunks))
	bounded.Each(len(chunks), chunkWriteConcurrency, func(i int) {
		c := chunks[i]
		put, err := PutIfAbsent(ctx, s, c.Key, c.Body)
		switch {
		case err != nil:
			errs[i] = fmt.Errorf("put chunk %s: %w", c.Key, err)
		case put.Outcome == PutTaken:
			errs[i] = fmt.Errorf("put chunk %s: %w: %w", c.Key, ErrCorrupt, &KeyTakenError{Key: c.Key})
		}
	})
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// PutChunks writes chunks as putChunks does; callers pin them first.
func (g *Graph) PutChunks(ctx context.Context, chunks []Chunk) error {
	return putChunks(ctx, g.S, chunks)
}
