package graph

import (
	"context"
	"errors"
	"fmt"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage"
)

// ReadGraph reads the graph record: one GET.
func ReadGraph(ctx context.Context, s storage.Store, graph string) (format.Graph, error) {
	if err := format.ValidateGraphName(graph); err != nil {
		return format.Graph{}, invalid("Graph", err)
	}
	key := format.GraphKey(graph)
	obj, err := s.Get(ctx, key)
	if errors.Is(err, storage.ErrNotFound) {
		return format.Graph{}, fmt.Errorf("read graph %q: %w: %w", graph, ErrGraphNotFound, err)
	}
	if err != nil {
		return format.Graph{}, fmt.Errorf("read graph %q: %w", graph, err)
	}
	g, err := format.DecodeGraph(obj.Body)
	if err != nil {
		return format.Graph{}, fmt.Errorf("read graph %q: %s: %w", graph, key, err)
	}
	if g.Name != graph {
		return format.Graph{}, fmt.Errorf("read graph %q: %s: %w", graph, key,
			&format.MalformedError{Kind: format.KindGraph, Field: "name", Reason: "names graph " + g.Name})
	}
	return g, nil
}

// Branch is the one live incarnation of a logical branch.
type Branch struct {
	Logical string
	Native  string
	Tree    ulid.ULID
	Ref     format.BranchRef
	// ETag of the live ref, for a later compare-and-swap (retire, or the
	// head's advance).
	ETag string
	// Unreadable lists the keys of the name's other refs that a full resolve
	// could not read as refs (bytes that do not decode, or a ref naming
	// another native) and resolved past, because this ref is live
	// (ResolveBranch). Nil when every ref read was readable, and on a
	// hinted resolve that read this ref alone.
	Unreadable []string
}

// refReadConcurrency bounds the parallel GETs of ResolveBranch.
const refReadConcurrency = 8

// ResolveBranch finds the live incarnation of logical from storage alone: one
// listing of BranchRefPrefix (one LIST unless the name has over a thousand
// refs) and a GET of each ref of that logical name, live, retired or fence,
// read in parallel. Exactly one live ref → its Branch; none →
// ErrBranchNotFound; more → *MultipleLiveError. The cost grows with the
// number of incarnations the name has ever had, since retired refs stay as
// fences; a caller with a ledger resolves through ResolveBranchHinted.
//
// A ref that cannot be read as a ref of its key's native (bytes that do not
// decode, an unknown format version, a ref naming another native) does not
// make the name unresolvable when another ref of the name is live: that one is
// returned, with the unreadable keys in Branch.Unreadable. This is safe
// because one live ref per logical name is the format's invariant (the oracle
// checks it, and a create checks storage before it publishes): when a readable
// ref is live, an unreadable one is either not live or a second live ref —
// a violation the format forbids and repair handles — never the branch in
// place of the readable one. When no readable ref is live and some could not
// be read, the answer is an error that wraps the first read's (typed
// format) error, never ErrBranchNotFound: the branch may be live through the
// ref that could not be read.
func ResolveBranch(ctx context.Context, s storage.Store, graph, logical string) (Branch, error) {
	if err := checkParams(param{"Graph", format.ValidateGraphName(graph)},
		param{"Branch", format.ValidateBranchName(logical)}); err != nil {
		return Branch{}, err
	}
	refs, err := readNameRefs(ctx, s, graph, logical)
	if err != nil {
		return Branch{}, fmt.Errorf("resolve branch %q: %w", logical, err)
	}
	var live []Branch
	for _, inc := range refs.Incarnations {
		if inc.Ref.State == format.RefLive {
			live = append(live, Branch{Logical: logical, Native: inc.Native, Tree: inc.Ref.Tree, Ref: inc.Ref, ETag: inc.ETag})
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
		b.Unreadable = refs.UnreadableKeys()
		return b, nil
	}
	e := &MultipleLiveError{Graph: graph, Branch: logical}
	for _, b := range live {
		e.Natives = append(e.Natives, b.Native)
	}
	return Branch{}, fmt.Errorf("resolve branch %q: %w", logical, e)
}

// ResolveBranchHinted is ResolveBranch for a caller that has a hint: the
// native name of the incarnation it believes live (a worker's ledger names
// the name's open incarnation). It reads that one ref — one GET — and when
// storage says it is a live ref of logical, that is the branch. Any other
// answer (no hint, a hint of another name, the key empty, the ref retired or a
// fence, bytes that do not decode) falls back to ResolveBranch, so "not found"
// and "several live" are only ever storage's answers: the hint saves requests,
// it never decides. A storage error reading the hinted ref is returned.
//
// What the hint cannot show is a second live ref of the name that the hint's
// source does not know of (one written outside the ledger): ResolveBranch
// reports those as *MultipleLiveError, a hinted resolve whose hint is live
// does not. Readers without a ledger (and ListBranches, and the oracle) read
// every ref.
func ResolveBranchHinted(ctx context.Context, s storage.Store, graph, logical, hint string) (Branch, error) {
	if err := checkParams(param{"Graph", format.ValidateGraphName(graph)},
		param{"Branch", format.ValidateBranchName(logical)}); err != nil {
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

// ReadLiveRef reads the ref of one native incarnation of logical — one GET —
// and reports whether it is a live ref of logical; when it is, the Branch is
// what ResolveBranch would return for it. A native of another logical name,
// an empty key, a retired ref or fence, or bytes that do not decode are not
// live (false, nil); only a storage error other than not-found is an error.
// It says nothing about the name's other refs.
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
	ref, err := format.DecodeBranchRef(obj.Body)
	if err != nil || ref.Native != native || ref.State != format.RefLive || ref.Branch != logical {
		return Branch{}, false, nil
	}
	return Branch{Logical: logical, Native: native, Tree: ref.Tree, Ref: ref, ETag: obj.ETag}, true, nil
}

// getAll GETs keys with bounded parallelism; results are in key order.
func getAll(ctx context.Context, s storage.Store, keys []string) ([]storage.Object, []error) {
	objs := make([]storage.Object, len(keys))
	errs := make([]error, len(keys))
	parallel(len(keys), refReadConcurrency, func(i int) { objs[i], errs[i] = s.Get(ctx, keys[i]) })
	return objs, errs
}

// ObjectRef locates one data object of a table version.
type ObjectRef struct {
	ID     ulid.ULID
	Key    string
	Size   int64
	SHA256 string // lower-case hex
	// ETag is an external entry's ETag when it was imported; "" for graft's objects.
	ETag string
}

// ListTableObjects returns the entries of table as of commit commitID: the
// commit, the pins lookup, the version, then its entries chunk by chunk. A
// table the commit does not pin is ErrTableNotPinned. An external entry's Key
// is its own key and its ID is zero.
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
