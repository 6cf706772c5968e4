package graph

import (
	"bytes"
	"context"
	"errors"

	"github.com/graftworks/graft/storage"
)

// MaxPutAttempts bounds the puts of one write: the first and its re-issues.
const MaxPutAttempts = 3

// PutOutcome says how a PutIfAbsent settled.
type PutOutcome int

const (
	// PutCreated: a put of this call succeeded.
	PutCreated PutOutcome = iota + 1
	// PutAlreadyOurs: the key holds our bytes (a lost answer, or a re-run).
	PutAlreadyOurs
	// PutTaken: the key holds other bytes; another writer got there first.
	PutTaken
)

func (o PutOutcome) String() string {
	if o < PutCreated || o > PutTaken {
		return "unknown"
	}
	return [...]string{"created", "already_ours", "taken"}[o-PutCreated]
}

// PutResult is how a PutIfAbsent settled.
type PutResult struct {
	Outcome PutOutcome
	// ETag of the bytes now at the key, when known.
	ETag string
	// Existing holds the other writer's bytes when Outcome is PutTaken.
	Existing []byte
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

// unsettled reports a put answer that only a read-back settles: a failed
// condition, or an unknown outcome.
func unsettled(err error) bool {
	switch storage.CodeOf(err) {
	case storage.CodePreconditionFailed, storage.CodeAmbiguous, storage.CodeUnknown:
		return true
	}
	return false
}
