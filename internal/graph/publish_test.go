package graph

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/faults"
)

func mustInitGraph(t *testing.T, s storage.Store) (*Graph, InitResult) {
	t.Helper()
	res, err := Init(context.Background(), s, initParams())
	if err != nil {
		t.Fatalf("init v2: %v", err)
	}
	g, err := Open(s, "sales")
	if err != nil {
		t.Fatal(err)
	}
	return g, res
}

func spec(branch string, n int, pins map[string]ulid.ULID) CommitSpec {
	return CommitSpec{Branch: branch, SetPins: pins, Author: "ana", Message: fmt.Sprintf("commit %d", n),
		Time: t0.Add(time.Duration(n) * time.Minute), Op: fmt.Sprintf("op-%s-%d", strings.ReplaceAll(branch, "/", "-"), n)}
}

func mustAppend(t *testing.T, g *Graph, sp CommitSpec) AppendResult {
	t.Helper()
	res, err := g.Append(context.Background(), sp)
	if err != nil {
		t.Fatalf("append %s: %v", sp.Message, err)
	}
	return res
}

func headOf(t *testing.T, g *Graph, branch string) Head {
	t.Helper()
	h, err := g.BranchHead(context.Background(), branch)
	if err != nil {
		t.Fatalf("head of %s: %v", branch, err)
	}
	return h
}

func TestInitAppendForkRetire_OnEveryBackend(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *faults.Store) {
		ctx := context.Background()
		g, init := mustInitGraph(t, s)
		if h := headOf(t, g, "main"); h.Commit.ID != init.Root.ID {
			t.Fatalf("main head = %v, want the root %v", h.Commit.ID, init.Root.ID)
		}
		// Re-running init is a no-op.
		if again, err := Init(ctx, s, initParams()); err != nil || again.Root.ID != init.Root.ID {
			t.Fatalf("init again: %v, %v", again.Root.ID, err)
		}
		a := mustAppend(t, g, spec("main", 1, map[string]ulid.ULID{"orders": versionA}))
		if a.Publish.Outcome != Published || a.Commit().ID.Seq != 1 || a.Commit().ID.Digest.IsZero() {
			t.Fatalf("append = %+v", a.Publish)
		}
		h := headOf(t, g, "main")
		if h.Commit.ID != a.Commit().ID {
			t.Fatalf("head %v, want %v", h.Commit.ID, a.Commit().ID)
		}
		if v, ok, err := g.Pin(ctx, h.Commit, "orders"); err != nil || !ok || v != versionA {
			t.Fatalf("pin orders = %v %v %v", v, ok, err)
		}
		// A branch from main's head: one commit and one ref.
		s.ResetCounts()
		fp, err := g.CreateBranch(ctx, ForkSpec{Branch: "feature/x", Tree: treeFeature, Source: h.Commit.ID.String(),
			Author: "ana", Message: "branch", Time: t0.Add(time.Hour), Op: "op-create-1"})
		if err != nil {
			t.Fatalf("create branch: %v", err)
		}
		if puts := s.Count(faults.OpPut).Attempted; puts != 2 {
			t.Fatalf("create branch made %d puts, want 2 (fork commit, ref)", puts)
		}
		fh := headOf(t, g, "feature/x")
		if fh.Commit.ID != fp.Commit.ID || fh.Commit.Fork != h.Commit.ID || fh.Commit.Pins.Len() != 1 {
			t.Fatalf("feature head = %+v", fh.Commit)
		}
		b := mustAppend(t, g, spec("feature/x", 1, map[string]ulid.ULID{"orders": versionB}))
		if b.Commit().Fork != h.Commit.ID {
			t.Fatalf("append on feature lost its fork: %v", b.Commit().Fork)
		}
		if ok, err := g.IsAncestorOf(ctx, h.Commit.ID, headOf(t, g, "feature/x").Commit); err != nil || !ok {
			t.Fatalf("main's head is not an ancestor of feature's: %v %v", ok, err)
		}
		// Retire: the retired ref keeps its head and stays a fence.
		fb := headOf(t, g, "feature/x")
		ret, err := RetireRef(ctx, s, "sales", fb.Native, fb.ETag, "op-delete-1")
		if err != nil || ret.Ref.State != format.RefRetired || ret.Ref.Head != b.Commit().ID {
			t.Fatalf("retire = %+v, %v", ret, err)
		}
		if _, err := g.BranchHead(ctx, "feature/x"); !errors.Is(err, ErrBranchNotFound) {
			t.Fatalf("head of a retired branch: %v", err)
		}
	})
}

// Commit returns the commit an append planned.
func (r AppendResult) Commit() format.Commit { return r.Plan.Commit }

// A stale expected head after cleanup emptied keys: main at seq 8, a branch forked at
// seq 2, cleanup reclaims 1 and 3..6; a write on main expecting the head at
// seq 2 ends stale, and writes nothing.
func TestStaleExpectedHeadAfterCleanupGaps_IsStaleAndWritesNothing(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *faults.Store) {
		ctx := context.Background()
		g, init := mustInitGraph(t, s)
		ids := []format.CommitID{init.Root.ID}
		for i := 1; i <= 8; i++ {
			r := mustAppend(t, g, spec("main", i, map[string]ulid.ULID{"orders": versionA}))
			ids = append(ids, r.Commit().ID)
		}
		if _, err := g.CreateBranch(ctx, ForkSpec{Branch: "feature", Tree: treeFeature, Source: ids[2].String(), Author: "ana",
			Message: "fork", Time: t0.Add(time.Hour), Op: "op-fork"}); err != nil {
			t.Fatal(err)
		}
		for _, i := range []int{1, 3, 4, 5, 6} {
			if err := s.Delete(ctx, format.CommitIDKey("sales", ids[i])); err != nil {
				t.Fatal(err)
			}
		}
		before := dump(t, s)
		stale := spec("main", 9, map[string]ulid.ULID{"orders": versionB})
		stale.ExpectedHead = ids[2].String()
		_, err := g.Append(ctx, stale)
		var se *StaleHeadError
		if !errors.As(err, &se) || !errors.Is(err, ErrStaleHead) || se.Found != ids[8] {
			t.Fatalf("append expecting seq 2 = %v, want a stale head naming %v", err, ids[8])
		}
		if after := dump(t, s); len(after) != len(before) {
			t.Fatalf("a stale append wrote %d objects", len(after)-len(before))
		}
		if h := headOf(t, g, "main"); h.Commit.ID != ids[8] {
			t.Fatalf("head moved to %v", h.Commit.ID)
		}
	})
}

// The settle variant: our swap is in doubt and never lands; another writer
// takes seq h+1 and h+2; cleanup reclaims the other h+1. Settling says stale
// (ours is not behind the head), and our commit key still holds our bytes.
func TestSettleAfterOthersAndCleanup_IsStaleNeverBehindTheHead(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *faults.Store) {
		ctx := context.Background()
		g, _ := mustInitGraph(t, s)
		mustAppend(t, g, spec("main", 1, nil))
		ours, err := g.PlanAppend(ctx, spec("main", 2, map[string]ulid.ULID{"mine": versionA}))
		if err != nil {
			t.Fatal(err)
		}
		if err := g.WriteAppend(ctx, ours); err != nil {
			t.Fatal(err)
		}
		remove := s.Add(faults.Rule{Name: "lost", Op: faults.OpPut, KeyPrefix: "sales/refs/", Mode: faults.FailBeforeSend})
		_, err = g.Publish(ctx, ours.Publish)
		var doubt *InDoubtError
		if !errors.As(err, &doubt) || doubt.Publish == nil || !errors.Is(err, storage.ErrAmbiguous) {
			t.Fatalf("publish = %v, want in doubt with the publish to settle", err)
		}
		remove()
		other2 := mustAppend(t, g, spec("main", 20, nil))
		other3 := mustAppend(t, g, spec("main", 30, nil))
		if other2.Commit().ID.Seq != ours.Commit.ID.Seq {
			t.Fatalf("other writer's first commit at seq %d, ours at %d", other2.Commit().ID.Seq, ours.Commit.ID.Seq)
		}
		if err := s.Delete(ctx, format.CommitIDKey("sales", other2.Commit().ID)); err != nil {
			t.Fatal(err)
		}
		_, err = g.SettlePublish(ctx, *doubt.Publish)
		var se *StaleHeadError
		if !errors.As(err, &se) || se.Found != other3.Commit().ID || se.Planned != ours.Commit.ID {
			t.Fatalf("settle = %v, want stale behind %v", err, other3.Commit().ID)
		}
		obj, err := s.Get(ctx, ours.CommitKey)
		if err != nil || !bytes.Equal(obj.Body, ours.CommitBody) {
			t.Fatalf("our commit key holds %q, %v", obj.Body, err)
		}
		if h := headOf(t, g, "main"); h.Commit.ID != other3.Commit().ID {
			t.Fatalf("head = %v", h.Commit.ID)
		}
	})
}

// A swap that landed but whose answer was lost, then superseded: settling
// finds ours behind the new head and says already published.
func TestSettleAfterLostAnswerAndNewerCommits_IsAlreadyPublished(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *faults.Store) {
		ctx := context.Background()
		g, _ := mustInitGraph(t, s)
		ours, err := g.PlanAppend(ctx, spec("main", 1, map[string]ulid.ULID{"orders": versionA}))
		if err != nil {
			t.Fatal(err)
		}
		if err := g.WriteAppend(ctx, ours); err != nil {
			t.Fatal(err)
		}
		s.Add(faults.Rule{Name: "lost-answer", Op: faults.OpPut, KeyPrefix: "sales/refs/", Mode: faults.ApplyLoseAnswer, Times: 1})
		// The read-back after the lost answer fails too: in doubt.
		s.Add(faults.Rule{Name: "no-readback", Op: faults.OpGet, KeyPrefix: "sales/refs/", Mode: faults.FailBeforeSend, Times: 3})
		_, err = g.Publish(ctx, ours.Publish)
		var doubt *InDoubtError
		if !errors.As(err, &doubt) {
			t.Fatalf("publish = %v, want in doubt", err)
		}
		mustAppend(t, g, spec("main", 2, nil))
		mustAppend(t, g, spec("main", 3, nil))
		res, err := g.SettlePublish(ctx, *doubt.Publish)
		if err != nil || res.Outcome != AlreadyPublished || res.Walked != 2 {
			t.Fatalf("settle = %+v, %v; want already published after walking 2", res, err)
		}
	})
}

// Every version a ref takes has bytes (and so an ETag) it never had before,
// so a swap from a stale ETag never succeeds, on any backend.
func TestRefETagsNeverRepeat_AndStaleSwapsFail(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *faults.Store) {
		ctx := context.Background()
		g, _ := mustInitGraph(t, s)
		seen := map[string]bool{}
		var etags []string
		record := func() {
			h := headOf(t, g, "main")
			if seen[h.ETag] {
				t.Fatalf("ETag %s repeats", h.ETag)
			}
			seen[h.ETag] = true
			etags = append(etags, h.ETag)
		}
		record()
		for i := 1; i <= 5; i++ {
			// The same pins each time: only the head differs.
			mustAppend(t, g, spec("main", i, map[string]ulid.ULID{"orders": versionA}))
			record()
		}
		h := headOf(t, g, "main")
		body, _ := format.EncodeBranchRef(h.Ref)
		for _, old := range etags[:len(etags)-1] {
			if _, err := s.Put(ctx, format.BranchRefKey("sales", h.Native), body, storage.PutOptions{IfMatch: old}); !errors.Is(err, storage.ErrPreconditionFailed) {
				t.Fatalf("swap from stale ETag %s: %v", old, err)
			}
		}
		ret, err := RetireRef(ctx, s, "sales", h.Native, h.ETag, "op-delete")
		if err != nil || seen[ret.ETag] && ret.ETag != "" {
			t.Fatalf("retired ref's ETag %s repeats an earlier one (%v)", ret.ETag, err)
		}
	})
}

func TestInitLosesGraphRecord_FencesItsMainRef(t *testing.T) {
	ctx := context.Background()
	inner := newStore(t)
	other := initParams()
	other.MainTree, other.Op = treeMain2, "op-init-other"
	_, _, _, otherRec, err := buildInit(other)
	if err != nil {
		t.Fatal(err)
	}
	// Just before our graph record is put, the other init's lands.
	s := &beforePut{Store: inner, key: format.GraphKey("sales"), fn: func() {
		inner.Put(ctx, format.GraphKey("sales"), otherRec, storage.PutOptions{IfNoneMatch: true})
	}}
	_, err = Init(ctx, s, initParams())
	if !errors.Is(err, ErrGraphExists) {
		t.Fatalf("init = %v, want ErrGraphExists", err)
	}
	inc, _, err := (&Graph{S: inner, Name: "sales"}).RefHead(ctx, format.NativeName("main", treeMain))
	if err != nil || inc.Ref.State != format.RefFence || inc.Ref.Reason != FenceReasonUnpublished {
		t.Fatalf("our main ref = %+v, %v; want a fence", inc, err)
	}
}

// beforePut runs fn once before the first put of key.
type beforePut struct {
	storage.Store
	key  string
	fn   func()
	done bool
}

func (b *beforePut) Put(ctx context.Context, key string, body []byte, opts storage.PutOptions) (storage.PutResult, error) {
	if key == b.key && !b.done {
		b.done = true
		b.fn()
	}
	return b.Store.Put(ctx, key, body, opts)
}
