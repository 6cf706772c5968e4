package graph

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage/faults"
	"github.com/graftworks/graft/storage/memstore"
)

// treeN returns a distinct tree ULID for i (increasing, like minted ones).
func treeN(i int) ulid.ULID {
	var id ulid.ULID
	id[0] = 1
	id[1] = 0x80
	id[12], id[13], id[14], id[15] = byte(i>>24), byte(i>>16), byte(i>>8), byte(i)
	return id
}

type dag struct {
	t     *testing.T
	g     *Graph
	n     int
	heads map[string]Head
}

func (d *dag) op() string { d.n++; return fmt.Sprintf("op-%d", d.n) }

func (d *dag) at() time.Time { return t0.Add(time.Duration(d.n) * time.Second) }

func (d *dag) head(branch string) Head {
	d.t.Helper()
	h, err := d.g.BranchHead(context.Background(), branch)
	if err != nil {
		d.t.Fatalf("head %s: %v", branch, err)
	}
	return h
}

func (d *dag) commit(branch string, pins map[string]ulid.ULID, merged string) Commit {
	d.t.Helper()
	op := d.op()
	r, err := d.g.Append(context.Background(), CommitSpec{Branch: branch, SetPins: pins, MergedParent: merged, Author: "t", Message: op, Time: d.at(), Op: op})
	if err != nil {
		d.t.Fatalf("commit on %s: %v", branch, err)
	}
	c, err := d.g.Commit(context.Background(), r.Plan.Commit.ID)
	if err != nil {
		d.t.Fatal(err)
	}
	return c
}

func (d *dag) fork(branch string, tree ulid.ULID, from format.CommitID) {
	d.t.Helper()
	op := d.op()
	if _, err := d.g.CreateBranch(context.Background(), ForkSpec{Branch: branch, Tree: tree, Source: from.String(), Author: "t", Message: op, Time: d.at(), Op: op}); err != nil {
		d.t.Fatalf("fork %s: %v", branch, err)
	}
}

// bruteBases computes the merge bases by reading every ancestor of both:
// the common ancestors that are not a proper ancestor of another.
func bruteBases(t *testing.T, g *Graph, a, b Commit, memo map[format.CommitID]Commit) []format.CommitID {
	t.Helper()
	ctx := context.Background()
	get := func(id format.CommitID) Commit {
		if c, ok := memo[id]; ok {
			return c
		}
		c, err := g.Commit(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		memo[id] = c
		return c
	}
	closure := func(start []format.CommitID) map[format.CommitID]bool {
		out := map[format.CommitID]bool{}
		queue := append([]format.CommitID(nil), start...)
		for len(queue) > 0 {
			id := queue[0]
			queue = queue[1:]
			if out[id] {
				continue
			}
			out[id] = true
			queue = append(queue, get(id).Parents...)
		}
		return out
	}
	memo[a.ID], memo[b.ID] = a, b
	aa, ab := closure([]format.CommitID{a.ID}), closure([]format.CommitID{b.ID})
	var common, parents []format.CommitID
	for id := range aa {
		if ab[id] {
			common = append(common, id)
			parents = append(parents, get(id).Parents...)
		}
	}
	below := closure(parents)
	var bases []format.CommitID
	for _, id := range common {
		if !below[id] {
			bases = append(bases, id)
		}
	}
	slices.SortFunc(bases, func(x, y format.CommitID) int { return x.Tree.Compare(y.Tree) })
	return bases
}

// FindBases agrees with a brute-force search on random histories of many
// branches — forks of forks, merges both ways, criss-cross merges — with
// lineages large enough to be chunked.
func TestFindBases_MatchesBruteForce_OnRandomHistories(t *testing.T) {
	ctx := context.Background()
	for seed := uint64(1); seed <= 4; seed++ {
		rng := rand.New(rand.NewPCG(seed, 99))
		s := memstore.New()
		g, _ := mustInitGraph(t, s)
		d := &dag{t: t, g: g}
		branches := []string{"main"}
		next := 0
		for step := 0; step < 330; step++ {
			switch r := rng.IntN(10); {
			case r < 3 || len(branches) < 3:
				from := d.head(branches[rng.IntN(len(branches))]).Commit.ID
				next++
				name := fmt.Sprintf("b%d", next)
				d.fork(name, treeN(next), from)
				branches = append(branches, name)
			case r < 6:
				d.commit(branches[rng.IntN(len(branches))], map[string]ulid.ULID{fmt.Sprintf("t%d", rng.IntN(5)): vid(step)}, "")
			default:
				a, b := branches[rng.IntN(len(branches))], branches[rng.IntN(len(branches))]
				if a == b {
					continue
				}
				src := d.head(a).Commit
				dst := d.head(b).Commit
				if ok, _ := g.IsAncestorOf(ctx, src.ID, dst); ok {
					continue
				}
				d.commit(b, nil, src.ID.String())
			}
		}
		// Merge every branch into main, then a few more random merges: main's
		// lineage is then large enough to be chunked.
		for _, b := range branches[1:] {
			src := d.head(b).Commit
			if ok, _ := g.IsAncestorOf(ctx, src.ID, d.head("main").Commit); !ok {
				d.commit("main", nil, src.ID.String())
			}
		}
		for step := 0; step < 40; step++ {
			a, b := branches[rng.IntN(len(branches))], branches[rng.IntN(len(branches))]
			src := d.head(a).Commit
			if ok, _ := g.IsAncestorOf(ctx, src.ID, d.head(b).Commit); a != b && !ok {
				d.commit(b, nil, src.ID.String())
			}
			d.commit(a, map[string]ulid.ULID{"t0": vid(step)}, "")
		}
		// Enough trees merged into one another that some lineages are chunked.
		chunked := 0
		for _, b := range branches {
			if !d.head(b).Commit.Lineage.IsInline() {
				chunked++
			}
		}
		if chunked == 0 {
			t.Fatalf("seed %d: no chunked lineage among %d branches", seed, len(branches))
		}
		memo := map[format.CommitID]Commit{}
		for pair := 0; pair < 60; pair++ {
			a, b := branches[rng.IntN(len(branches))], branches[rng.IntN(len(branches))]
			ha, hb := d.head(a).Commit, d.head(b).Commit
			got, err := g.FindBases(ctx, ha, hb)
			if err != nil {
				t.Fatalf("seed %d: find bases of %s and %s: %v", seed, a, b, err)
			}
			var gotIDs []format.CommitID
			for _, c := range got.Bases {
				gotIDs = append(gotIDs, c.ID)
			}
			slices.SortFunc(gotIDs, func(x, y format.CommitID) int { return x.Tree.Compare(y.Tree) })
			want := bruteBases(t, g, ha, hb, memo)
			if got.Relation == RelationUpToDate {
				want = []format.CommitID{ha.ID}
			}
			if got.Relation == RelationAdoptable {
				want = []format.CommitID{hb.ID}
			}
			if !slices.Equal(gotIDs, want) {
				t.Fatalf("seed %d: bases of %s and %s (%s) = %v, want %v", seed, a, b, got.Relation, gotIDs, want)
			}
		}
	}
}

func version(n int) ulid.ULID { return vid(1000 + n) }

// putEvents writes version n of table "events": base's entries with put added and del removed.
func putEvents(t *testing.T, g *Graph, n int, base ulid.ULID, put []format.ManifestEntry, del []string) ulid.ULID {
	t.Helper()
	if _, err := g.PutVersion(context.Background(), VersionSpec{Table: "events", VersionID: version(n), Base: base, Put: put,
		Delete: del, Time: t0, Op: fmt.Sprintf("op-v%d", n)}); err != nil {
		t.Fatal(err)
	}
	return version(n)
}

// forkEvents writes version 0 of "events" (objects 0..199), commits it to main with the
// other pins, and forks feature from that commit; it returns version 0.
func forkEvents(t *testing.T, g *Graph, other map[string]ulid.ULID) ulid.ULID {
	t.Helper()
	var base []format.ManifestEntry
	for i := 0; i < 200; i++ {
		base = append(base, objEntry(i))
	}
	v0 := putEvents(t, g, 0, ulid.ULID{}, base, nil)
	pins := map[string]ulid.ULID{"events": v0}
	maps.Copy(pins, other)
	mustAppend(t, g, spec("main", 1, pins))
	fork := headOf(t, g, "main").Commit
	if _, err := g.CreateBranch(context.Background(), ForkSpec{Branch: "feature", Tree: treeFeature, Source: fork.ID.String(),
		Author: "a", Message: "f", Time: t0, Op: "op-f"}); err != nil {
		t.Fatal(err)
	}
	return v0
}

// Both sides append to one table: merged, with the union of the objects;
// a delete on one side of an object the other kept: merged; the same
// object removed on one side and replaced on the other: a conflict naming
// it. The preview (the plan) says what the result holds.
func TestObjectLevelMerge_OnEveryBackend(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *faults.Store) {
		ctx := context.Background()
		g, _ := mustInitGraph(t, s)
		v0 := forkEvents(t, g, map[string]ulid.ULID{"dims": vid(7)})
		// feature appends 300..309 and deletes object 3; main appends
		// 400..404 and keeps 3.
		var fput, mput []format.ManifestEntry
		for i := 300; i < 310; i++ {
			fput = append(fput, objEntry(i))
		}
		for i := 400; i < 405; i++ {
			mput = append(mput, objEntry(i))
		}
		fv := putEvents(t, g, 1, v0, fput, []string{objEntry(3).Name})
		mv := putEvents(t, g, 2, v0, mput, nil)
		mustAppend(t, g, spec("feature", 2, map[string]ulid.ULID{"events": fv}))
		mustAppend(t, g, spec("main", 3, map[string]ulid.ULID{"events": mv}))
		mspec := MergeSpec{NewVersionID: func(table string) ulid.ULID { return version(50) }, Time: t0.Add(time.Hour), Op: "op-merge"}
		res, err := g.Merge(ctx, "feature", "main", mspec, "ana", "merge feature")
		if err != nil {
			t.Fatal(err)
		}
		p := res.Plan
		if p.Relation != RelationDiverged || p.Conflicts != 0 || len(p.Tables) != 1 || p.Tables[0].Action != TableMerged || p.Unchanged != 1 {
			t.Fatalf("plan = %+v", p)
		}
		if l := p.Tables[0]; l.Added != 10 || l.Removed != 1 || l.Replaced != 0 {
			t.Fatalf("preview counts = +%d -%d ~%d, want +10 -1", l.Added, l.Removed, l.Replaced)
		}
		head := headOf(t, g, "main").Commit
		if head.MergedParent() != headOf(t, g, "feature").Commit.ID {
			t.Fatalf("merge commit's merged parent = %v", head.MergedParent())
		}
		merged, err := g.TableAt(ctx, head, "events")
		if err != nil || merged.ID != version(50) || merged.Len() != 200+10+5-1 {
			t.Fatalf("merged table: %+v, %v", merged, err)
		}
		if _, ok, _ := g.Entry(ctx, merged, objEntry(3).Name); ok {
			t.Fatal("object deleted on feature survived the merge")
		}
		for _, i := range []int{0, 300, 309, 400, 404} {
			if _, ok, _ := g.Entry(ctx, merged, objEntry(i).Name); !ok {
				t.Fatalf("object %d missing after the merge", i)
			}
		}
		// Now a real conflict: object 10 removed on feature, replaced on main.
		repl := objEntry(10)
		repl.Size = 999
		fv2 := putEvents(t, g, 3, fv, nil, []string{objEntry(10).Name})
		mv2 := putEvents(t, g, 4, version(50), []format.ManifestEntry{repl}, nil)
		mustAppend(t, g, spec("feature", 4, map[string]ulid.ULID{"events": fv2}))
		mustAppend(t, g, spec("main", 5, map[string]ulid.ULID{"events": mv2}))
		before := headOf(t, g, "main").Commit.ID
		res, err = g.Merge(ctx, "feature", "main", mspec, "ana", "merge again")
		if err != nil {
			t.Fatal(err)
		}
		if res.Plan.Conflicts != 1 || res.Plan.Writes() {
			t.Fatalf("plan = %+v", res.Plan)
		}
		l := res.Plan.Tables[0]
		if l.Action != TableConflict || l.ConflictCount != 1 || len(l.Conflicts) != 1 || l.Conflicts[0].Name != objEntry(10).Name ||
			l.Conflicts[0].Source != nil || l.Conflicts[0].Target == nil || l.Conflicts[0].Target.Size != 999 {
			t.Fatalf("conflict = %+v", l)
		}
		if headOf(t, g, "main").Commit.ID != before {
			t.Fatal("a conflicting merge wrote a commit")
		}
	})
}

// 10,000 merges into one main: the 10,000th costs what the 10th did. The
// equivalent that runs in the suite: main's lineage already names 10,000
// merged trees (built directly, as 10,000 merges would leave it), and one
// more branch is forked, written and merged; its merge costs the same
// requests as the same merge into a main with 10 merged trees, ± the extra
// tree level, and the same as with 100,000 trees ± 1 level more.
func TestMergeCost_FlatIn10kAnd100kMergedTrees(t *testing.T) {
	type cost struct{ gets, puts, lists, reads int }
	measure := func(trees int) cost {
		ctx := context.Background()
		s := faults.Wrap(memstore.New())
		g, init := mustInitGraph(t, s)
		// A main whose lineage holds `trees` merged branches.
		var lin []format.LineageEntry
		for i := 0; i < trees; i++ {
			lin = append(lin, format.LineageEntry{Tree: treeN(i + 1), Seq: 3, Digest: format.Digest{byte(i), byte(i >> 8), 1}})
		}
		ref, chunks, err := buildMap(ctx, g.lineage, lin)
		if err != nil {
			t.Fatal(err)
		}
		(&Graph{S: s}).PutChunks(ctx, chunks)
		c, body, _ := format.SealCommit(format.Commit{ID: format.CommitID{Tree: treeMain, Seq: 1}, Branch: "main", Parents: []format.CommitID{init.Root.ID},
			Lineage: ref, Author: "t", Message: "after many merges", Time: t0, Op: "op-many"})
		putNew(ctx, s, format.CommitIDKey("sales", c.ID), body, true)
		h := headOf(t, g, "main")
		refBody, _ := format.EncodeBranchRef(format.BranchRef{State: format.RefLive, Branch: "main", Native: h.Native, Tree: treeMain, Head: c.ID, Op: "op-many"})
		if _, err := g.Publish(ctx, Publish{Native: h.Native, IfMatch: h.ETag, Body: refBody, Commit: c.ID}); err != nil {
			t.Fatal(err)
		}
		// One more branch: fork, write, merge back.
		d := &dag{t: t, g: g}
		d.fork("x", treeN(trees+10), c.ID)
		for i, table := range []string{"t", "u"} {
			if _, err := g.PutVersion(ctx, VersionSpec{Table: table, VersionID: vid(i + 1), Put: []format.ManifestEntry{objEntry(i)}, Time: t0, Op: "op-v"}); err != nil {
				t.Fatal(err)
			}
		}
		d.commit("x", map[string]ulid.ULID{"t": vid(1)}, "")
		d.commit("main", map[string]ulid.ULID{"u": vid(2)}, "")
		g2, _ := Open(s, "sales")
		s.ResetCounts()
		res, err := g2.Merge(ctx, "x", "main", MergeSpec{Time: t0, Op: "op-merge"}, "t", "merge x")
		if err != nil || res.Plan.Conflicts != 0 || res.Append.Publish.Outcome != Published {
			t.Fatalf("merge: %+v, %v", res.Plan, err)
		}
		if len(res.Search.Bases) != 1 {
			t.Fatalf("bases: %+v", res.Search)
		}
		return cost{gets: s.Count(faults.OpGet).Attempted, puts: s.Count(faults.OpPut).Attempted, lists: s.Count(faults.OpList).Attempted, reads: res.Search.Reads}
	}
	c10, c10k, c100k := measure(10), measure(10000), measure(100000)
	t.Logf("merge cost with 10 / 10k / 100k merged trees: %+v / %+v / %+v", c10, c10k, c100k)
	if c10k.reads != c10.reads || c100k.reads != c10.reads {
		t.Fatalf("merge-base reads grow: %d, %d, %d", c10.reads, c10k.reads, c100k.reads)
	}
	if c10k.gets > c10.gets+8 || c100k.gets > c10k.gets+4 || c100k.puts > c10k.puts+2 || c10k.lists != c10.lists {
		t.Fatalf("merge requests grow with merged trees: %+v, %+v, %+v", c10, c10k, c100k)
	}
}

// A branch forked long ago from a main with a long history finds its base
// in a bounded number of reads: the fork it carries.
func TestFindBases_BranchForkedLongAgo_ReadsAFew(t *testing.T) {
	ctx := context.Background()
	s := faults.Wrap(memstore.New())
	g, _ := mustInitGraph(t, s)
	d := &dag{t: t, g: g}
	d.commit("main", nil, "")
	fork := d.head("main").Commit.ID
	d.fork("old", treeFeature, fork)
	d.commit("old", map[string]ulid.ULID{"a": vid(1)}, "")
	// main moves on with 300 commits and 100 merged branches.
	for i := 0; i < 100; i++ {
		d.fork(fmt.Sprintf("b%d", i), treeN(i+1), d.head("main").Commit.ID)
		d.commit(fmt.Sprintf("b%d", i), map[string]ulid.ULID{"b": vid(i)}, "")
		d.commit("main", nil, d.head(fmt.Sprintf("b%d", i)).Commit.ID.String())
		d.commit("main", nil, "")
		d.commit("main", nil, "")
	}
	src, dst := d.head("old").Commit, d.head("main").Commit
	res, err := g.FindBases(ctx, src, dst)
	if err != nil || len(res.Bases) != 1 || res.Bases[0].ID != fork {
		t.Fatalf("bases = %+v, %v; want the fork %v", res.Bases, err, fork)
	}
	if res.Reads > 3 {
		t.Fatalf("%d commits read to find a base %d commits back", res.Reads, dst.ID.Seq-fork.Seq)
	}
}

// A graph of 10,000 tables creates a branch and merges it with the
// requests a graph of 4 tables needs, ± the pins tree's levels.
func TestCreateAndMergeCost_10kTablesVs4(t *testing.T) {
	type cost struct{ create, merge int }
	measure := func(tables int) cost {
		ctx := context.Background()
		s := faults.Wrap(memstore.New())
		g, _ := mustInitGraph(t, s)
		pins := map[string]ulid.ULID{}
		for i := 0; i < tables; i++ {
			pins[fmt.Sprintf("table_%05d", i)] = vid(1)
		}
		for _, n := range []int{1, 2, 3} {
			if _, err := g.PutVersion(ctx, VersionSpec{Table: "table_00001", VersionID: vid(n), Put: []format.ManifestEntry{objEntry(n)}, Time: t0, Op: "op-v"}); err != nil {
				t.Fatal(err)
			}
			if _, err := g.PutVersion(ctx, VersionSpec{Table: "table_00002", VersionID: vid(n), Put: []format.ManifestEntry{objEntry(n)}, Time: t0, Op: "op-v"}); err != nil {
				t.Fatal(err)
			}
		}
		mustAppend(t, g, spec("main", 1, pins))
		src := headOf(t, g, "main").Commit
		g2, _ := Open(s, "sales")
		s.ResetCounts()
		if _, err := g2.CreateBranch(ctx, ForkSpec{Branch: "feature", Tree: treeFeature, Source: src.ID.String(), Author: "a", Message: "f", Time: t0, Op: "op-f"}); err != nil {
			t.Fatal(err)
		}
		c := cost{create: len(s.Requests())}
		mustAppend(t, g, spec("feature", 2, map[string]ulid.ULID{"table_00001": vid(2)}))
		mustAppend(t, g, spec("main", 3, map[string]ulid.ULID{"table_00002": vid(3)}))
		g3, _ := Open(s, "sales")
		s.ResetCounts()
		res, err := g3.Merge(ctx, "feature", "main", MergeSpec{Time: t0, Op: "op-m"}, "a", "merge")
		if err != nil || res.Plan.Conflicts != 0 || len(res.Plan.Tables) != 2 || res.Plan.Tables[0].Action != TableAdopt || res.Plan.Tables[1].Action != TableKeep {
			t.Fatalf("merge: %+v, %v", res.Plan, err)
		}
		if res.Plan.Unchanged != int64(tables-2) {
			t.Fatalf("unchanged = %d, want %d", res.Plan.Unchanged, tables-2)
		}
		c.merge = len(s.Requests())
		return c
	}
	small, large := measure(4), measure(10000)
	t.Logf("requests: 4 tables %+v; 10,000 tables %+v", small, large)
	if large.create != small.create {
		t.Fatalf("create: %d requests at 4 tables, %d at 10,000", small.create, large.create)
	}
	if large.merge > small.merge+8 {
		t.Fatalf("merge: %d requests at 4 tables, %d at 10,000", small.merge, large.merge)
	}
}

// A version written on another records what changed from it. A merge adopting it over
// that version reports the counts from the record, without reading the version it
// replaces; the counts are the diff's, an entry put again unchanged not counted.
func TestAdoptedTable_CountsFromTheVersionsRecord_SameAsTheDiff(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *faults.Store) {
		ctx := context.Background()
		g, _ := mustInitGraph(t, s)
		v0 := forkEvents(t, g, nil)
		changed := objEntry(5)
		changed.Size++
		edits := []format.ManifestEntry{changed, objEntry(7)} // 7 put again as it is
		for i := 300; i < 310; i++ {
			edits = append(edits, objEntry(i))
		}
		fv := putEvents(t, g, 1, v0, edits, []string{objEntry(3).Name})
		rec, err := g.Version(ctx, "events", fv)
		if err != nil || rec.Base != v0 || rec.Added != 10 || rec.Removed != 1 || rec.Replaced != 1 {
			t.Fatalf("the version's record: %+v, %v; want base %s, +10 -1 ~1", rec, err, v0)
		}
		diff, err := g.diffVersions(ctx, "events", v0, fv)
		if err != nil || len(diff) != 12 {
			t.Fatalf("diff: %d changes, %v; want 12", len(diff), err)
		}
		mustAppend(t, g, spec("feature", 2, map[string]ulid.ULID{"events": fv}))

		g2, _ := Open(s, "sales")
		s.ResetCounts()
		res, err := g2.Merge(ctx, "feature", "main", MergeSpec{Time: t0, Op: "op-merge"}, "a", "merge feature")
		if err != nil || len(res.Plan.Tables) != 1 {
			t.Fatalf("merge: %+v, %v", res.Plan, err)
		}
		if l := res.Plan.Tables[0]; l.Action != TableAdopt || l.Added != 10 || l.Removed != 1 || l.Replaced != 1 {
			t.Fatalf("adopted table %+v; want +10 -1 ~1", l)
		}
		if n := s.CountMatching(faults.Rule{Op: faults.OpGet, KeyPrefix: format.TableVersionKey("sales", "events", v0)}).Attempted; n != 0 {
			t.Fatalf("the merge read the replaced version %d times; the adopted one's record says what changed", n)
		}
	})
}

// pinOf returns c's pin of table, with the change it records.
func pinOf(t *testing.T, g *Graph, c Commit, table string) format.PinEntry {
	t.Helper()
	var pin format.PinEntry
	if err := g.EachPin(context.Background(), c, func(p format.PinEntry) error {
		if p.Table == table {
			pin = p
		}
		return nil
	}); err != nil || pin.Table == "" {
		t.Fatalf("pin of %s at %s: %+v, %v", table, c.ID, pin, err)
	}
	return pin
}

// A commit that pins an edit records, beside the pin, what the edit changed from the
// version it was written on. A merge adopting that version into a branch still on it
// counts from the pin and reads neither version; a three-way merge's commit pins the
// version it adopts with the counts it made, so merging onwards reads none either.
func TestAdoptedTable_CountsFromThePin_NeitherVersionRead_AndTheMergeCommitKeepsThem(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *faults.Store) {
		ctx := context.Background()
		g, _ := mustInitGraph(t, s)
		other := func(n int) ulid.ULID {
			if _, err := g.PutVersion(ctx, VersionSpec{Table: "other", VersionID: vid(n), Put: []format.ManifestEntry{objEntry(n)},
				Time: t0, Op: fmt.Sprintf("op-o%d", n)}); err != nil {
				t.Fatal(err)
			}
			return vid(n)
		}
		v0 := forkEvents(t, g, map[string]ulid.ULID{"other": other(7)})
		changed := objEntry(5)
		changed.Size++
		edits := []format.ManifestEntry{changed}
		for i := 300; i < 310; i++ {
			edits = append(edits, objEntry(i))
		}
		fv := putEvents(t, g, 1, v0, edits, []string{objEntry(3).Name})
		rec, err := g.Version(ctx, "events", fv)
		if err != nil {
			t.Fatal(err)
		}
		c, ok := ChangeOf(rec)
		if !ok || c != (Change{Base: v0, Added: 10, Removed: 1, Replaced: 1}) {
			t.Fatalf("the version's change: %+v, %v", c, ok)
		}
		sp := spec("feature", 2, map[string]ulid.ULID{"events": fv})
		sp.Changes = map[string]Change{"events": c}
		mustAppend(t, g, sp)
		if p := pinOf(t, g, headOf(t, g, "feature").Commit, "events"); p != (format.PinEntry{Table: "events", Version: fv}).Change(v0, 10, 1, 1) {
			t.Fatalf("feature's pin %+v does not carry the edit's change", p)
		}
		mustAppend(t, g, spec("main", 3, map[string]ulid.ULID{"other": other(8)})) // a three-way merge

		versionGets := func() int {
			n := 0
			for _, v := range []ulid.ULID{v0, fv} {
				n += s.CountMatching(faults.Rule{Op: faults.OpGet, KeyPrefix: format.TableVersionKey("sales", "events", v)}).Attempted
			}
			return n
		}
		s.ResetCounts()
		g2, _ := Open(s, "sales")
		res, err := g2.Merge(ctx, "feature", "main", MergeSpec{Time: t0, Op: "op-merge"}, "a", "merge feature")
		if err != nil || res.Plan.Relation != RelationDiverged || len(res.Plan.Tables) != 2 {
			t.Fatalf("merge: %+v, %v", res.Plan, err)
		}
		if l := res.Plan.Tables[0]; l.Table != "events" || l.Action != TableAdopt || l.Added != 10 || l.Removed != 1 || l.Replaced != 1 {
			t.Fatalf("adopted table %+v; want +10 -1 ~1", l)
		}
		if n := versionGets(); n != 0 {
			t.Fatalf("the merge read a version of events %d times; the pin says what changed", n)
		}
		merged := headOf(t, g, "main").Commit
		if p := pinOf(t, g, merged, "events"); p.Base != v0 || p.Added != 10 || p.Removed != 1 || p.Replaced != 1 {
			t.Fatalf("the merge commit's pin %+v does not carry the adopted change", p)
		}

		// main, merged, into a branch forked before the merge: adopts events over v0 again.
		if _, err := g.CreateBranch(ctx, ForkSpec{Branch: "late", Tree: vid(900), Source: res.Search.Bases[0].ID.String(),
			Author: "a", Message: "f", Time: t0, Op: "op-late"}); err != nil {
			t.Fatal(err)
		}
		s.ResetCounts()
		res, err = g2.Merge(ctx, "main", "late", MergeSpec{Time: t0, Op: "op-merge-2"}, "a", "merge main")
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range res.Plan.Tables {
			if l.Table == "events" && (l.Action != TableAdopt || l.Added != 10 || l.Removed != 1 || l.Replaced != 1) {
				t.Fatalf("adopted again: %+v; want +10 -1 ~1", l)
			}
		}
		if n := versionGets(); n != 0 {
			t.Fatalf("merging onwards read a version of events %d times", n)
		}
	})
}

// A commit's change must name a table it sets, from another version, with counts of
// zero or more.
func TestCommitSpec_ChangeOfATableNotSet_OrFromItself_IsInvalid(t *testing.T) {
	for name, c := range map[string]map[string]Change{
		"not set":        {"orders": {Base: vid(1), Added: 1}},
		"from itself":    {"events": {Base: vid(2), Added: 1}},
		"zero base":      {"events": {Added: 1}},
		"negative count": {"events": {Base: vid(1), Removed: -1}},
	} {
		sp := spec("main", 1, map[string]ulid.ULID{"events": vid(2)})
		sp.Changes = c
		if err := sp.check(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}
