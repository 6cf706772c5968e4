package graph

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/graftworks/graft/internal/bounded"
	"github.com/graftworks/graft/storage"
)

// verifyConcurrency bounds the parallel HEADs of VerifyObjects.
const verifyConcurrency = 8

// ObjectProblem is an object a table version names that is not what its entry says.
type ObjectProblem struct {
	// Index is the object's position in the refs given to VerifyObjects.
	Index int
	Ref   ObjectRef
	// Missing: nothing at the key; otherwise Reason says how the object differs.
	Missing bool
	Reason  string
}

// VerifyObjects HEADs every object refs name, in parallel, and returns the
// missing or changed ones in refs' order: the one read that checks objects.
// progress, when set, gets the count checked so far, from several goroutines.
func VerifyObjects(ctx context.Context, s storage.Store, refs []ObjectRef, progress func(done int64)) ([]ObjectProblem, error) {
	problems := make([]*ObjectProblem, len(refs))
	errs := make([]error, len(refs))
	var done atomic.Int64
	bounded.Each(len(refs), verifyConcurrency, func(i int) {
		ref := refs[i]
		if ctx.Err() != nil {
			return
		}
		info, err := s.Head(ctx, ref.Key)
		switch {
		case errors.Is(err, storage.ErrNotFound):
			problems[i] = &ObjectProblem{Index: i, Ref: ref, Missing: true, Reason: "missing"}
		case err != nil:
			errs[i] = fmt.Errorf("verify %s: %w", ref.Key, err)
		case info.Size != ref.Size:
			problems[i] = &ObjectProblem{Index: i, Ref: ref, Reason: fmt.Sprintf("%d bytes, the entry says %d", info.Size, ref.Size)}
		case ref.ETag != "" && info.ETag != ref.ETag:
			problems[i] = &ObjectProblem{Index: i, Ref: ref, Reason: fmt.Sprintf("ETag %s, imported as %s", info.ETag, ref.ETag)}
		}
		if n := done.Add(1); progress != nil {
			progress(n)
		}
	})
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var out []ObjectProblem
	for _, p := range problems {
		if p != nil {
			out = append(out, *p)
		}
	}
	return out, nil
}
