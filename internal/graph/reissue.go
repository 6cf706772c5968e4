package graph

import (
	"context"
	"errors"

	"github.com/graftworks/graft/storage"
)

// reissuing wraps the store for one write that is settled by re-issuing it (a
// put-if-absent, a head swap, a retire, a fence): once a put of that write has
// answered ambiguously it may still land — it was applied and the answer lost,
// or it is still in flight and lands later — so a later put's definite refusal
// (403, say) proves nothing about the write. reissuing reports such a refusal as
// ambiguous, and the caller settles the write instead of ending it as refused
// while its earlier put lands after the operation ended and released its pins
// (soak, localfs seed 1002188: a head swap held, its re-issue refused, the write
// reported refused; the held swap landed after a sweep had reclaimed the commit
// it names). Every loop in this package that re-sends a conditional put of one
// write sends it through reissuing; a precondition failure is left as it is: the
// loops read back after one.
type reissuing struct {
	storage.Store
	// sentAmbiguous: a put of this write answered ambiguously.
	sentAmbiguous bool
}

// reissue returns s wrapped for one write's re-issues.
func reissue(s storage.Store) *reissuing { return &reissuing{Store: s} }

type ambiguousPutsKey struct{}

// WithAmbiguousPuts returns a context under which every re-issue loop of this package
// calls observe with the key of each put that answers ambiguously — a put that may still
// be delivered later, whatever its re-issues settle. A caller that may delete the key
// later (cleanup) must not let such a key be emptied while the put may still land
// (activities records it: catalog.PinsHoldForLatePut). observe may be called from
// several goroutines at once.
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
