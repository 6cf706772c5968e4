package graph

import (
	"context"
	"errors"
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/faults"
)

// holdThenRefuse makes the first put under prefix a held put (ambiguous to its
// caller, applied only on release) and refuses every later one with 403, until the
// returned func removes both rules.
func holdThenRefuse(s *faults.Store, prefix string) (remove func()) {
	removeHold := s.Add(faults.Rule{Name: "held", Op: faults.OpPut, KeyPrefix: prefix, Mode: faults.Hold, Times: 1})
	removeRefuse := s.Add(faults.Rule{Name: "refused", Op: faults.OpPut, KeyPrefix: prefix, Mode: faults.Refuse, Status: 403, Skip: 1})
	return func() { removeHold(); removeRefuse() }
}

// A put-if-absent whose first put is held and whose re-issue is refused is in doubt, not
// refused: the held put lands on release, with the write's bytes.
func TestPutIfAbsent_HeldThenRefused_InDoubtAndTheHeldPutLands(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *faults.Store) {
		ctx := context.Background()
		unfault := holdThenRefuse(s, "k/")
		_, err := PutIfAbsent(ctx, s, "k/a", []byte("ours"))
		var d *InDoubtError
		if !errors.As(err, &d) || !errors.Is(err, storage.ErrAmbiguous) || errors.Is(err, storage.ErrRefused) {
			t.Fatalf("error %v; want in doubt, never refused: the first put may still land", err)
		}
		held := s.Held()
		if len(held) != 1 {
			t.Fatalf("%d held puts, want 1", len(held))
		}
		if _, err := held[0].Release(ctx); err != nil {
			t.Fatalf("release: %v", err)
		}
		unfault()
		if res, err := PutIfAbsent(ctx, s, "k/a", []byte("ours")); err != nil || res.Outcome != PutAlreadyOurs {
			t.Fatalf("settle: %+v, %v; want our bytes there", res, err)
		}
	})
}

// A refusal with no ambiguous put before it is still a refusal (nothing was applied).
func TestPutIfAbsent_RefusedFirst_StaysRefused(t *testing.T) {
	s := faults.Wrap(newStore(t))
	s.Add(faults.Rule{Op: faults.OpPut, KeyPrefix: "k/", Mode: faults.Refuse, Status: 403})
	if _, err := PutIfAbsent(context.Background(), s, "k/a", []byte("ours")); !errors.Is(err, storage.ErrRefused) {
		t.Fatalf("error %v, want refused", err)
	}
}

// The soak's seed 1002188 in one call: a head swap held, its re-issue refused. The publish
// is in doubt, not refused — the held swap lands on release, and the commit it names is
// the branch's head, which a caller that took the refusal as final would have let a
// sweep reclaim.
func TestPublish_SwapHeldThenReissueRefused_InDoubtAndTheHeldSwapLands(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *faults.Store) {
		ctx := context.Background()
		g, _ := mustInitGraph(t, s)
		head := headOf(t, g, "main")
		plan, err := g.PlanAppendOn(ctx, head, spec("main", 1, map[string]ulid.ULID{"orders": versionA}))
		if err != nil {
			t.Fatal(err)
		}
		if err := g.WriteAppend(ctx, plan); err != nil {
			t.Fatal(err)
		}
		unfault := holdThenRefuse(s, format.BranchRefKey(g.Name, head.Native))
		_, err = g.Publish(ctx, plan.Publish)
		if !errors.Is(err, storage.ErrAmbiguous) || errors.Is(err, storage.ErrRefused) {
			t.Fatalf("publish: %v; want in doubt, never refused: the held swap may still land", err)
		}
		if _, err := s.Held()[0].Release(ctx); err != nil {
			t.Fatalf("release the held swap: %v", err)
		}
		unfault()
		if h := headOf(t, g, "main"); h.Commit.ID != plan.Commit.ID {
			t.Fatalf("main's head %s after the release, want the planned %s", h.Commit.ID, plan.Commit.ID)
		}
		if res, err := g.SettlePublish(ctx, plan.Publish); err != nil || res.Outcome != AlreadyPublished {
			t.Fatalf("settle: %+v, %v; want already published", res, err)
		}
	})
}

// A retire whose compare-and-swap is held and whose re-issue is refused is in doubt: the
// held retire lands on release.
func TestRetireRef_HeldThenRefused_InDoubt(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *faults.Store) {
		ctx := context.Background()
		g, _ := mustInitGraph(t, s)
		head := headOf(t, g, "main")
		unfault := holdThenRefuse(s, format.BranchRefKey(g.Name, head.Native))
		_, err := RetireRef(ctx, s, g.Name, head.Native, head.ETag, "op-retire")
		if !errors.Is(err, storage.ErrAmbiguous) || errors.Is(err, storage.ErrRefused) {
			t.Fatalf("retire: %v; want in doubt, never refused", err)
		}
		if _, err := s.Held()[0].Release(ctx); err != nil {
			t.Fatalf("release the held retire: %v", err)
		}
		unfault()
		if res, err := RetireRef(ctx, s, g.Name, head.Native, head.ETag, "op-retire"); err != nil || res.Outcome != PutAlreadyOurs {
			t.Fatalf("settle: %+v, %v; want our retire there", res, err)
		}
	})
}
