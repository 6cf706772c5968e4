package graph

import (
	"context"
	"errors"

	"github.com/graftworks/graft/storage"
)

// reissuing wraps the store for one write settled by re-issuing it: once a put
// of the write answered ambiguously it may still land, so a later put's
// definite refusal proves nothing, and reissuing reports it as ambiguous. The
// caller then settles the write instead of reporting it refused while the
// earlier put lands after its pins are released. Every re-issue loop here puts
// through it; a precondition failure is left as is (the loops read back).
type reissuing struct {
	storage.Store
	// sentAmbiguous: a put of this write answered ambiguously.
	sentAmbiguous bool
}

// reissue returns s wrapped for one write's re-issues.
func reissue(s storage.Store) *reissuing { return &reissuing{Store: s} }

type ambiguousPutsKey struct{}

// WithAmbiguousPuts returns a context under which every re-issue loop calls
// observe (possibly concurrently) with the key of each put answering
// ambiguously: a put that may still land later. A caller that may delete the
// key (cleanup) must keep it while the put may land (catalog.PinsHoldForLatePut).
func WithAmbiguousPuts(ctx context.Context, observe func(key string)) context.Context {
	return context.WithValue(ctx, ambiguousPutsKey{}, observe)
}

// Put sends the put; after an earlier ambiguous answer, a refusal is ambiguous too.
func (r *reissuing) Put(ctx context.Context, key string, body []byte, opts storage.PutOptions) (storage.PutResult, error) {
	res, err := r.Store.Put(ctx, key, body, opts)
	switch code := storage.CodeOf(err); {
	case err == nil, code == storage.CodePreconditionFailed:
	case code == storage.CodeAmbiguous || code == storage.CodeUnknown:
		r.sentAmbiguous = true
		if observe, ok := ctx.Value(ambiguousPutsKey{}).(func(string)); ok {
			observe(key)
		}
	case r.sentAmbiguous:
		// Not wrapped: errors.Is must not find the refusal under the ambiguity.
		return res, &storage.Error{Op: "put", Key: key, Code: storage.CodeAmbiguous,
			Err: errors.New("an earlier put of this write answered ambiguously and may still land; this one was refused: " + err.Error())}
	}
	return res, err
}
