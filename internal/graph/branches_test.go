package graph

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/faults"
)

func branchNames(bs []Branch) []string {
	var out []string
	for _, b := range bs {
		out = append(out, b.Logical+"="+b.Native)
	}
	return out
}

func TestListBranches_ReturnsOneLiveIncarnationPerName_SkippingRetiredAndFences(t *testing.T) {
	s := newStore(t)
	mustInit(t, s)
	retired := liveRef("old", treeMain2)
	retired.State, retired.RetiredOp = format.RefRetired, "op-del"
	putRef(t, s, retired)
	putRef(t, s, format.BranchRef{State: format.RefFence, Native: format.NativeName("gone", treeMain2), Op: "op-abandon", Reason: "abandon"})
	putRef(t, s, liveRef("feature", treeFeature))
	putRef(t, s, liveRef("feature.v2", treeMain2))
	putRef(t, s, liveRef("feature/sub", treeMain2))

	c := &countingStore{Store: s}
	got, err := ListBranches(context.Background(), c, "sales")
	if err != nil {
		t.Fatalf("list branches: %v", err)
	}
	want := []string{
		"feature=feature." + treeFeature.String(),
		"feature.v2=feature.v2." + treeMain2.String(),
		"feature/sub=feature/sub." + treeMain2.String(),
		"main=main." + treeMain.String(),
	}
	if !slices.Equal(branchNames(got), want) {
		t.Fatalf("branches %v, want %v", branchNames(got), want)
	}
	for _, b := range got {
		if b.ETag == "" || b.Ref.State != format.RefLive || b.Tree.IsZero() {
			t.Fatalf("branch %+v lacks its live ref, tree or ETag", b)
		}
	}
	// One listing and one GET per ref (6 refs: main, feature, feature.v2, feature/sub, retired, fence).
	if c.lists.Load() != 1 || c.gets.Load() != 6 {
		t.Fatalf("%d lists and %d gets, want 1 and 6", c.lists.Load(), c.gets.Load())
	}
}

func TestListBranches_TwoLiveRefsOfOneName_RefusesNamingTheRepairStep(t *testing.T) {
	s := newStore(t)
	mustInit(t, s)
	putRef(t, s, liveRef("main", treeMain2))
	putRef(t, s, liveRef("feature", treeFeature))
	_, err := ListBranches(context.Background(), s, "sales")
	var ml *MultipleLiveError
	if !errors.Is(err, ErrMultipleLive) || !errors.As(err, &ml) {
		t.Fatalf("error %v, want *MultipleLiveError", err)
	}
	if ml.Branch != "main" || len(ml.Natives) != 2 {
		t.Fatalf("MultipleLiveError %+v, want main with 2 natives", ml)
	}
	msg := err.Error()
	for _, want := range []string{"graft branch repair sales main --keep", "main." + treeMain.String(), "main." + treeMain2.String()} {
		if !strings.Contains(msg, want) {
			t.Fatalf("message %q does not contain %q", msg, want)
		}
	}
}

func TestListBranches_MissingGraphName_IsInvalid(t *testing.T) {
	if _, err := ListBranches(context.Background(), newStore(t), "Bad Name"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("error %v, want ErrInvalid", err)
	}
}

func TestReadBranchIncarnations_ReadsEveryRefOfOneNameOnly(t *testing.T) {
	s := newStore(t)
	mustInit(t, s)
	putRef(t, s, liveRef("main", treeMain2))
	putRef(t, s, liveRef("main.v2", treeFeature)) // a longer name under the same listing prefix
	fence := format.BranchRef{State: format.RefFence, Native: format.NativeName("main", treeFeature), Op: "op-f", Reason: "unpublished"}
	putRef(t, s, fence)
	incs, err := ReadBranchIncarnations(context.Background(), s, "sales", "main")
	if err != nil {
		t.Fatalf("read incarnations: %v", err)
	}
	var got []string
	for _, inc := range incs {
		got = append(got, inc.Native+":"+string(inc.Ref.State))
		if inc.ETag == "" {
			t.Fatalf("incarnation %s has no ETag", inc.Native)
		}
	}
	want := []string{
		"main." + treeMain2.String() + ":live",
		"main." + treeFeature.String() + ":fence",
		"main." + treeMain.String() + ":live",
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("incarnations %v, want %v", got, want)
	}
}

// liveIncarnation returns the incarnation of native among main's refs.
func liveIncarnation(t *testing.T, s storage.Store, native string) Incarnation {
	t.Helper()
	incs, err := ReadBranchIncarnations(context.Background(), s, "sales", "main")
	if err != nil {
		t.Fatalf("read incarnations: %v", err)
	}
	for _, inc := range incs {
		if inc.Native == native {
			return inc
		}
	}
	t.Fatalf("no ref for %s", native)
	return Incarnation{}
}

func TestRetireRef_ReplacesLiveRefAndALatePutOfTheKeyFails(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	res := mustInit(t, s)
	native := res.MainRef.Native
	inc := liveIncarnation(t, s, native)
	got, err := RetireRef(ctx, s, "sales", native, inc.ETag, "op-repair")
	if err != nil || got.Outcome != PutCreated {
		t.Fatalf("retire: %+v, %v", got, err)
	}
	want := res.MainRef
	want.State, want.RetiredOp = format.RefRetired, "op-repair"
	if got.Ref != want {
		t.Fatalf("retired ref %+v, want %+v", got.Ref, want)
	}
	if now := liveIncarnation(t, s, native); now.Ref != want {
		t.Fatalf("stored ref %+v, want %+v", now.Ref, want)
	}
	// The retired ref is a fence: the live ref's late put-if-absent fails.
	live, _ := format.EncodeBranchRef(res.MainRef)
	if _, err := s.Put(ctx, format.BranchRefKey("sales", native), live, storage.PutOptions{IfNoneMatch: true}); !errors.Is(err, storage.ErrPreconditionFailed) {
		t.Fatalf("late put of the live ref: %v, want ErrPreconditionFailed", err)
	}
	// Repeating the retire (a retried activity) finds our bytes.
	again, err := RetireRef(ctx, s, "sales", native, inc.ETag, "op-repair")
	if err != nil || again.Outcome != PutAlreadyOurs {
		t.Fatalf("retire again: %+v, %v", again, err)
	}
}

func TestRetireRef_RetiredByAnotherOperation_IsErrRefChanged(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	res := mustInit(t, s)
	inc := liveIncarnation(t, s, res.MainRef.Native)
	if _, err := RetireRef(ctx, s, "sales", inc.Native, inc.ETag, "op-other"); err != nil {
		t.Fatal(err)
	}
	_, err := RetireRef(ctx, s, "sales", inc.Native, inc.ETag, "op-repair")
	var rc *RefChangedError
	if !errors.Is(err, ErrRefChanged) || !errors.As(err, &rc) || rc.Found != format.RefRetired || rc.Op != "op-other" {
		t.Fatalf("error %v, want *RefChangedError naming op-other's retire", err)
	}
}

func TestRetireRef_AnswerLost_ReadsBackOurBytesWithOnePut(t *testing.T) {
	ctx := context.Background()
	inner := newStore(t)
	res := mustInit(t, inner)
	inc := liveIncarnation(t, inner, res.MainRef.Native)
	s := faults.Wrap(inner)
	s.Add(faults.Rule{Op: faults.OpPut, KeyPrefix: format.BranchRefsPrefix("sales"), Mode: faults.ApplyLoseAnswer, Times: 1})
	got, err := RetireRef(ctx, s, "sales", inc.Native, inc.ETag, "op-repair")
	if err != nil || got.Outcome != PutAlreadyOurs || got.Ref.State != format.RefRetired {
		t.Fatalf("retire: %+v, %v; want our retired ref read back", got, err)
	}
	if n := s.Count(faults.OpPut).Sent; n != 1 {
		t.Fatalf("%d puts sent, want 1", n)
	}
}

func TestRetireRef_PutNeverLands_ReissuesThenIsInDoubt(t *testing.T) {
	ctx := context.Background()
	inner := newStore(t)
	res := mustInit(t, inner)
	inc := liveIncarnation(t, inner, res.MainRef.Native)
	s := faults.Wrap(inner)
	s.Add(faults.Rule{Op: faults.OpPut, KeyPrefix: format.BranchRefsPrefix("sales"), Mode: faults.FailBeforeSend})
	_, err := RetireRef(ctx, s, "sales", inc.Native, inc.ETag, "op-repair")
	var doubt *InDoubtError
	if !errors.As(err, &doubt) || !errors.Is(err, storage.ErrAmbiguous) || doubt.Attempts != MaxPutAttempts {
		t.Fatalf("error %v, want *InDoubtError after %d puts", err, MaxPutAttempts)
	}
	if n := s.Count(faults.OpPut).Attempted; n != MaxPutAttempts {
		t.Fatalf("%d puts attempted, want %d", n, MaxPutAttempts)
	}
	// Calling again once the store answers settles it.
	got, err := RetireRef(ctx, inner, "sales", inc.Native, inc.ETag, "op-repair")
	if err != nil || got.Outcome != PutCreated {
		t.Fatalf("retire after recovery: %+v, %v", got, err)
	}
}

func TestMultipleLiveError_RepairHintNamesEveryNative(t *testing.T) {
	e := &MultipleLiveError{Graph: "sales", Branch: "x", Natives: []string{"x.A", "x.B"}}
	hint := e.RepairHint()
	if !strings.Contains(hint, "graft branch repair sales x --keep <native>") || !strings.Contains(hint, "x.A, x.B") {
		t.Fatalf("hint %q", hint)
	}
}
