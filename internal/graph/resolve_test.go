package graph

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage"
)

// putBytes writes raw bytes at a ref key, as a broken or foreign writer would.
func putBytes(t *testing.T, s storage.Store, native string, body []byte) string {
	t.Helper()
	key := format.BranchRefKey("sales", native)
	if _, err := s.Put(context.Background(), key, body, storage.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	return key
}

func retiredRef(ref format.BranchRef) format.BranchRef {
	ref.State, ref.RetiredOp = format.RefRetired, "op-del-"+ref.Tree.String()
	return ref
}

// An undecodable ref at an old incarnation's key does not make the name unresolvable: the
// one live ref is the branch, and the unreadable keys are reported beside it.
func TestResolveBranch_UndecodableOldRefBesideTheLiveOne_ReturnsTheLiveOne(t *testing.T) {
	s := newStore(t)
	mustInit(t, s)
	garbage := putBytes(t, s, format.NativeName("main", treeMain2), []byte("\x00 not a ref"))
	// A decodable ref naming another native than its key's is unreadable too.
	other, err := format.EncodeBranchRef(retiredRef(liveRef("main", treeMain2)))
	if err != nil {
		t.Fatal(err)
	}
	misplaced := putBytes(t, s, format.NativeName("main", treeFeature), other)

	b, err := ResolveBranch(context.Background(), s, "sales", "main")
	if err != nil || b.Native != format.NativeName("main", treeMain) || b.Ref.State != format.RefLive {
		t.Fatalf("ResolveBranch = %+v, %v; want the live main.%s", b, err, treeMain)
	}
	want := []string{garbage, misplaced}
	slices.Sort(want)
	if !slices.Equal(b.Unreadable, want) {
		t.Fatalf("Unreadable = %v, want %v", b.Unreadable, want)
	}
	// ReadBranchRefs reports them the same way; ReadBranchIncarnations (a repair's read)
	// still refuses a name it cannot read whole.
	refs, err := ReadBranchRefs(context.Background(), s, "sales", "main")
	if err != nil || len(refs.Incarnations) != 1 || len(refs.Unreadable) != 2 || !errors.Is(refs.Err(), format.ErrMalformed) {
		t.Fatalf("ReadBranchRefs = %+v, %v; want one ref and two unreadable", refs, err)
	}
	if _, err := ReadBranchIncarnations(context.Background(), s, "sales", "main"); !errors.Is(err, format.ErrMalformed) {
		t.Fatalf("ReadBranchIncarnations: %v, want format.ErrMalformed", err)
	}
}

// With no live ref readable, an unreadable one may be the live one: the answer is an error
// carrying the typed format error, never ErrBranchNotFound.
func TestResolveBranch_UndecodableRefAndNoLiveOne_IsAnErrorNotNotFound(t *testing.T) {
	s := newStore(t)
	mustInit(t, s)
	putRef(t, s, retiredRef(liveRef("feature", treeMain2)))
	putBytes(t, s, format.NativeName("feature", treeFeature), []byte(`{"format":9,"kind":"branch_ref"}`))
	_, err := ResolveBranch(context.Background(), s, "sales", "feature")
	if err == nil || errors.Is(err, ErrBranchNotFound) || !errors.Is(err, format.ErrUnsupportedFormat) {
		t.Fatalf("ResolveBranch: %v; want an error matching format.ErrUnsupportedFormat, not ErrBranchNotFound", err)
	}
	// A hint of the retired incarnation falls back to the same answer.
	_, err = ResolveBranchHinted(context.Background(), s, "sales", "feature", format.NativeName("feature", treeMain2))
	if err == nil || errors.Is(err, ErrBranchNotFound) || !errors.Is(err, format.ErrUnsupportedFormat) {
		t.Fatalf("ResolveBranchHinted: %v; want the full resolve's error", err)
	}
}

// Two live refs stay ErrMultipleLive, unreadable refs or not.
func TestResolveBranch_TwoLiveAndAnUndecodableRef_IsErrMultipleLive(t *testing.T) {
	s := newStore(t)
	mustInit(t, s)
	putRef(t, s, liveRef("main", treeMain2))
	putBytes(t, s, format.NativeName("main", treeFeature), []byte("garbage"))
	if _, err := ResolveBranch(context.Background(), s, "sales", "main"); !errors.Is(err, ErrMultipleLive) {
		t.Fatalf("ResolveBranch: %v, want ErrMultipleLive", err)
	}
}

// A live hint is one GET, whatever the name's past: no listing, no other ref read.
func TestResolveBranchHinted_LiveHint_IsOneGetWhateverTheIncarnations(t *testing.T) {
	s := newStore(t)
	mustInit(t, s)
	for i := range 50 {
		tree := treeFor(i)
		putRef(t, s, retiredRef(liveRef("feature", tree)))
	}
	putRef(t, s, liveRef("feature", treeFeature))
	hint := format.NativeName("feature", treeFeature)
	c := &countingStore{Store: s}
	b, err := ResolveBranchHinted(context.Background(), c, "sales", "feature", hint)
	if err != nil || b.Native != hint || b.ETag == "" || b.Tree != treeFeature {
		t.Fatalf("ResolveBranchHinted = %+v, %v", b, err)
	}
	if c.gets.Load() != 1 || c.lists.Load() != 0 || c.total() != 1 {
		t.Fatalf("%d gets, %d lists, %d requests; want 1 GET and nothing else", c.gets.Load(), c.lists.Load(), c.total())
	}
	full, err := ResolveBranch(context.Background(), s, "sales", "feature")
	if err != nil || full.Native != b.Native || full.ETag != b.ETag || full.Ref != b.Ref {
		t.Fatalf("the full resolve found %+v, %v; the hinted one %+v", full, err, b)
	}
}

// A hint that storage does not confirm — stale (the ref was retired, and whoever gave the
// hint has not heard yet), of an empty key, of another name, or unreadable — falls back to
// the full resolve and answers what storage says.
func TestResolveBranchHinted_StaleOrWrongHint_FallsBackToStorage(t *testing.T) {
	s := newStore(t)
	mustInit(t, s)
	stale := format.NativeName("feature", treeMain2)
	putRef(t, s, retiredRef(liveRef("feature", treeMain2)))
	unreadable := format.NativeName("feature", treeMain)
	putBytes(t, s, unreadable, []byte("garbage"))
	ctx := context.Background()

	// No live ref at all: not found is storage's answer... except that the unreadable ref
	// could be the live one, so it is an error, not ErrBranchNotFound.
	if _, err := ResolveBranchHinted(ctx, s, "sales", "feature", stale); err == nil || errors.Is(err, ErrBranchNotFound) {
		t.Fatalf("stale hint, nothing live, one ref unreadable: %v; want an error, not not-found", err)
	}

	live := format.NativeName("feature", treeFeature)
	putRef(t, s, liveRef("feature", treeFeature))
	for name, hint := range map[string]string{
		"stale (retired)": stale,
		"empty key":       format.NativeName("feature", treeFor(99)),
		"another name":    format.NativeName("main", treeMain),
		"unreadable":      unreadable,
		"not a native":    "feature",
		"none":            "",
	} {
		c := &countingStore{Store: s}
		b, err := ResolveBranchHinted(ctx, c, "sales", "feature", hint)
		if err != nil || b.Native != live {
			t.Errorf("%s hint: %+v, %v; want storage's live %s", name, b, err, live)
		}
		if c.lists.Load() != 1 {
			t.Errorf("%s hint: %d lists; want the full resolve's one", name, c.lists.Load())
		}
	}

	// Retired for good, with nothing live: not found, from storage.
	s2 := newStore(t)
	mustInit(t, s2)
	putRef(t, s2, retiredRef(liveRef("feature", treeMain2)))
	if _, err := ResolveBranchHinted(ctx, s2, "sales", "feature", stale); !errors.Is(err, ErrBranchNotFound) {
		t.Fatalf("stale hint of a deleted branch: %v, want ErrBranchNotFound", err)
	}
}

// treeFor is a distinct fixed tree id per i.
func treeFor(i int) ulid.ULID {
	var id ulid.ULID
	id[0] = 1
	id[14] = byte(i >> 8)
	id[15] = byte(i)
	return id
}
