package activities

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"go.temporal.io/sdk/activity"

	"github.com/graftworks/graft/internal/bounded"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/storage"
)

// countingStore counts the requests a cleanup activity sends, for its report.
type countingStore struct {
	inner                      storage.Store
	list, get, head, put, dels atomic.Int64
}

func (s *countingStore) requests() StoreRequests {
	return StoreRequests{List: s.list.Load(), Get: s.get.Load(), Head: s.head.Load(), Put: s.put.Load(), Delete: s.dels.Load()}
}

func (s *countingStore) Get(ctx context.Context, key string) (storage.Object, error) {
	s.get.Add(1)
	return s.inner.Get(ctx, key)
}

func (s *countingStore) Head(ctx context.Context, key string) (storage.ObjectInfo, error) {
	s.head.Add(1)
	return s.inner.Head(ctx, key)
}

func (s *countingStore) Put(ctx context.Context, key string, body []byte, opts storage.PutOptions) (storage.PutResult, error) {
	s.put.Add(1)
	return s.inner.Put(ctx, key, body, opts)
}

func (s *countingStore) List(ctx context.Context, opts storage.ListOptions) (storage.ListPage, error) {
	s.list.Add(1)
	return s.inner.List(ctx, opts)
}

func (s *countingStore) Delete(ctx context.Context, key string) error {
	s.dels.Add(1)
	return s.inner.Delete(ctx, key)
}

func (s *countingStore) DeleteBatch(ctx context.Context, keys []string) error {
	s.dels.Add(1)
	return s.inner.DeleteBatch(ctx, keys)
}

// getConcurrency bounds the parallel GETs of a cleanup activity.
const getConcurrency = 16

// getListed lists prefix, then GETs every key listed (getEach); what names them in errors.
func getListed(ctx context.Context, s storage.Store, prefix, what string, fn func(key string, obj storage.Object, err error) error) error {
	var keys []string
	err := storage.ListAll(ctx, s, prefix, func(o storage.ObjectInfo) error {
		keys = append(keys, o.Key)
		return nil
	})
	if err != nil {
		return fmt.Errorf("list %s: %w", what, err)
	}
	if err := getEach(ctx, s, keys, fn); err != nil {
		return fmt.Errorf("read %s: %w", what, err)
	}
	return nil
}

// getEach GETs keys with bounded parallelism and calls fn for each, in no particular
// order and never concurrently. A missing key is passed to fn as storage.ErrNotFound;
// the first other error ends the walk and is returned.
func getEach(ctx context.Context, s storage.Store, keys []string, fn func(key string, obj storage.Object, err error) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	var first error
	n := 0
	bounded.Each(len(keys), getConcurrency, func(i int) {
		if ctx.Err() != nil {
			return
		}
		obj, err := s.Get(ctx, keys[i])
		mu.Lock()
		defer mu.Unlock()
		if first != nil {
			return
		}
		if err == nil || errors.Is(err, storage.ErrNotFound) {
			err = fn(keys[i], obj, err)
		}
		if err != nil {
			first = err
			cancel()
		} else if n++; n%256 == 0 {
			heartbeat(ctx)
		}
	})
	if first == nil && ctx.Err() != nil {
		first = ctx.Err()
	}
	return first
}

// heartbeat records a heartbeat when ctx is an activity's (the SDK throttles them).
func heartbeat(ctx context.Context, details ...any) {
	if activity.IsActivity(ctx) {
		activity.RecordHeartbeat(ctx, details...)
	}
}

// ticker returns a func that heartbeats (heartbeat) every 1000th time it is called.
func ticker(ctx context.Context) func() {
	n := 0
	return func() {
		if n++; n%1000 == 0 {
			heartbeat(ctx)
		}
	}
}

// listPins reads the graph's pins, for a dry run's own check (pinSet).
func listPins(ctx context.Context, cat *catalog.Catalog, graphName, runID string) (pinSet, error) {
	pins, err := cat.PinsList(ctx, catalog.PinsListParams{Graph: graphName, RunID: runID})
	if err != nil {
		return nil, fmt.Errorf("list pins: %w", err)
	}
	return newPinSet(pins), nil
}
