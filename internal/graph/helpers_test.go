package graph

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/localfs"
)

// Fixed identifiers and times: every test's bytes are reproducible.
var (
	treeMain    = ulid.MustParse("01J0000000000000000000MA1N")
	treeMain2   = ulid.MustParse("01J0000000000000000000MA12")
	treeFeature = ulid.MustParse("01J0000000000000000000FEAT")
	versionA    = ulid.MustParse("01J000000000000000000VERA1")
	versionB    = ulid.MustParse("01J000000000000000000VERB2")
	objectA     = ulid.MustParse("01J0000000000000000000BJA1")
	objectB     = ulid.MustParse("01J0000000000000000000BJB2")
	objectC     = ulid.MustParse("01J0000000000000000000BJC3")
	t0          = time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)
)

func newStore(t testing.TB) *localfs.Store {
	t.Helper()
	s, err := localfs.Open(t.TempDir())
	if err != nil {
		t.Fatalf("open localfs: %v", err)
	}
	return s
}

func initParams() InitParams {
	return InitParams{Graph: "sales", MainTree: treeMain, Op: "op-init-1", Time: t0, Author: "ana"}
}

func mustInit(t *testing.T, s storage.Store) InitResult {
	t.Helper()
	res, err := Init(context.Background(), s, initParams())
	if err != nil {
		t.Fatalf("init graph: %v", err)
	}
	return res
}

// dump returns every object of the store.
func dump(t *testing.T, s storage.Store) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	err := storage.ListAll(ctx, s, "", func(o storage.ObjectInfo) error {
		obj, err := s.Get(ctx, o.Key)
		if err != nil {
			return err
		}
		out[o.Key] = string(obj.Body)
		return nil
	})
	if err != nil {
		t.Fatalf("dump store: %v", err)
	}
	return out
}

// countingStore counts the requests that reach the store, per method.
type countingStore struct {
	storage.Store
	gets, heads, puts, lists, deletes atomic.Int64
}

func (c *countingStore) Get(ctx context.Context, key string) (storage.Object, error) {
	c.gets.Add(1)
	return c.Store.Get(ctx, key)
}

func (c *countingStore) Head(ctx context.Context, key string) (storage.ObjectInfo, error) {
	c.heads.Add(1)
	return c.Store.Head(ctx, key)
}

func (c *countingStore) Put(ctx context.Context, key string, body []byte, opts storage.PutOptions) (storage.PutResult, error) {
	c.puts.Add(1)
	return c.Store.Put(ctx, key, body, opts)
}

func (c *countingStore) List(ctx context.Context, opts storage.ListOptions) (storage.ListPage, error) {
	c.lists.Add(1)
	return c.Store.List(ctx, opts)
}

func (c *countingStore) Delete(ctx context.Context, key string) error {
	c.deletes.Add(1)
	return c.Store.Delete(ctx, key)
}

func (c *countingStore) DeleteBatch(ctx context.Context, keys []string) error {
	c.deletes.Add(1)
	return c.Store.DeleteBatch(ctx, keys)
}

func (c *countingStore) total() int64 {
	return c.gets.Load() + c.heads.Load() + c.puts.Load() + c.lists.Load() + c.deletes.Load()
}

// faultMode is what a faultyStore does to a matching put.
type faultMode int

const (
	// applyThenAmbiguous writes the put, then answers ErrAmbiguous: the
	// acknowledgement is lost.
	applyThenAmbiguous faultMode = iota + 1
	// ambiguousUnapplied answers ErrAmbiguous without writing: the put was lost.
	ambiguousUnapplied
	// refuse answers ErrRefused without writing.
	refuse
)

// faultRule applies mode to the next `times` puts whose key matches.
type faultRule struct {
	match func(key string) bool
	mode  faultMode
	times int
}

// faultyStore injects put faults by rule; other calls pass through. It also
// can hide a key from the next `hideGets` Gets (a stale read).
type faultyStore struct {
	storage.Store
	mu       sync.Mutex
	rules    []*faultRule
	hideKey  string
	hideGets int
}

func withFaults(s storage.Store, rules ...*faultRule) *faultyStore {
	return &faultyStore{Store: s, rules: rules}
}

func keyHasSuffix(suffix string) func(string) bool {
	return func(k string) bool { return strings.HasSuffix(k, suffix) }
}

func keyContains(sub string) func(string) bool {
	return func(k string) bool { return strings.Contains(k, sub) }
}

func (f *faultyStore) Put(ctx context.Context, key string, body []byte, opts storage.PutOptions) (storage.PutResult, error) {
	f.mu.Lock()
	var mode faultMode
	for _, r := range f.rules {
		if r.times > 0 && r.match(key) {
			r.times--
			mode = r.mode
			break
		}
	}
	f.mu.Unlock()
	switch mode {
	case applyThenAmbiguous:
		if _, err := f.Store.Put(ctx, key, body, opts); err != nil {
			return storage.PutResult{}, err
		}
		return storage.PutResult{}, &storage.Error{Op: "put", Key: key, Code: storage.CodeAmbiguous, Err: errors.New("injected: applied, answer lost")}
	case ambiguousUnapplied:
		return storage.PutResult{}, &storage.Error{Op: "put", Key: key, Code: storage.CodeAmbiguous, Err: errors.New("injected: lost before applying")}
	case refuse:
		return storage.PutResult{}, &storage.Error{Op: "put", Key: key, Code: storage.CodeRefused, Status: 403, Err: errors.New("injected: refused")}
	}
	return f.Store.Put(ctx, key, body, opts)
}

func (f *faultyStore) Get(ctx context.Context, key string) (storage.Object, error) {
	f.mu.Lock()
	hide := key == f.hideKey && f.hideGets > 0
	if hide {
		f.hideGets--
	}
	f.mu.Unlock()
	if hide {
		return storage.Object{}, &storage.Error{Op: "get", Key: key, Code: storage.CodeNotFound}
	}
	return f.Store.Get(ctx, key)
}

func storageOpts() storage.PutOptions { return storage.PutOptions{} }

// buildMap returns the map of entries (sorted, unique keys) and its chunks.
func buildMap[E any](ctx context.Context, r *mapReader[E], entries []E) (format.MapRef[E], []Chunk, error) {
	b := newBuilder(r.spec, r.key)
	for _, e := range entries {
		if err := b.addEntry(e); err != nil {
			return format.MapRef[E]{}, nil, err
		}
	}
	return mapTree[E]{r: r}.result(ctx, b)
}
