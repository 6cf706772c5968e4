package graph

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/graftworks/graft/internal/bounded"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage"
)

// MaxPutAttempts bounds the puts of one write: the first and its re-issues.
const MaxPutAttempts = 3

// PutOutcome says how a PutIfAbsent settled.
type PutOutcome int

const (
	PutCreated     PutOutcome = iota + 1 // a put of this call succeeded
	PutAlreadyOurs                       // the key holds our bytes (a lost answer, or a re-run)
	PutTaken                             // the key holds other bytes; another writer got there first
)

func (o PutOutcome) String() string {
	if o < PutCreated || o > PutTaken {
		return "unknown"
	}
	return [...]string{"created", "already_ours", "taken"}[o-PutCreated]
}

// PutResult is how a PutIfAbsent settled.
type PutResult struct {
	Outcome  PutOutcome
	ETag     string // of the bytes now at the key, when known
	Existing []byte // the other writer's bytes when Outcome is PutTaken
}

// PutIfAbsent writes body at key put-if-absent, settling a failed condition
// or an unknown answer by reading back: ours → PutAlreadyOurs, other →
// PutTaken, absent → re-issue, at most MaxPutAttempts puts. A definite refusal
// is returned as is; still unknown at the end is an *InDoubtError.
func PutIfAbsent(ctx context.Context, s storage.Store, key string, body []byte) (PutResult, error) {
	var last error
	s = reissue(s)
	for attempt := 1; attempt <= MaxPutAttempts; attempt++ {
		res, err := s.Put(ctx, key, body, storage.PutOptions{IfNoneMatch: true})
		if err == nil {
			return PutResult{Outcome: PutCreated, ETag: res.ETag}, nil
		}
		if !unsettled(err) {
			return PutResult{}, err
		}
		last = err
		obj, err := s.Get(ctx, key)
		switch {
		case err == nil && bytes.Equal(obj.Body, body):
			return PutResult{Outcome: PutAlreadyOurs, ETag: obj.ETag}, nil
		case err == nil:
			return PutResult{Outcome: PutTaken, ETag: obj.ETag, Existing: obj.Body}, nil
		case errors.Is(err, storage.ErrNotFound):
			// Not landed yet: re-issue; a late first put fails or writes these bytes.
		default:
			last = err
		}
		if ctx.Err() != nil {
			return PutResult{}, &InDoubtError{Key: key, Body: body, Attempts: attempt, Err: errors.Join(last, ctx.Err())}
		}
	}
	return PutResult{}, &InDoubtError{Key: key, Body: body, Attempts: MaxPutAttempts, Err: last}
}

// unsettled reports a put answer only a read-back settles: a failed condition, or an unknown outcome.
func unsettled(err error) bool {
	code := storage.CodeOf(err)
	return code == storage.CodePreconditionFailed || code == storage.CodeAmbiguous ||
		code == storage.CodeUnknown
}

// parallelism bounds the requests one call sends at once.
const parallelism = 8

// PutChunks writes content-addressed chunks put-if-absent, in parallel; callers pin them first.
func (g *Graph) PutChunks(ctx context.Context, chunks []Chunk) error {
	errs := make([]error, len(chunks))
	bounded.Each(len(chunks), parallelism, func(i int) {
		if err := putNew(ctx, g.S, chunks[i].Key, chunks[i].Body, true); err != nil {
			errs[i] = fmt.Errorf("put chunk %s: %w", chunks[i].Key, err)
		} else if g.shared != nil && strings.HasPrefix(chunks[i].Key, format.ChunksPrefix(g.Name)) {
			g.shared.add(chunks[i].Key, chunks[i].Body) // a pins or lineage chunk, now stored
		}
	})
	return cmp.Or(errs...)
}

// putNew puts body at key put-if-absent; other bytes there are a
// *KeyTakenError, and ErrCorrupt where the key is a function of the bytes.
func putNew(ctx context.Context, s storage.Store, key string, body []byte, corrupt bool) error {
	put, err := PutIfAbsent(ctx, s, key, body)
	switch {
	case err != nil || put.Outcome != PutTaken:
		return err
	case corrupt:
		return fmt.Errorf("%w: %w", ErrCorrupt, &KeyTakenError{Key: key})
	}
	return &KeyTakenError{Key: key}
}

// reissuing wraps the store for one write settled by re-issuing it: once a put
// answered ambiguously it may still land, so a later put's definite refusal
// proves nothing and is reported ambiguous, for the caller to settle rather than
// report refused while the earlier put lands after its pins are released. Every
// re-issue loop puts through it; a precondition failure is left as is.
type reissuing struct {
	storage.Store
	sentAmbiguous bool // a put of this write answered ambiguously
}

func reissue(s storage.Store) *reissuing { return &reissuing{Store: s} }

type ambiguousPutsKey struct{}

// WithAmbiguousPuts returns a context under which every re-issue loop calls
// observe (possibly concurrently) with the key of each put answering ambiguously,
// which a deleter (cleanup) must keep while it may land (catalog.PinsHoldForLatePut).
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
