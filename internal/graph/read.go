package graph

import (
	"context"
	"errors"
	"fmt"
	"sync"

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

// ReadGraphAny reads the graph record of either format: one GET. The format
// version says whether the graph has been created in, or upgraded to,
// format 2 (whose writers the format-2 API is).
func ReadGraphAny(ctx context.Context, s storage.Store, graph string) (format.Graph, int, error) {
	if err := format.ValidateGraphName(graph); err != nil {
		return format.Graph{}, 0, invalid("Graph", err)
	}
	key := format.GraphKey(graph)
	obj, err := s.Get(ctx, key)
	if errors.Is(err, storage.ErrNotFound) {
		return format.Graph{}, 0, fmt.Errorf("read graph %q: %w: %w", graph, ErrGraphNotFound, err)
	}
	if err != nil {
		return format.Graph{}, 0, fmt.Errorf("read graph %q: %w", graph, err)
	}
	g, version, err := format.DecodeGraphAny(obj.Body)
	if err != nil {
		return format.Graph{}, 0, fmt.Errorf("read graph %q: %s: %w", graph, key, err)
	}
	if g.Name != graph {
		return format.Graph{}, 0, fmt.Errorf("read graph %q: %s: %w", graph, key,
			&format.MalformedError{Kind: format.KindGraph, Field: "name", Reason: "names graph " + g.Name})
	}
	return g, version, nil
}

// ReadCommit reads the commit with the given id ("{tree}-{seq}"): one GET.
func ReadCommit(ctx context.Context, s storage.Store, graph, commitID string) (format.Commit, error) {
	if err := format.ValidateGraphName(graph); err != nil {
		return format.Commit{}, invalid("Graph", err)
	}
	id, err := format.ParseCommitID(commitID)
	if err != nil {
		return format.Commit{}, invalid("CommitID", err)
	}
	return readCommit(ctx, s, graph, id)
}

func readCommit(ctx context.Context, s storage.Store, graph string, id format.CommitID) (format.Commit, error) {
	key := format.CommitIDKey(graph, id)
	obj, err := s.Get(ctx, key)
	if errors.Is(err, storage.ErrNotFound) {
		return format.Commit{}, fmt.Errorf("read commit %s: %w: %w", id, ErrCommitNotFound, err)
	}
	if err != nil {
		return format.Commit{}, fmt.Errorf("read commit %s: %w", id, err)
	}
	return decodeCommitAt(key, id, obj.Body)
}

// decodeCommitAt decodes the commit at key and checks it is the one the key names.
func decodeCommitAt(key string, id format.CommitID, body []byte) (format.Commit, error) {
	c, err := format.DecodeCommit(body)
	if err != nil {
		return format.Commit{}, fmt.Errorf("read commit %s: %s: %w", id, key, err)
	}
	if c.ID != id {
		return format.Commit{}, fmt.Errorf("read commit %s: %s: %w", id, key,
			&format.MalformedError{Kind: format.KindCommit, Field: "id", Reason: "is " + c.ID.String() + ", not the commit its key names"})
	}
	return c, nil
}

// ReadHead reads the newest commit of tree: one LIST with Limit 1 (commit
// keys of newer commits sort first) and one GET, whatever the tree's length.
// A tree without commits is ErrCommitNotFound.
func ReadHead(ctx context.Context, s storage.Store, graph string, tree ulid.ULID) (format.Commit, error) {
	if err := format.ValidateGraphName(graph); err != nil {
		return format.Commit{}, invalid("Graph", err)
	}
	if tree.IsZero() {
		return format.Commit{}, invalidf("Tree", "zero ULID")
	}
	prefix := format.TreeCommitsPrefix(graph, tree)
	page, err := s.List(ctx, storage.ListOptions{Prefix: prefix, Limit: 1})
	if err != nil {
		return format.Commit{}, fmt.Errorf("read head of tree %s: %w", tree, err)
	}
	if len(page.Objects) == 0 {
		return format.Commit{}, fmt.Errorf("read head of tree %s: no commits: %w", tree, ErrCommitNotFound)
	}
	key := page.Objects[0].Key
	id, err := format.ParseCommitKey(graph, key)
	if err != nil {
		return format.Commit{}, fmt.Errorf("read head of tree %s: %w", tree, err)
	}
	obj, err := s.Get(ctx, key)
	if errors.Is(err, storage.ErrNotFound) {
		return format.Commit{}, fmt.Errorf("read head of tree %s: listed %s vanished: %w: %w", tree, key, ErrCommitNotFound, err)
	}
	if err != nil {
		return format.Commit{}, fmt.Errorf("read head of tree %s: %w", tree, err)
	}
	return decodeCommitAt(key, id, obj.Body)
}

// Branch is the one live incarnation of a logical branch.
type Branch struct {
	Logical string
	Native  string
	Tree    ulid.ULID
	Ref     format.BranchRef
	// ETag of the live ref, for a later compare-and-swap (retire, or in
	// format 2 the head's advance).
	ETag string
	// RefFormat is the ref's format version: 2 for a head pointer (Ref.Head
	// names the head), 1 for a ref whose head is found by listing its tree.
	RefFormat int
}

// refReadConcurrency bounds the parallel GETs of ResolveBranch.
const refReadConcurrency = 8

// ResolveBranch finds the live incarnation of logical: one listing of
// BranchRefPrefix (one LIST unless the name has over a thousand refs) and a
// GET of each ref of that logical name, live, retired or fence, read in
// parallel. Exactly one live ref → its Branch; none → ErrBranchNotFound;
// more → *MultipleLiveError. The cost grows with the number of incarnations
// the name has ever had, since retired refs stay as fences.
func ResolveBranch(ctx context.Context, s storage.Store, graph, logical string) (Branch, error) {
	if err := format.ValidateGraphName(graph); err != nil {
		return Branch{}, invalid("Graph", err)
	}
	if err := format.ValidateBranchName(logical); err != nil {
		return Branch{}, invalid("Branch", err)
	}
	keys, natives, err := listNameRefs(ctx, s, graph, logical)
	if err != nil {
		return Branch{}, fmt.Errorf("resolve branch %q: list refs: %w", logical, err)
	}
	objs, errs := getAll(ctx, s, keys)
	var live []Branch
	for i, key := range keys {
		if errors.Is(errs[i], storage.ErrNotFound) {
			continue // deleted since the listing; refs are not deleted by graft
		}
		if errs[i] != nil {
			return Branch{}, fmt.Errorf("resolve branch %q: read ref: %w", logical, errs[i])
		}
		ref, version, err := format.DecodeBranchRefAny(objs[i].Body)
		if err != nil {
			return Branch{}, fmt.Errorf("resolve branch %q: %s: %w", logical, key, err)
		}
		if ref.Native != natives[i] {
			return Branch{}, fmt.Errorf("resolve branch %q: %s: %w", logical, key,
				&format.MalformedError{Kind: format.KindBranchRef, Field: "native", Reason: "is " + ref.Native + ", not the native name its key names"})
		}
		if ref.State == format.RefLive {
			live = append(live, Branch{Logical: logical, Native: ref.Native, Tree: ref.Tree, Ref: ref, ETag: objs[i].ETag, RefFormat: version})
		}
	}
	switch len(live) {
	case 0:
		return Branch{}, fmt.Errorf("resolve branch %q: %w", logical, ErrBranchNotFound)
	case 1:
		return live[0], nil
	}
	e := &MultipleLiveError{Graph: graph, Branch: logical}
	for _, b := range live {
		e.Natives = append(e.Natives, b.Native)
	}
	return Branch{}, fmt.Errorf("resolve branch %q: %w", logical, e)
}

// getAll GETs keys with bounded parallelism; results are in key order.
func getAll(ctx context.Context, s storage.Store, keys []string) ([]storage.Object, []error) {
	objs := make([]storage.Object, len(keys))
	errs := make([]error, len(keys))
	sem := make(chan struct{}, refReadConcurrency)
	var wg sync.WaitGroup
	for i, key := range keys {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			objs[i], errs[i] = s.Get(ctx, key)
		}()
	}
	wg.Wait()
	return objs, errs
}

// ReadTableVersion reads a table version manifest: one GET.
func ReadTableVersion(ctx context.Context, s storage.Store, graph, table string, version ulid.ULID) (format.TableVersion, error) {
	if err := format.ValidateGraphName(graph); err != nil {
		return format.TableVersion{}, invalid("Graph", err)
	}
	if err := format.ValidateTableName(table); err != nil {
		return format.TableVersion{}, invalid("Table", err)
	}
	if version.IsZero() {
		return format.TableVersion{}, invalidf("Version", "zero ULID")
	}
	key := format.TableVersionKey(graph, table, version)
	obj, err := s.Get(ctx, key)
	if errors.Is(err, storage.ErrNotFound) {
		return format.TableVersion{}, fmt.Errorf("read table %s version %s: %w: %w", table, version, ErrVersionNotFound, err)
	}
	if err != nil {
		return format.TableVersion{}, fmt.Errorf("read table %s version %s: %w", table, version, err)
	}
	v, err := format.DecodeTableVersion(obj.Body)
	if err != nil {
		return format.TableVersion{}, fmt.Errorf("read table %s version %s: %s: %w", table, version, key, err)
	}
	if v.Table != table || v.ID != version {
		return format.TableVersion{}, fmt.Errorf("read table %s version %s: %s: %w", table, version, key,
			&format.MalformedError{Kind: format.KindTableVersion, Reason: "is version " + v.ID.String() + " of table " + v.Table + ", not the one its key names"})
	}
	return v, nil
}

// ObjectRef locates one data object of a table version.
type ObjectRef struct {
	ID     ulid.ULID
	Key    string
	Size   int64
	SHA256 string // lower-case hex
}

// ListTableObjects returns the data objects of table as of commit: two GETs
// (the commit and the version it pins). A table the commit does not pin is
// ErrTableNotPinned.
func ListTableObjects(ctx context.Context, s storage.Store, graph, commitID, table string) ([]ObjectRef, error) {
	if err := format.ValidateTableName(table); err != nil {
		return nil, invalid("Table", err)
	}
	if id, err := format.ParseCommitID(commitID); err == nil && id.IsV2() {
		return listTableObjectsV2(ctx, s, graph, id, table)
	}
	c, err := ReadCommit(ctx, s, graph, commitID)
	if err != nil {
		return nil, fmt.Errorf("list table objects: %w", err)
	}
	version, ok := c.Pins[table]
	if !ok {
		return nil, fmt.Errorf("list table objects: commit %s does not pin table %q: %w", commitID, table, ErrTableNotPinned)
	}
	v, err := ReadTableVersion(ctx, s, graph, table, version)
	if err != nil {
		return nil, fmt.Errorf("list table objects: %w", err)
	}
	refs := make([]ObjectRef, 0, len(v.Objects))
	for _, o := range v.Objects {
		refs = append(refs, ObjectRef{ID: o.ID, Key: format.ObjectKey(graph, table, o.ID), Size: o.Size, SHA256: o.SHA256})
	}
	return refs, nil
}

// listTableObjectsV2 is ListTableObjects at a format-2 commit: the pins lookup, the
// version, then its entries chunk by chunk. An external entry's Key is its own key and its
// ID is zero.
func listTableObjectsV2(ctx context.Context, s storage.Store, graph string, id format.CommitID, table string) ([]ObjectRef, error) {
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
		refs = append(refs, ObjectRef{ID: e.Object, Key: ObjectKeyOf(graph, table, e), Size: e.Size, SHA256: e.SHA256})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list table objects: %w", err)
	}
	return refs, nil
}
