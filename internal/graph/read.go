package graph

import (
	"context"
	"errors"
	"fmt"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/internal/bounded"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage"
)

// ReadGraph reads the graph record: one GET.
func ReadGraph(ctx context.Context, s storage.Store, graph string) (format.Graph, error) {
	if err := format.ValidateGraphName(graph); err != nil {
		return format.Graph{}, invalid("Graph", err)
	}
	return getDecoded(ctx, s, format.GraphKey(graph), fmt.Sprintf("read graph %q", graph), ErrGraphNotFound,
		format.DecodeGraph, func(g format.Graph) error {
			return misnamed(g.Name != graph, format.KindGraph, "name", "names graph "+g.Name)
		})
}

// getDecoded GETs key, decodes and checks it; errors start with what (a decoding
// one also names key); an absent key is notFound.
func getDecoded[T any](ctx context.Context, s storage.Store, key, what string, notFound error,
	decode func([]byte) (T, error), check func(T) error) (T, error) {
	var zero T
	obj, err := s.Get(ctx, key)
	if errors.Is(err, storage.ErrNotFound) {
		return zero, fmt.Errorf("%s: %w: %w", what, notFound, err)
	}
	if err != nil {
		return zero, fmt.Errorf("%s: %w", what, err)
	}
	v, err := decode(obj.Body)
	if err == nil {
		err = check(v)
	}
	if err != nil {
		return zero, fmt.Errorf("%s: %s: %w", what, key, err)
	}
	return v, nil
}

// misnamed is, when bad, the error of an object that is not the one its key names.
func misnamed(bad bool, kind format.Kind, field, reason string) error {
	if !bad {
		return nil
	}
	return &format.MalformedError{Kind: kind, Field: field, Reason: reason}
}

// Branch is the one live incarnation of a logical branch, with its ref's ETag for a compare-and-swap.
type Branch struct {
	Logical    string
	Native     string
	Tree       ulid.ULID
	Ref        format.BranchRef
	ETag       string
	Unreadable []string // keys of the name's other refs ResolveBranch could not read and resolved past
}

// ResolveBranch finds the live incarnation of logical from storage alone: one
// listing of BranchRefPrefix and a parallel GET of each ref of the name. One
// live ref → its Branch; none → ErrBranchNotFound; more → *MultipleLiveError.
// The cost grows with the refs the name ever had (ResolveBranchHinted saves it).
//
// An unreadable ref does not stop the resolve when another is live: one live
// ref per name is the format's invariant, so it is not live, or a violation
// repair handles. With no readable live ref, the error wraps the first
// unreadable ref's, never ErrBranchNotFound: the branch may be live through it.
func ResolveBranch(ctx context.Context, s storage.Store, graph, logical string) (Branch, error) {
	if err := checkBranchParams(graph, logical); err != nil {
		return Branch{}, err
	}
	refs, err := readNameRefs(ctx, s, graph, logical)
	if err != nil {
		return Branch{}, fmt.Errorf("resolve branch %q: %w", logical, err)
	}
	var live []Branch
	for _, inc := range refs.Incarnations {
		if inc.Ref.State == format.RefLive {
			live = append(live, inc.branch())
		}
	}
	switch len(live) {
	case 0:
		if err := refs.Err(); err != nil {
			return Branch{}, fmt.Errorf("resolve branch %q: no readable ref is live: %w", logical, err)
		}
		return Branch{}, fmt.Errorf("resolve branch %q: %w", logical, ErrBranchNotFound)
	case 1:
		b := live[0]
		for _, u := range refs.Unreadable {
			b.Unreadable = append(b.Unreadable, u.Key)
		}
		return b, nil
	}
	return Branch{}, fmt.Errorf("resolve branch %q: %w", logical, multipleLive(graph, logical, live))
}

// ResolveBranchHinted is ResolveBranch reading first the one ref of hint, the
// native the caller (a worker's ledger) believes live; any answer but a live ref
// of logical (or a storage error) falls back to ResolveBranch, so "not found" and
// "several live" are storage's answers. It cannot see a second live ref the hint's
// source does not know of.
func ResolveBranchHinted(ctx context.Context, s storage.Store, graph, logical, hint string) (Branch, error) {
	if err := checkBranchParams(graph, logical); err != nil {
		return Branch{}, err
	}
	if hint != "" {
		b, ok, err := ReadLiveRef(ctx, s, graph, logical, hint)
		if err != nil {
			return Branch{}, fmt.Errorf("resolve branch %q: %w", logical, err)
		}
		if ok {
			return b, nil
		}
	}
	return ResolveBranch(ctx, s, graph, logical)
}

// ReadLiveRef reads the ref of native (one GET) and reports whether it is a live
// ref of logical; anything else is (false, nil), a storage error an error.
func ReadLiveRef(ctx context.Context, s storage.Store, graph, logical, native string) (Branch, bool, error) {
	if err := format.ValidateGraphName(graph); err != nil {
		return Branch{}, false, invalid("Graph", err)
	}
	if l, _, err := format.ParseNative(native); err != nil || l != logical {
		return Branch{}, false, nil
	}
	obj, err := s.Get(ctx, format.BranchRefKey(graph, native))
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return Branch{}, false, nil
	case err != nil:
		return Branch{}, false, fmt.Errorf("read ref %s: %w", native, err)
	}
	inc, err := decodeRefAt(native, obj)
	if err != nil || inc.Ref.State != format.RefLive || inc.Ref.Branch != logical {
		return Branch{}, false, nil
	}
	return inc.branch(), true, nil
}

// getEach GETs keys with bounded parallelism and calls fn, in key order, with each
// object still there (a key deleted since its listing is skipped); a failed GET
// is "read {what}: …".
func getEach(ctx context.Context, s storage.Store, keys []string, what string, fn func(i int, obj storage.Object) error) error {
	objs := make([]storage.Object, len(keys))
	errs := make([]error, len(keys))
	bounded.Each(len(keys), parallelism, func(i int) { objs[i], errs[i] = s.Get(ctx, keys[i]) })
	for i := range keys {
		switch {
		case errors.Is(errs[i], storage.ErrNotFound):
		case errs[i] != nil:
			return fmt.Errorf("read %s: %w", what, errs[i])
		default:
			if err := fn(i, objs[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

// ObjectRef locates one data object of a table version; ETag is an external
// entry's when it was imported, "" for graft's objects.
type ObjectRef struct {
	ID     ulid.ULID
	Key    string
	Size   int64
	SHA256 string // lower-case hex
	ETag   string
}

// ListTableObjects returns the entries of table as of commit commitID (an
// external entry: its own Key, zero ID); an unpinned table is ErrTableNotPinned.
func ListTableObjects(ctx context.Context, s storage.Store, graph, commitID, table string) ([]ObjectRef, error) {
	if err := format.ValidateTableName(table); err != nil {
		return nil, invalid("Table", err)
	}
	id, err := format.ParseCommitID(commitID)
	if err != nil {
		return nil, invalid("CommitID", err)
	}
	g, err := Open(s, graph)
	if err != nil {
		return nil, err
	}
	c, err := g.Commit(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("list table objects: %w", err)
	}
	v, err := g.TableAt(ctx, c, table)
	if err != nil {
		return nil, fmt.Errorf("list table objects: %w", err)
	}
	var refs []ObjectRef
	err = g.EachEntry(ctx, v, func(e format.ManifestEntry) error {
		refs = append(refs, ObjectRef{ID: e.Object, Key: ObjectKeyOf(graph, table, e), Size: e.Size, SHA256: e.SHA256, ETag: e.ETag})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list table objects: %w", err)
	}
	return refs, nil
}

// CommitView is a commit as views show it, with its pins as a map.
type CommitView struct {
	Commit
	Pins map[string]ulid.ULID
}

// ReadCommitView reads a commit by id, with its pins.
func ReadCommitView(ctx context.Context, s storage.Store, graph, commitID string) (CommitView, error) {
	c, err := ReadCommit(ctx, s, graph, commitID)
	if err != nil {
		return CommitView{}, err
	}
	g, _ := Open(s, graph) // ReadCommit checked the name
	out := CommitView{Commit: c, Pins: map[string]ulid.ULID{}}
	if err := g.EachPin(ctx, c, func(p format.PinEntry) error { out.Pins[p.Table] = p.Version; return nil }); err != nil {
		return CommitView{}, fmt.Errorf("read pins of %s: %w", c.ID, err)
	}
	return out, nil
}

// BranchHeadView reads the head of a resolved branch, with its pins.
func BranchHeadView(ctx context.Context, s storage.Store, graph string, b Branch) (CommitView, error) {
	return ReadCommitView(ctx, s, graph, b.Ref.Head.String())
}
