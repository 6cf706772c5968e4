package graph

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage"
)

// A branch's head, once its ref is read, is one GET of the commit the ref
// names, however long the branch's history.
func TestHeadOf_CostsOneGet_AtDepth0And64(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	g, _ := mustInitGraph(t, s)
	measure := func(wantSeq int64) {
		t.Helper()
		b, err := ResolveBranch(ctx, s, "sales", "main")
		if err != nil {
			t.Fatal(err)
		}
		c := &countingStore{Store: s}
		h, err := (&Graph{S: c, Name: "sales"}).HeadOf(ctx, b)
		if err != nil || h.Commit.ID.Seq != wantSeq {
			t.Fatalf("HeadOf = seq %d, %v; want seq %d", h.Commit.ID.Seq, err, wantSeq)
		}
		if c.gets.Load() != 1 || c.total() != 1 {
			t.Fatalf("depth %d: %d gets, %d requests; want 1 GET", wantSeq, c.gets.Load(), c.total())
		}
	}
	measure(0)
	for seq := 1; seq <= 64; seq++ {
		mustAppend(t, g, spec("main", seq, map[string]ulid.ULID{"orders": versionA}))
	}
	measure(64)
}

func TestReadCommit_OneGet_AndMissingIsErrCommitNotFound(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	root := mustInit(t, s).Root.ID
	c := &countingStore{Store: s}
	got, err := ReadCommit(ctx, c, "sales", root.String())
	if err != nil || got.ID != root || c.total() != 1 {
		t.Fatalf("ReadCommit = %v, %v after %d requests", got.ID, err, c.total())
	}
	_, err = ReadCommit(ctx, s, "sales", format.CommitID{Tree: treeMain, Seq: 1, Digest: root.Digest}.String())
	if !errors.Is(err, ErrCommitNotFound) || !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("error %v, want ErrCommitNotFound wrapping storage.ErrNotFound", err)
	}
	if _, err := ReadCommit(ctx, s, "sales", "not-a-commit"); !errors.Is(err, ErrInvalid) || !errors.Is(err, format.ErrInvalidName) {
		t.Fatalf("error %v, want ErrInvalid and format.ErrInvalidName", err)
	}
}

func TestReadGraph_Missing_IsErrGraphNotFound(t *testing.T) {
	if _, err := ReadGraph(context.Background(), newStore(t), "sales"); !errors.Is(err, ErrGraphNotFound) {
		t.Fatalf("error %v, want ErrGraphNotFound", err)
	}
}

// putRef writes a ref object directly, as another writer would.
func putRef(t *testing.T, s storage.Store, ref format.BranchRef) {
	t.Helper()
	b, err := format.EncodeBranchRef(ref)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(context.Background(), format.BranchRefKey("sales", ref.Native), b, storage.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
}

// liveRef is a live ref of a tree whose head is seq 0 (a commit the tests
// never read).
func liveRef(logical string, tree ulid.ULID) format.BranchRef {
	return format.BranchRef{State: format.RefLive, Branch: logical, Native: format.NativeName(logical, tree), Tree: tree,
		Head: format.CommitID{Tree: tree, Digest: format.Digest{0xaa}}, Op: "op-x"}
}

func TestResolveBranch_TwoLiveRefs_IsErrMultipleLive(t *testing.T) {
	s := newStore(t)
	mustInit(t, s)
	putRef(t, s, liveRef("main", treeMain2))
	_, err := ResolveBranch(context.Background(), s, "sales", "main")
	var ml *MultipleLiveError
	if !errors.Is(err, ErrMultipleLive) || !errors.As(err, &ml) {
		t.Fatalf("error %v, want *MultipleLiveError", err)
	}
	want := []string{"main." + treeMain2.String(), "main." + treeMain.String()}
	if !slices.Equal(ml.Natives, want) || ml.Branch != "main" {
		t.Fatalf("MultipleLiveError = %+v, want natives %v", ml, want)
	}
}

func TestResolveBranch_IgnoresRetiredFencesAndLongerNames(t *testing.T) {
	s := newStore(t)
	mustInit(t, s)
	retired := liveRef("feature", treeMain)
	retired.State, retired.RetiredOp = format.RefRetired, "op-del"
	putRef(t, s, retired)
	putRef(t, s, format.BranchRef{State: format.RefFence, Native: format.NativeName("feature", treeMain2), Op: "op-abandon", Reason: "abandon"})
	putRef(t, s, liveRef("feature.v2", treeMain2))  // a longer name under the same listing prefix
	putRef(t, s, liveRef("feature/sub", treeMain2)) // a child name, not under the prefix
	if _, err := ResolveBranch(context.Background(), s, "sales", "feature"); !errors.Is(err, ErrBranchNotFound) {
		t.Fatalf("with only retired and fenced refs: %v, want ErrBranchNotFound", err)
	}
	putRef(t, s, liveRef("feature", treeFeature))
	c := &countingStore{Store: s}
	b, err := ResolveBranch(context.Background(), c, "sales", "feature")
	if err != nil || b.Tree != treeFeature || b.Native != "feature."+treeFeature.String() || b.Ref.State != format.RefLive {
		t.Fatalf("ResolveBranch = %+v, %v", b, err)
	}
	// One listing, and one GET per ref of "feature" (retired, fence, live).
	if c.lists.Load() != 1 || c.gets.Load() != 3 {
		t.Fatalf("%d lists and %d gets, want 1 and 3", c.lists.Load(), c.gets.Load())
	}
}

func TestResolveBranch_Unknown_IsErrBranchNotFound(t *testing.T) {
	s := newStore(t)
	mustInit(t, s)
	if _, err := ResolveBranch(context.Background(), s, "sales", "nope"); !errors.Is(err, ErrBranchNotFound) {
		t.Fatalf("error %v, want ErrBranchNotFound", err)
	}
}

// Bad objects at known keys surface as the format package's typed errors
// through every read.
func TestReads_BadObjectsAtKnownKeys_SurfaceTypedFormatErrors(t *testing.T) {
	ctx := context.Background()
	good := newStore(t)
	root := mustInit(t, good).Root.ID
	goodBytes := dump(t, good)
	rootKey := format.CommitIDKey("sales", root)
	refKey := format.BranchRefKey("sales", "main."+treeMain.String())
	graphKey := format.GraphKey("sales")

	bads := []struct {
		name string
		edit func(b []byte) []byte
		want error
	}{
		{"malformed", func(b []byte) []byte { return append(b, []byte(`{}`)...) }, format.ErrMalformed},
		{"unknown format", func(b []byte) []byte { return bytes.Replace(b, []byte(`"format":3`), []byte(`"format":4`), 1) }, format.ErrUnsupportedFormat},
		{"oversize", func(b []byte) []byte { return append(b, bytes.Repeat([]byte(" "), format.MaxObjectSize)...) }, format.ErrTooLarge},
		{"unknown field", func(b []byte) []byte { return bytes.Replace(b, []byte(`"op":`), []byte(`"extra":1,"op":`), 1) }, format.ErrMalformed},
	}
	reads := []struct {
		name string
		key  string
		read func(s storage.Store) error
	}{
		{"ReadGraph", graphKey, func(s storage.Store) error { _, err := ReadGraph(ctx, s, "sales"); return err }},
		{"ReadCommit", rootKey, func(s storage.Store) error { _, err := ReadCommit(ctx, s, "sales", root.String()); return err }},
		{"BranchHead", rootKey, func(s storage.Store) error {
			_, err := (&Graph{S: s, Name: "sales"}).BranchHead(ctx, "main")
			return err
		}},
		{"ResolveBranch", refKey, func(s storage.Store) error { _, err := ResolveBranch(ctx, s, "sales", "main"); return err }},
	}
	for _, r := range reads {
		for _, bad := range bads {
			s := newStore(t)
			for k, v := range goodBytes {
				body := []byte(v)
				if k == r.key {
					body = bad.edit(body)
				}
				if _, err := s.Put(ctx, k, body, storage.PutOptions{IfNoneMatch: true}); err != nil {
					t.Fatal(err)
				}
			}
			if err := r.read(s); !errors.Is(err, bad.want) {
				t.Errorf("%s with %s object: error %v, want %v", r.name, bad.name, err, bad.want)
			}
		}
	}
}

func TestReadCommit_ObjectNamingAnotherCommit_IsErrMalformed(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	rootID := mustInit(t, s).Root.ID
	root := dump(t, s)[format.CommitIDKey("sales", rootID)]
	// The root commit's bytes copied to the key of another id.
	other := format.CommitID{Tree: treeMain, Seq: 1, Digest: rootID.Digest}
	if _, err := s.Put(ctx, format.CommitIDKey("sales", other), []byte(root), storage.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadCommit(ctx, s, "sales", other.String()); !errors.Is(err, format.ErrMalformed) {
		t.Fatalf("error %v, want format.ErrMalformed", err)
	}
}

func TestListTableObjects_TableNotPinned_IsErrTableNotPinned(t *testing.T) {
	s := newStore(t)
	root := mustInit(t, s).Root.ID
	if _, err := ListTableObjects(context.Background(), s, "sales", root.String(), "orders"); !errors.Is(err, ErrTableNotPinned) {
		t.Fatalf("error %v, want ErrTableNotPinned", err)
	}
}

func TestListTableObjects_PinnedVersionMissing_IsErrVersionNotFound(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	g, _ := mustInitGraph(t, s)
	c := mustAppend(t, g, spec("main", 1, map[string]ulid.ULID{"orders": versionA})) // a version never written
	if _, err := ListTableObjects(ctx, s, "sales", c.Commit().ID.String(), "orders"); !errors.Is(err, ErrVersionNotFound) {
		t.Fatalf("error %v, want ErrVersionNotFound", err)
	}
}

func TestListTableObjects_VersionBytesOfAnotherVersion_IsErrMalformed(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	g, _ := mustInitGraph(t, s)
	entry := format.ManifestEntry{Name: "part-1", Object: objectA, Size: 1, SHA256: strings.Repeat("a", 64)}
	if _, err := g.PutVersion(ctx, VersionSpec{Table: "orders", VersionID: versionA, Put: []format.ManifestEntry{entry}, Time: t0, Op: "op-v"}); err != nil {
		t.Fatal(err)
	}
	body := dump(t, s)[format.TableVersionKey("sales", "orders", versionA)]
	if _, err := s.Put(ctx, format.TableVersionKey("sales", "orders", versionB), []byte(body), storage.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	c := mustAppend(t, g, spec("main", 1, map[string]ulid.ULID{"orders": versionB}))
	if _, err := ListTableObjects(ctx, s, "sales", c.Commit().ID.String(), "orders"); !errors.Is(err, format.ErrMalformed) {
		t.Fatalf("error %v, want format.ErrMalformed", err)
	}
}
