package storagetest

import (
	"context"
	"errors"
	"testing"

	"github.com/graftworks/graft/storage"
)

var cancelCases = []conformanceCase{
	{"CancelledContext_ReadsAreUnavailableWritesAreAmbiguous", testCancelledContext},
}

// requireCancelled fails t unless err is a *storage.Error of code want that
// also matches context.Canceled.
func requireCancelled(t *testing.T, err error, want storage.Code, what string) {
	t.Helper()
	requireCode(t, err, want, what)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("%s: errors.Is(%v, context.Canceled) = false", what, err)
	}
}

// testCancelledContext pins down the classification of a request made with
// an already-cancelled context: a read changed nothing and is unavailable; a
// write is ambiguous, because in general a backend cannot promise that a
// cancelled write was not sent. Either way it is never a success.
func testCancelledContext(t *testing.T, s storage.Store) {
	const key = "cancel/object"
	mustPut(t, s, key, []byte("x"), storage.PutOptions{IfNoneMatch: true})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()

	_, err := s.Get(ctx, key)
	requireCancelled(t, err, storage.CodeUnavailable, "get")
	_, err = s.Head(ctx, key)
	requireCancelled(t, err, storage.CodeUnavailable, "head")
	_, err = s.List(ctx, storage.ListOptions{Prefix: "cancel/"})
	requireCancelled(t, err, storage.CodeUnavailable, "list")
	_, err = s.Put(ctx, "cancel/new", []byte("y"), storage.PutOptions{IfNoneMatch: true})
	requireCancelled(t, err, storage.CodeAmbiguous, "put-if-absent")
	_, err = s.Put(ctx, key, []byte("y"), storage.PutOptions{})
	requireCancelled(t, err, storage.CodeAmbiguous, "put")
	err = s.Delete(ctx, key)
	requireCancelled(t, err, storage.CodeAmbiguous, "delete")
}
