// Package storagetest is the conformance suite every storage.Store backend
// runs (Run, RunMultipart), each case on a fresh, empty store. It checks that
// every error is a *storage.Error whose Code and sentinel agree; that exactly
// one of racing conditional writers wins, the others getting
// ErrPreconditionFailed; that listings are in byte order, respect a prefix's
// '/' boundary and page correctly; and that a request with a cancelled
// context is ErrUnavailable (reads) or ErrAmbiguous (writes), matching
// context.Canceled.
package storagetest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/graftworks/graft/internal/bounded"
	"github.com/graftworks/graft/storage"
)

// conformanceCase is one behaviour of the contract, run on a fresh store.
type conformanceCase struct {
	name string
	run  func(t *testing.T, s storage.Store)
}

// Run runs the conformance suite as subtests of t. newStore returns a fresh,
// empty store (its own bucket/dir/prefix) and registers its own cleanup on t.
func Run(t *testing.T, newStore func(t *testing.T) storage.Store) {
	t.Helper()
	for _, c := range slices.Concat(readWriteCases, conditionalCases, keyCases, listCases, deleteCases, cancelCases) {
		t.Run(c.name, func(t *testing.T) { c.run(t, newStore(t)) })
	}
}

// PutMany writes every object of objects with put-if-absent, using at most
// workers concurrent puts, and returns the ETag of each put that succeeded
// and the errors of the others, joined.
func PutMany(ctx context.Context, s storage.Store, objects map[string][]byte, workers int) (map[string]string, error) {
	keys := slices.Collect(maps.Keys(objects))
	results := make([]storage.PutResult, len(keys))
	err := bounded.EachErr(len(keys), max(workers, 1), func(i int) (err error) {
		results[i], err = s.Put(ctx, keys[i], objects[keys[i]], storage.PutOptions{IfNoneMatch: true})
		if err != nil {
			return fmt.Errorf("put %q: %w", keys[i], err)
		}
		return nil
	})
	etags := make(map[string]string, len(keys))
	for i, res := range results {
		if res.ETag != "" {
			etags[keys[i]] = res.ETag
		}
	}
	return etags, err
}

// sentinelOf maps a Code to the sentinel errors.Is must match.
var sentinelOf = map[storage.Code]error{
	storage.CodeNotFound:           storage.ErrNotFound,
	storage.CodePreconditionFailed: storage.ErrPreconditionFailed,
	storage.CodeAmbiguous:          storage.ErrAmbiguous,
	storage.CodeRefused:            storage.ErrRefused,
	storage.CodeUnavailable:        storage.ErrUnavailable,
	storage.CodeInvalidKey:         storage.ErrInvalidKey,
	storage.CodeInvalidArgument:    storage.ErrInvalidArgument,
}

// checkCode reports why err is not a *storage.Error of code want, or nil.
func checkCode(err error, want storage.Code) error {
	if err == nil {
		return fmt.Errorf("err = nil, want %v", want)
	}
	var se *storage.Error
	if !errors.As(err, &se) {
		return fmt.Errorf("err = %v (%T), want a *storage.Error with code %v", err, err, want)
	}
	if got := storage.CodeOf(err); got != want {
		return fmt.Errorf("CodeOf(%v) = %v, want %v", err, got, want)
	}
	if !errors.Is(err, sentinelOf[want]) {
		return fmt.Errorf("errors.Is(%v, %v) = false", err, sentinelOf[want])
	}
	return nil
}

// requireCode fails t unless err is a *storage.Error of code want.
func requireCode(t *testing.T, err error, want storage.Code, what string) {
	t.Helper()
	if problem := checkCode(err, want); problem != nil {
		t.Fatalf("%s: %v", what, problem)
	}
}

func mustPut(t *testing.T, s storage.Store, key string, body []byte, opts storage.PutOptions) storage.PutResult {
	t.Helper()
	res, err := s.Put(t.Context(), key, body, opts)
	if err != nil {
		t.Fatalf("put %q: %v", key, err)
	}
	if res.ETag == "" {
		t.Fatalf("put %q: empty ETag", key)
	}
	return res
}

func mustGet(t *testing.T, s storage.Store, key string) storage.Object {
	t.Helper()
	obj, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("get %q: %v", key, err)
	}
	return obj
}

// requireObject fails t unless key holds body and, when given, ETag etag.
func requireObject(t *testing.T, s storage.Store, key, body string, etag ...string) {
	t.Helper()
	obj := mustGet(t, s, key)
	if string(obj.Body) != body || len(etag) > 0 && obj.ETag != etag[0] {
		t.Fatalf("get %q = {Body:%q ETag:%q}, want {Body:%q ETag:%q}", key, obj.Body, obj.ETag, body, etag)
	}
}

// errOf is the error of a call's two results.
func errOf[T any](_ T, err error) error { return err }

// Keys returns every key under prefix through storage.ListAll, failing t on
// error.
func Keys(t testing.TB, s storage.Store, prefix string) []string {
	t.Helper()
	var keys []string
	err := storage.ListAll(t.Context(), s, prefix, func(o storage.ObjectInfo) error {
		keys = append(keys, o.Key)
		return nil
	})
	if err != nil {
		t.Fatalf("list all %q: %v", prefix, err)
	}
	return keys
}
