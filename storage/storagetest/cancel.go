package storagetest

import (
	"context"
	"errors"
	"testing"

	"github.com/graftworks/graft/storage"
)

var cancelCases = []conformanceCase{
	{"CancelledContext_ReadsAreUnavailableWritesAreAmbiguous", func(t *testing.T, s storage.Store) {
		// A read changed nothing and is unavailable; a write is ambiguous, since a
		// backend cannot in general promise that a cancelled write was not sent.
		const key = "cancel/object"
		mustPut(t, s, key, []byte("x"), storage.PutOptions{IfNoneMatch: true})
		ctx, cancel := context.WithCancel(t.Context())
		cancel()

		requireCancelled(t, errOf(s.Get(ctx, key)), storage.CodeUnavailable, "get")
		requireCancelled(t, errOf(s.Head(ctx, key)), storage.CodeUnavailable, "head")
		requireCancelled(t, errOf(s.List(ctx, storage.ListOptions{Prefix: "cancel/"})), storage.CodeUnavailable, "list")
		requireCancelled(t, errOf(s.Put(ctx, "cancel/new", []byte("y"), storage.PutOptions{IfNoneMatch: true})), storage.CodeAmbiguous, "put-if-absent")
		requireCancelled(t, errOf(s.Put(ctx, key, []byte("y"), storage.PutOptions{})), storage.CodeAmbiguous, "put")
		requireCancelled(t, s.Delete(ctx, key), storage.CodeAmbiguous, "delete")
	}},
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
