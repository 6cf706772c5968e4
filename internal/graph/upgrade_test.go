package graph

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/faults"
)

// v1History builds a format-1 graph with the format-1 API: main with a
// table, a branch forked from it with its own table version, and a tag.
func v1History(t *testing.T, s storage.Store) (mainHead, branchHead format.Commit) {
	t.Helper()
	ctx := context.Background()
	mustInit(t, s)
	if _, err := WriteTableVersion(ctx, s, WriteTableParams{Graph: "sales", Table: "orders", VersionID: versionA,
		Objects: []ObjectInput{{ID: objectA, Body: []byte("a")}, {ID: objectB, Body: []byte("bb")}}, Op: "op-w1", Time: t0}); err != nil {
		t.Fatal(err)
	}
	c1, err := AppendCommit(ctx, s, AppendParams{Graph: "sales", Tree: treeMain, Branch: "main", ExpectedHead: treeMain.String() + "-0",
		Pins: map[string]ulid.ULID{"orders": versionA}, Author: "ana", Message: "v1 write", Time: t0, Op: "op-c1"})
	if err != nil {
		t.Fatal(err)
	}
	fork, err := ForkCommit(ctx, s, ForkParams{Graph: "sales", Tree: treeFeature, Branch: "feature", Source: c1.ID.String(), Author: "ana", Message: "fork", Time: t0, Op: "op-fork"})
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := format.EncodeBranchRef(format.BranchRef{State: format.RefLive, Branch: "feature", Native: format.NativeName("feature", treeFeature), Tree: treeFeature, Op: "op-fork"})
	if _, err := PutIfAbsent(ctx, s, format.BranchRefKey("sales", format.NativeName("feature", treeFeature)), ref); err != nil {
		t.Fatal(err)
	}
	if _, err := WriteTableVersion(ctx, s, WriteTableParams{Graph: "sales", Table: "orders", VersionID: versionB,
		Objects: []ObjectInput{{ID: objectA, Body: []byte("a")}, {ID: objectC, Body: []byte("ccc")}}, Op: "op-w2", Time: t0}); err != nil {
		t.Fatal(err)
	}
	b1, err := AppendCommit(ctx, s, AppendParams{Graph: "sales", Tree: treeFeature, Branch: "feature", ExpectedHead: fork.ID.String(),
		Pins: map[string]ulid.ULID{"orders": versionB}, Author: "ana", Message: "v1 branch write", Time: t0, Op: "op-b1"})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := TagBytes(TagParams{Graph: "sales", Name: "v1", Commit: c1.ID.String(), Op: "op-tag", Time: t0})
	if _, err := PutTag(ctx, s, "sales", body); err != nil {
		t.Fatal(err)
	}
	return c1, b1
}

// A format-1 graph upgraded in place: the graph record and live refs become
// format 2, nothing else is rewritten, and every format-2 operation works on
// the old history: appends, a merge of a branch forked in format 1, reading
// format-1 tables, forking from a format-1 commit.
func TestUpgrade_V1Graph_ThenEveryV2Operation_OnEveryBackend(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *faults.Store) {
		ctx := context.Background()
		mainHead, branchHead := v1History(t, s)
		before := dump(t, s)
		res, err := Upgrade(ctx, s, UpgradeParams{Graph: "sales", Op: "op-upgrade"})
		if err != nil || !res.GraphRecord || len(res.Refs) != 2 {
			t.Fatalf("upgrade = %+v, %v", res, err)
		}
		after := dump(t, s)
		changed := 0
		for k, v := range before {
			if after[k] != v {
				changed++
				if k != format.GraphKey("sales") && !isRefKey(k) {
					t.Fatalf("upgrade rewrote %s", k)
				}
			}
		}
		if changed != 3 || len(after) != len(before) {
			t.Fatalf("upgrade changed %d objects and left %d (had %d)", changed, len(after), len(before))
		}
		if rec, v, err := ReadGraphAny(ctx, s, "sales"); err != nil || v != 2 || rec.UpgradeOp != "op-upgrade" {
			t.Fatalf("graph record after upgrade: %+v v%d, %v", rec, v, err)
		}
		// Idempotent.
		again, err := Upgrade(ctx, s, UpgradeParams{Graph: "sales", Op: "op-upgrade"})
		if err != nil || len(again.Refs) != 2 {
			t.Fatalf("upgrade again = %+v, %v", again, err)
		}
		if d := dump(t, s); len(d) != len(after) || d[format.GraphKey("sales")] != after[format.GraphKey("sales")] {
			t.Fatal("a second upgrade wrote")
		}
		g, _ := Open(s, "sales")
		h := headOf(t, g, "main")
		if h.RefFormat != 2 || h.Commit.ID != mainHead.ID || h.Commit.Format != 1 {
			t.Fatalf("main after upgrade: %+v", h)
		}
		// A format-1 table reads as entries named by object ULID.
		v, err := g.TableAt(ctx, h.Commit, "orders")
		if err != nil || v.Format != 1 || v.Len() != 2 || v.Bytes != 3 {
			t.Fatalf("v1 table: %+v, %v", v, err)
		}
		// Append a format-2 commit and a format-2 version on top of the old
		// history.
		p, err := g.PutVersion(ctx, VersionSpec{Table: "orders", VersionID: vid(9), Base: versionA,
			Put: []format.ManifestEntry{objEntry(1)}, Time: t0, Op: "op-w3"})
		if err != nil || p.Version.Entries.Len() != 3 {
			t.Fatalf("v2 version on a v1 base: %+v, %v", p.Version, err)
		}
		a := mustAppend(t, g, spec("main", 5, map[string]ulid.ULID{"orders": vid(9)}))
		if a.Commit().Parents[0] != mainHead.ID || a.Commit().ID.Seq != mainHead.ID.Seq+1 || a.Commit().Fork.IsZero() == false {
			t.Fatalf("first v2 commit: %+v", a.Commit())
		}
		// Merge the format-1 branch: the base is the format-1 commit it
		// forked from.
		res2, err := g.Merge(ctx, "feature", "main", MergeSpecV2{NewVersionID: func(string) ulid.ULID { return vid(10) }, Time: t0, Op: "op-merge"}, "ana", "merge feature")
		if err != nil {
			t.Fatal(err)
		}
		if len(res2.Search.Bases) != 1 || res2.Search.Bases[0].ID != mainHead.ID || res2.Plan.Conflicts != 0 || res2.Plan.Tables[0].Action != TableMerged {
			t.Fatalf("merge of a format-1 branch: bases %+v plan %+v", res2.Search.Bases, res2.Plan.Tables)
		}
		merged, _ := g.TableAt(ctx, headOf(t, g, "main").Commit, "orders")
		var names []string
		g.EachEntry(ctx, merged, func(e format.ManifestEntry) error { names = append(names, e.Name); return nil })
		// feature's version replaced B by C; main kept B and added one: B
		// goes (only feature touched it), C and main's new entry stay.
		if len(names) != 3 || names[1] != objectA.String() || names[2] != objectC.String() || names[0] != objEntry(1).Name {
			t.Fatalf("merged entries %v, want main's new one, A and C", names)
		}
		// Fork from a format-1 commit named by the format-1 tag.
		tag, _ := ReadTag(ctx, s, "sales", "v1")
		if _, err := g.CreateBranch(ctx, ForkSpec{Branch: "from-tag", Tree: treeMain2, Source: tag.Tag.Commit.String(), Author: "a", Message: "m", Time: t0, Op: "op-f2"}); err != nil {
			t.Fatal(err)
		}
		_ = branchHead
	})
}

func isRefKey(k string) bool {
	return len(k) > len("sales/refs/branches/") && k[:len("sales/refs/branches/")] == "sales/refs/branches/"
}

// An upgrade cut short after the graph record resumes; a format-1 append
// that lands during the upgrade is caught up with.
func TestUpgrade_Interrupted_Resumes_AndCatchesUpALateV1Append(t *testing.T) {
	ctx := context.Background()
	base := newStore(t)
	mainHead, _ := v1History(t, base)
	s := faults.Wrap(base)
	s.Add(faults.Rule{Name: "cut", Op: faults.OpPut, KeyPrefix: "sales/refs/", Mode: faults.Refuse, Status: 503})
	if _, err := Upgrade(ctx, s, UpgradeParams{Graph: "sales", Op: "op-up"}); err == nil {
		t.Fatal("upgrade with refs refused succeeded")
	}
	g, _ := Open(base, "sales")
	if rec, _ := ReadGraph(ctx, base, "sales"); rec.Name != "" {
		t.Fatal("format-1 reader still reads the upgraded graph record")
	}
	// A late format-1 append on main (a straggler the precondition should
	// have drained).
	late, err := AppendCommit(ctx, base, AppendParams{Graph: "sales", Tree: treeMain, Branch: "main", ExpectedHead: mainHead.ID.String(),
		Pins: map[string]ulid.ULID{"orders": versionA}, Author: "ana", Message: "late", Time: t0.Add(time.Minute), Op: "op-late"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := Upgrade(ctx, base, UpgradeParams{Graph: "sales", Op: "op-up"})
	if err != nil || len(res.Refs) != 2 {
		t.Fatalf("resumed upgrade = %+v, %v", res, err)
	}
	if h := headOf(t, g, "main"); h.Commit.ID != late.ID || h.RefFormat != 2 {
		t.Fatalf("main head after resume = %v", h.Commit.ID)
	}
	// A late append between the swap and... caught up by catchUp.
	late2, err := AppendCommit(ctx, base, AppendParams{Graph: "sales", Tree: treeMain, Branch: "main", ExpectedHead: late.ID.String(),
		Pins: map[string]ulid.ULID{"orders": versionA}, Author: "ana", Message: "later", Time: t0.Add(2 * time.Minute), Op: "op-late2"})
	if err != nil {
		t.Fatal(err)
	}
	res, err = Upgrade(ctx, base, UpgradeParams{Graph: "sales", Op: "op-up"})
	if err != nil || res.CaughtUp != 1 {
		t.Fatalf("upgrade again = %+v, %v", res, err)
	}
	if h := headOf(t, g, "main"); h.Commit.ID != late2.ID {
		t.Fatalf("main head = %v, want %v", h.Commit.ID, late2.ID)
	}
	// Once a format-2 commit is the head, the upgrade never moves the ref.
	mustAppend(t, g, spec("main", 9, nil))
	v2head := headOf(t, g, "main").Commit.ID
	if _, err := Upgrade(ctx, base, UpgradeParams{Graph: "sales", Op: "op-up"}); err != nil {
		t.Fatal(err)
	}
	if h := headOf(t, g, "main"); h.Commit.ID != v2head {
		t.Fatal("upgrade moved a format-2 head")
	}
	if _, err := Upgrade(ctx, base, UpgradeParams{Graph: "nope", Op: "op-up"}); !errors.Is(err, ErrGraphNotFound) {
		t.Fatalf("upgrade of a missing graph: %v", err)
	}
}

// A format-1 tree whose seq-0 commit cleanup reclaimed still takes format-2
// appends after the upgrade (its fork is then unknown, which only means the
// merge-base search has no fork to probe), and merges still find their base.
func TestUpgrade_TreeWithoutItsForkCommit_AppendsAndMerges(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	mainHead, _ := v1History(t, s)
	if err := s.Delete(ctx, format.CommitKey("sales", treeFeature, 0)); err != nil {
		t.Fatal(err)
	}
	if _, err := Upgrade(ctx, s, UpgradeParams{Graph: "sales", Op: "op-up"}); err != nil {
		t.Fatal(err)
	}
	g, _ := Open(s, "sales")
	a := mustAppend(t, g, spec("feature", 1, map[string]ulid.ULID{"other": versionA}))
	if !a.Commit().Fork.IsZero() {
		t.Fatalf("fork = %v, want unknown", a.Commit().Fork)
	}
	search, err := g.FindBases(ctx, headOf(t, g, "feature").Commit, headOf(t, g, "main").Commit)
	if err != nil || search.Relation != RelationAdoptable && (len(search.Bases) != 1 || search.Bases[0].ID != mainHead.ID) {
		t.Fatalf("bases = %+v, %v", search, err)
	}
}
