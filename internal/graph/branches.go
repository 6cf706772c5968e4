package graph

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage"
)

// ErrRefChanged reports a ref that changed under a compare-and-swap.
var ErrRefChanged = errors.New("graph: ref changed")

// RefChangedError reports a ref without the caller's ETag; it matches ErrRefChanged.
type RefChangedError struct {
	Key   string
	ETag  string          // the ETag the caller expected
	Found format.RefState // the ref's state now ("" when the key is empty)
	Op    string          // the operation that wrote it (RetiredOp for a retired ref)
}

func (e *RefChangedError) Error() string {
	if e.Found == "" {
		return fmt.Sprintf("graph: ref %s is gone (expected ETag %s)", e.Key, e.ETag)
	}
	return fmt.Sprintf("graph: ref %s changed: it is now %s by operation %s (expected ETag %s)", e.Key, e.Found, e.Op, e.ETag)
}

// Is matches ErrRefChanged.
func (e *RefChangedError) Is(target error) bool { return target == ErrRefChanged }

// RepairCommand is the CLI step that leaves e's branch one live incarnation.
func (e *MultipleLiveError) RepairCommand() string {
	return fmt.Sprintf("graft branch repair %s %s --keep <native>", e.Graph, e.Branch)
}

// RepairHint says how to repair e, naming every native that can be kept.
func (e *MultipleLiveError) RepairHint() string {
	return fmt.Sprintf("keep one incarnation and retire the others with `%s` (<native> one of: %s)",
		e.RepairCommand(), strings.Join(e.Natives, ", "))
}

// ListBranches returns the live incarnation of every logical branch of graph, by
// name: one listing and a parallel GET per ref. Each name with several live refs
// is a *MultipleLiveError naming the repair step (joined, in name order).
func ListBranches(ctx context.Context, s storage.Store, graph string) ([]Branch, error) {
	if err := format.ValidateGraphName(graph); err != nil {
		return nil, invalid("Graph", err)
	}
	keys, natives, err := listKeys(ctx, s, format.BranchRefsPrefix(graph), func(key string) (string, error) {
		return format.ParseBranchRefKey(graph, key)
	})
	if err != nil {
		return nil, fmt.Errorf("list branches of graph %q: list refs: %w", graph, err)
	}
	refs, err := readRefs(ctx, s, keys, natives, true)
	if err != nil {
		return nil, fmt.Errorf("list branches of graph %q: %w", graph, err)
	}
	live := map[string][]Branch{}
	for _, r := range refs.Incarnations {
		if r.Ref.State == format.RefLive {
			live[r.Ref.Branch] = append(live[r.Ref.Branch], r.branch())
		}
	}
	out := make([]Branch, 0, len(live))
	var broken []error
	for _, name := range slices.Sorted(maps.Keys(live)) {
		bs := live[name]
		if len(bs) == 1 {
			out = append(out, bs[0])
			continue
		}
		e := multipleLive(graph, name, bs)
		broken = append(broken, fmt.Errorf("list branches of graph %q: %w; %s", graph, e, e.RepairHint()))
	}
	if len(broken) > 0 {
		return nil, errors.Join(broken...)
	}
	return out, nil
}

// Incarnation is one ref of a logical branch, any state, with its ETag for a compare-and-swap.
type Incarnation struct {
	Native string
	Ref    format.BranchRef
	ETag   string
}

func (inc Incarnation) branch() Branch {
	r := inc.Ref
	return Branch{Logical: r.Branch, Native: inc.Native, Tree: r.Tree, Ref: r, ETag: inc.ETag}
}

// ReadBranchIncarnations reads every ref of one logical name, any state, in key
// order, allowing several live ones (for a repair); an unreadable ref is an error.
func ReadBranchIncarnations(ctx context.Context, s storage.Store, graph, logical string) ([]Incarnation, error) {
	refs, err := ReadBranchRefs(ctx, s, graph, logical)
	if err != nil {
		return nil, err
	}
	if err := refs.Err(); err != nil {
		return nil, fmt.Errorf("read incarnations of %q: %w", logical, err)
	}
	return refs.Incarnations, nil
}

// NameRefs is every ref of one logical name a read found, in key order, and the unreadable ones.
type NameRefs struct {
	Incarnations []Incarnation
	Unreadable   []UnreadableRef
}

// UnreadableRef is a ref key whose bytes are not a ref of its native, and why.
type UnreadableRef struct {
	Key    string
	Native string
	Err    error
}

// Err names the first unreadable ref and counts the others; nil if none.
func (r NameRefs) Err() error {
	if len(r.Unreadable) == 0 {
		return nil
	}
	u := r.Unreadable[0]
	if n := len(r.Unreadable) - 1; n > 0 {
		return fmt.Errorf("%s: %w (and %d more unreadable refs)", u.Key, u.Err, n)
	}
	return fmt.Errorf("%s: %w", u.Key, u.Err)
}

// ReadBranchRefs is ReadBranchIncarnations reporting unreadable refs in
// NameRefs.Unreadable, for the caller to judge.
func ReadBranchRefs(ctx context.Context, s storage.Store, graph, logical string) (NameRefs, error) {
	if err := checkBranchParams(graph, logical); err != nil {
		return NameRefs{}, err
	}
	refs, err := readNameRefs(ctx, s, graph, logical)
	if err != nil {
		return NameRefs{}, fmt.Errorf("read incarnations of %q: %w", logical, err)
	}
	return refs, nil
}

// readNameRefs lists the refs of one logical name and GETs each in parallel.
func readNameRefs(ctx context.Context, s storage.Store, graph, logical string) (NameRefs, error) {
	keys, natives, err := listNameRefs(ctx, s, graph, logical)
	if err != nil {
		return NameRefs{}, fmt.Errorf("list refs: %w", err)
	}
	return readRefs(ctx, s, keys, natives, false)
}

// decodeRefAt strictly decodes the ref at the key of native.
func decodeRefAt(native string, obj storage.Object) (Incarnation, error) {
	ref, err := format.DecodeBranchRef(obj.Body)
	if err != nil {
		return Incarnation{}, err
	}
	why := "is " + ref.Native + ", not the native name its key names"
	inc := Incarnation{Native: native, Ref: ref, ETag: obj.ETag}
	return inc, misnamed(ref.Native != native, format.KindBranchRef, "native", why)
}

// readRefs GETs and decodes the refs at keys (of natives), skipping keys since
// deleted (cleanup may delete a fence); an unreadable ref is an error if strict.
func readRefs(ctx context.Context, s storage.Store, keys, natives []string, strict bool) (NameRefs, error) {
	out := NameRefs{Incarnations: make([]Incarnation, 0, len(keys))}
	err := getEach(ctx, s, keys, "ref", func(i int, obj storage.Object) error {
		inc, err := decodeRefAt(natives[i], obj)
		switch {
		case err != nil && strict:
			return fmt.Errorf("%s: %w", keys[i], err)
		case err != nil:
			out.Unreadable = append(out.Unreadable, UnreadableRef{Key: keys[i], Native: natives[i], Err: err})
		default:
			out.Incarnations = append(out.Incarnations, inc)
		}
		return nil
	})
	if err != nil {
		return NameRefs{}, err
	}
	return out, nil
}

// multipleLive is the error of a name with the live branches bs.
func multipleLive(graph, name string, bs []Branch) *MultipleLiveError {
	e := &MultipleLiveError{Graph: graph, Branch: name}
	for _, b := range bs {
		e.Natives = append(e.Natives, b.Native)
	}
	return e
}

// RetireResult is how a RetireRef settled (PutCreated, or PutAlreadyOurs), the
// retired ref now at the key, and its ETag when known.
type RetireResult struct {
	Outcome PutOutcome
	Ref     format.BranchRef
	ETag    string
}

// RetireRef swaps the live ref of native, which must still have ETag etag, for a
// retired ref naming retiredOp that keeps every other field, so a re-issue is
// byte-identical and a late put of the live ref cannot pass. Settled by retire.
func RetireRef(ctx context.Context, s storage.Store, graph, native, etag, retiredOp string) (RetireResult, error) {
	if err := checkParams(param{"Graph", format.ValidateGraphName(graph)}, param{"Native", format.ValidateNative(native)},
		param{"ETag", nonEmpty(etag)}, param{"RetiredOp", format.ValidateOp(retiredOp)}); err != nil {
		return RetireResult{}, fmt.Errorf("retire ref: %w", err)
	}
	key := format.BranchRefKey(graph, native)
	var res RetireResult
	outcome, now, err := retire(ctx, s, "ref", key, etag, &RefChangedError{Key: key, ETag: etag}, func(obj storage.Object) ([]byte, bool, error) {
		inc, err := decodeRefAt(native, obj)
		if err != nil {
			return nil, false, fmt.Errorf("%s: %w", key, err)
		}
		res.Ref = inc.Ref
		if obj.ETag != etag {
			if res.Ref.State == format.RefRetired && res.Ref.RetiredOp == retiredOp {
				// Our swap landed (its answer lost), or an earlier call retired it.
				return nil, true, nil
			}
			found := &RefChangedError{Key: key, ETag: etag, Found: res.Ref.State, Op: res.Ref.Op}
			if res.Ref.State == format.RefRetired {
				found.Op = res.Ref.RetiredOp
			}
			return nil, false, found
		}
		if res.Ref.State != format.RefLive {
			return nil, false, invalidf("ETag", "names a %s ref, not a live one", res.Ref.State)
		}
		res.Ref.State, res.Ref.RetiredOp = format.RefRetired, retiredOp
		body, _ := format.EncodeBranchRef(res.Ref) // a valid live ref with a checked op encodes
		return body, false, nil
	})
	if err != nil {
		return RetireResult{}, fmt.Errorf("retire ref %s: %w", native, err)
	}
	res.Outcome, res.ETag = outcome, now
	return res, nil
}

// retire is the compare-and-swap loop of RetireRef and RetireTag at key, whose
// object must still have ETag etag, settling answers by reading back: our retired
// bytes → done; still etag → re-issue (at most MaxPutAttempts puts); else check's
// error; still unknown at the end, an *InDoubtError. gone is an empty key's error;
// check judges the object read. It returns the outcome and the ETag now.
func retire(ctx context.Context, s storage.Store, what, key, etag string, gone error,
	check func(obj storage.Object) (retired []byte, done bool, err error)) (PutOutcome, string, error) {
	var (
		last error
		sent []byte
	)
	s = reissue(s)
	for puts := 0; ; puts++ {
		obj, err := s.Get(ctx, key)
		if errors.Is(err, storage.ErrNotFound) {
			return 0, "", gone
		}
		if err != nil {
			return 0, "", fmt.Errorf("read %s: %w", what, err)
		}
		retired, done, err := check(obj)
		if err != nil || done {
			return PutAlreadyOurs, obj.ETag, err
		}
		if puts == MaxPutAttempts || (puts > 0 && ctx.Err() != nil) {
			// Still live after every put we may send: one may still land.
			return 0, "", &InDoubtError{Key: key, Body: sent, Attempts: puts, Err: errors.Join(last, ctx.Err())}
		}
		sent = retired
		put, err := s.Put(ctx, key, sent, storage.PutOptions{IfMatch: etag})
		if err == nil {
			return PutCreated, put.ETag, nil
		}
		if !unsettled(err) {
			return 0, "", fmt.Errorf("put retired %s: %w", what, err)
		}
		last = err // read back: our retired bytes, still live, or another change
	}
}

// listKeys lists the keys under prefix that parse accepts, with their names.
func listKeys(ctx context.Context, s storage.Store, prefix string, parse func(key string) (string, error)) (keys, names []string, err error) {
	err = storage.ListAll(ctx, s, prefix, func(o storage.ObjectInfo) error {
		name, err := parse(o.Key)
		if err != nil {
			return nil
		}
		keys = append(keys, o.Key)
		names = append(names, name)
		return nil
	})
	return keys, names, err
}

// listNameRefs lists the refs of exactly one logical name (not "a.b" for "a").
func listNameRefs(ctx context.Context, s storage.Store, graph, logical string) ([]string, []string, error) {
	return listKeys(ctx, s, format.BranchRefPrefix(graph, logical), func(key string) (string, error) {
		native, err := format.ParseBranchRefKey(graph, key)
		if err != nil {
			return "", err
		}
		if l, _, err := format.ParseNative(native); err != nil || l != logical {
			return "", errors.New("a ref of another logical name")
		}
		return native, nil
	})
}
