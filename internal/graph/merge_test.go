package graph

import (
	"context"
	"errors"
	"maps"
	"sync"
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/internal/format"
)

// history builds commits in memory, with lineage computed as the format
// computes it, and serves them to FindMergeBases through a counting reader.
type history struct {
	t       *testing.T
	mu      sync.Mutex
	commits map[format.CommitID]format.Commit
	reads   int
}

func newHistory(t *testing.T) *history {
	return &history{t: t, commits: map[format.CommitID]format.Commit{}}
}

var (
	treeS = ulid.MustParse("01J0000000000000000000SRC1")
	treeT = ulid.MustParse("01J0000000000000000000TGT1")
	treeU = ulid.MustParse("01J0000000000000000000VVV1")
)

func (h *history) add(c format.Commit) format.Commit {
	h.t.Helper()
	c.Branch, c.Author, c.Time, c.Op = "b", "test", t0, "op"
	if err := c.Validate(); err != nil {
		h.t.Fatalf("commit %s: %v", c.ID, err)
	}
	h.commits[c.ID] = c
	return c
}

// root is main's first commit.
func (h *history) root(pins map[string]ulid.ULID) format.Commit {
	return h.add(format.Commit{ID: format.CommitID{Tree: treeMain}, Pins: pins, Lineage: map[ulid.ULID]int64{}})
}

// fork starts tree with a fork commit of parent.
func (h *history) fork(tree ulid.ULID, parent format.Commit) format.Commit {
	return h.add(format.Commit{ID: format.CommitID{Tree: tree}, Parents: []format.CommitID{parent.ID},
		Pins: maps.Clone(parent.Pins), Lineage: format.Lineage(tree, parent)})
}

// write appends a commit to head's tree that sets table to version v.
func (h *history) write(head format.Commit, table string, v ulid.ULID) format.Commit {
	pins := maps.Clone(head.Pins)
	pins[table] = v
	return h.add(format.Commit{ID: format.CommitID{Tree: head.ID.Tree, Seq: head.ID.Seq + 1}, Parents: []format.CommitID{head.ID},
		Pins: pins, Lineage: format.Lineage(head.ID.Tree, head)})
}

// merge appends to target a merge of source with the plan's pins.
func (h *history) merge(source, target format.Commit) format.Commit {
	h.t.Helper()
	bases, err := FindMergeBases(context.Background(), source, target, h.reader())
	if err != nil {
		h.t.Fatalf("merge bases: %v", err)
	}
	plan := PlanMerge(source, target, bases)
	if plan.Conflicts > 0 {
		h.t.Fatalf("merge of %s into %s conflicts: %+v", source.ID, target.ID, plan.Tables)
	}
	return h.add(format.Commit{ID: format.CommitID{Tree: target.ID.Tree, Seq: target.ID.Seq + 1},
		Parents: []format.CommitID{target.ID, source.ID}, Pins: plan.Pins, Lineage: format.Lineage(target.ID.Tree, target, source)})
}

func (h *history) reader() CommitReader {
	return func(_ context.Context, id format.CommitID) (format.Commit, error) {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.reads++
		c, ok := h.commits[id]
		if !ok {
			return format.Commit{}, ErrCommitNotFound
		}
		return c, nil
	}
}

func (h *history) bases(source, target format.Commit) MergeBases {
	h.t.Helper()
	h.reads = 0
	res, err := FindMergeBases(context.Background(), source, target, h.reader())
	if err != nil {
		h.t.Fatalf("merge bases of %s and %s: %v", source.ID, target.ID, err)
	}
	if res.Reads != h.reads {
		h.t.Fatalf("reported %d reads, made %d", res.Reads, h.reads)
	}
	return res
}

func wantBases(t *testing.T, got MergeBases, rel Relation, reads int, want ...format.Commit) {
	t.Helper()
	if got.Relation != rel || got.Reads != reads || len(got.Bases) != len(want) {
		t.Fatalf("got %s with %d bases after %d reads, want %s with %d after %d", got.Relation, len(got.Bases), got.Reads, rel, len(want), reads)
	}
	for i := range want {
		if got.Bases[i].ID != want[i].ID {
			t.Fatalf("base %d is %s, want %s", i, got.Bases[i].ID, want[i].ID)
		}
	}
}

func v(n byte) ulid.ULID {
	var id ulid.ULID
	id[0], id[15] = 1, n
	return id
}

// grow appends n commits that change nothing but history length.
func (h *history) grow(head format.Commit, n int) format.Commit {
	for range n {
		head = h.write(head, "noise", v(byte(head.ID.Seq%200)+50))
	}
	return head
}

func TestFindMergeBases_SourceForkedFromTarget_BaseIsForkPointWithOneRead(t *testing.T) {
	for _, depth := range []int{0, 64} {
		h := newHistory(t)
		main := h.grow(h.root(map[string]ulid.ULID{"a": v(1)}), depth)
		forkPoint := main
		feat := h.write(h.fork(treeS, main), "a", v(2))
		main = h.grow(h.write(main, "b", v(3)), depth)
		wantBases(t, h.bases(h.grow(feat, depth), main), RelationDiverged, 1, forkPoint)
	}
}

func TestFindMergeBases_TargetForkedFromSource_BaseIsForkPoint(t *testing.T) {
	h := newHistory(t)
	main := h.root(map[string]ulid.ULID{"a": v(1)})
	forkPoint := main
	feat := h.write(h.fork(treeT, main), "a", v(2))
	main = h.write(main, "b", v(3))
	wantBases(t, h.bases(main, feat), RelationDiverged, 1, forkPoint)
}

func TestFindMergeBases_BothForkedFromMain_BaseIsTheEarlierForkPoint(t *testing.T) {
	h := newHistory(t)
	main := h.root(map[string]ulid.ULID{"a": v(1)})
	s := h.write(h.fork(treeS, main), "a", v(2))
	earlier := main
	main = h.write(main, "b", v(3))
	tg := h.write(h.fork(treeT, main), "c", v(4))
	wantBases(t, h.bases(s, tg), RelationDiverged, 1, earlier)
	wantBases(t, h.bases(tg, s), RelationDiverged, 1, earlier)
}

func TestFindMergeBases_RepeatedMerges_BaseIsTheLastMergedCommit(t *testing.T) {
	h := newHistory(t)
	main := h.root(map[string]ulid.ULID{"a": v(1)})
	feat := h.write(h.fork(treeS, main), "a", v(2))
	main = h.write(main, "b", v(3))
	main = h.merge(feat, main) // feature into main
	merged := feat
	feat = h.write(feat, "c", v(4))
	main = h.write(main, "b", v(5))
	// Both heads' own trees hold a candidate: the two are read together.
	wantBases(t, h.bases(feat, main), RelationDiverged, 2, merged)

	// Main merged into the feature in turn: the base is that main commit.
	feat = h.merge(main, feat)
	synced := main
	main = h.write(main, "d", v(6))
	feat = h.write(feat, "e", v(7))
	wantBases(t, h.bases(feat, main), RelationDiverged, 2, synced)
	wantBases(t, h.bases(main, feat), RelationDiverged, 2, synced)
	plan := PlanMerge(feat, main, h.bases(feat, main))
	if plan.Conflicts != 0 || plan.Adopted != 2 || plan.Kept != 1 || plan.Pins["c"] != v(4) || plan.Pins["e"] != v(7) || plan.Pins["d"] != v(6) {
		t.Fatalf("plan %+v", plan)
	}
}

func TestFindMergeBases_AncestorHeads_UpToDateOrAdoptableWithoutReads(t *testing.T) {
	h := newHistory(t)
	main := h.root(map[string]ulid.ULID{"a": v(1)})
	feat := h.write(h.fork(treeS, main), "a", v(2))
	wantBases(t, h.bases(main, feat), RelationUpToDate, 0, main)
	wantBases(t, h.bases(feat, main), RelationAdoptable, 0, main)
	wantBases(t, h.bases(main, main), RelationUpToDate, 0, main)
	plan := PlanMerge(feat, main, h.bases(feat, main))
	if plan.Adopted != 1 || plan.Pins["a"] != v(2) || !plan.Writes() {
		t.Fatalf("adoption plan %+v", plan)
	}
	if up := PlanMerge(main, feat, h.bases(main, feat)); up.Writes() || up.Kept != 1 {
		t.Fatalf("up-to-date plan %+v, want nothing to write", up)
	}
}

func TestFindMergeBases_CrissCross_TwoBasesAndDisagreementIsAConflict(t *testing.T) {
	h := newHistory(t)
	main := h.root(map[string]ulid.ULID{"a": v(1)})
	s := h.fork(treeS, main)
	tg := h.fork(treeT, main)
	s = h.write(s, "a", v(2))
	tg = h.write(tg, "a", v(3))
	s1, t1 := s, tg
	// Each merges the other's commit, resolving "a" differently (by hand).
	s = h.add(format.Commit{ID: format.CommitID{Tree: treeS, Seq: s1.ID.Seq + 1}, Parents: []format.CommitID{s1.ID, t1.ID},
		Pins: map[string]ulid.ULID{"a": v(2)}, Lineage: format.Lineage(treeS, s1, t1)})
	tg = h.add(format.Commit{ID: format.CommitID{Tree: treeT, Seq: t1.ID.Seq + 1}, Parents: []format.CommitID{t1.ID, s1.ID},
		Pins: map[string]ulid.ULID{"a": v(3)}, Lineage: format.Lineage(treeT, t1, s1)})
	got := h.bases(s, tg)
	wantBases(t, got, RelationDiverged, 2, s1, t1)
	plan := PlanMerge(s, tg, got)
	if plan.Conflicts != 1 || !plan.Tables[0].BaseAmbiguous || plan.Pins != nil {
		t.Fatalf("plan %+v, want table a in conflict with an ambiguous base", plan)
	}
}

func TestFindMergeBases_BaseReclaimed_ReaderErrorReturned(t *testing.T) {
	h := newHistory(t)
	main := h.root(map[string]ulid.ULID{"a": v(1)})
	feat := h.write(h.fork(treeS, main), "a", v(2))
	main = h.write(main, "b", v(3))
	delete(h.commits, format.CommitID{Tree: treeMain})
	_, err := FindMergeBases(context.Background(), feat, main, h.reader())
	if !errors.Is(err, ErrCommitNotFound) {
		t.Fatalf("err %v, want ErrCommitNotFound", err)
	}
}

func TestBaseCandidates_ManyMergedTrees_OneReadFindsTheTrunk(t *testing.T) {
	// Main merged many short-lived branches (trees younger than main, as their
	// ULIDs say); two new branches fork from it.
	h := newHistory(t)
	main := h.root(map[string]ulid.ULID{"a": v(1)})
	for i := range 10 {
		tree := ulid.MustParse("01J0000000000000000000ZZ00")
		tree[15] = byte(i + 1)
		b := h.write(h.fork(tree, main), "x", v(byte(10+i)))
		main = h.merge(b, main)
	}
	s := h.write(h.fork(treeS, main), "a", v(2))
	forkPoint := main
	main = h.write(main, "b", v(3))
	tg := h.write(h.fork(treeU, main), "c", v(4))
	got := h.bases(s, tg)
	if got.Candidates != 11 {
		t.Fatalf("%d candidates, want main and the 10 merged trees", got.Candidates)
	}
	wantBases(t, got, RelationDiverged, 1, forkPoint)
}

func TestPlanMerge_ThreeWayRule(t *testing.T) {
	base := format.Commit{ID: format.CommitID{Tree: treeMain}, Pins: map[string]ulid.ULID{
		"same": v(1), "src": v(1), "tgt": v(1), "both-same": v(1), "both-diff": v(1), "dropped": v(1),
	}}
	source := format.Commit{ID: format.CommitID{Tree: treeS, Seq: 3}, Pins: map[string]ulid.ULID{
		"same": v(1), "src": v(2), "tgt": v(1), "both-same": v(5), "both-diff": v(6), "added": v(8),
	}}
	target := format.Commit{ID: format.CommitID{Tree: treeT, Seq: 4}, Pins: map[string]ulid.ULID{
		"same": v(1), "src": v(1), "tgt": v(3), "both-same": v(5), "both-diff": v(7), "dropped": v(1),
	}}
	plan := PlanMerge(source, target, MergeBases{Relation: RelationDiverged, Bases: []format.Commit{base}})
	want := map[string]TableAction{
		"same": TableUnchanged, "src": TableAdopt, "tgt": TableKeep, "both-same": TableUnchanged,
		"both-diff": TableConflict, "dropped": TableAdopt, "added": TableAdopt,
	}
	for _, line := range plan.Tables {
		if want[line.Table] != line.Action {
			t.Errorf("table %s: %s, want %s", line.Table, line.Action, want[line.Table])
		}
	}
	if len(plan.Tables) != len(want) || plan.Conflicts != 1 || plan.Pins != nil || plan.Writes() {
		t.Fatalf("plan %+v", plan)
	}

	delete(source.Pins, "both-diff")
	delete(target.Pins, "both-diff")
	plan = PlanMerge(source, target, MergeBases{Relation: RelationDiverged, Bases: []format.Commit{base}})
	wantPins := map[string]ulid.ULID{"same": v(1), "src": v(2), "tgt": v(3), "both-same": v(5), "added": v(8)}
	if !maps.Equal(plan.Pins, wantPins) || plan.Adopted != 3 || plan.Kept != 1 {
		t.Fatalf("pins %v (adopted %d, kept %d), want %v", plan.Pins, plan.Adopted, plan.Kept, wantPins)
	}
}
