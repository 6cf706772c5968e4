package activities

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
)

func TestMergeBaseCandidates_FeatureForkedFromOldMain_OnlyTheForkPoint(t *testing.T) {
	mainTree, feature, gone := ulid.Make(), ulid.Make(), ulid.Make()
	// main at seq 10 merged the deleted branch "gone" at its seq 3; feature forked from
	// main's seq 3 and is at seq 5.
	main := format.Commit{ID: format.CommitID{Tree: mainTree, Seq: 10}, Lineage: map[ulid.ULID]int64{gone: 3}}
	feat := format.Commit{ID: format.CommitID{Tree: feature, Seq: 5}, Lineage: map[ulid.ULID]int64{mainTree: 3}}
	got := mergeBaseCandidates([]format.Commit{main, feat})
	want := []format.CommitID{{Tree: mainTree, Seq: 3}}
	if !slices.Equal(got, want) {
		t.Fatalf("candidates %v, want only the fork point %v (no commit of a tree one head alone holds)", got, want)
	}
}

func TestMergeBaseCandidates_HighestEntryTwoHeadsShare_IsACandidate(t *testing.T) {
	mainTree, a, b := ulid.Make(), ulid.Make(), ulid.Make()
	main := format.Commit{ID: format.CommitID{Tree: mainTree, Seq: 4}}
	fa := format.Commit{ID: format.CommitID{Tree: a, Seq: 2}, Lineage: map[ulid.ULID]int64{mainTree: 4}}
	fb := format.Commit{ID: format.CommitID{Tree: b, Seq: 1}, Lineage: map[ulid.ULID]int64{mainTree: 4}}
	got := mergeBaseCandidates([]format.Commit{main, fa, fb})
	if want := []format.CommitID{{Tree: mainTree, Seq: 4}}; !slices.Equal(got, want) {
		t.Fatalf("candidates %v, want %v: a and b forked from main's head, their merge base", got, want)
	}
	if got := mergeBaseCandidates([]format.Commit{fa}); len(got) != 0 {
		t.Fatalf("one head alone has candidates %v, want none", got)
	}
}

// history simulates a graph's commits in memory, with lineage computed as graft computes
// it (format.Lineage), so that FindMergeBases can run against it.
type history struct {
	commits map[format.CommitID]format.Commit
	heads   map[ulid.ULID]format.CommitID
	live    []ulid.ULID
}

func (h *history) add(c format.Commit) {
	h.commits[c.ID] = c
	h.heads[c.ID.Tree] = c.ID
}

func (h *history) fork(from format.CommitID) {
	tree := ulid.Make()
	h.add(format.Commit{ID: format.CommitID{Tree: tree, Seq: 0}, Parents: []format.CommitID{from},
		Lineage: format.Lineage(tree, h.commits[from])})
	h.live = append(h.live, tree)
}

func (h *history) appendTo(tree ulid.ULID, merged *format.CommitID) {
	head := h.commits[h.heads[tree]]
	parents := []format.Commit{head}
	if merged != nil {
		parents = append(parents, h.commits[*merged])
	}
	c := format.Commit{ID: format.CommitID{Tree: tree, Seq: head.ID.Seq + 1}, Lineage: format.Lineage(tree, parents...)}
	for _, p := range parents {
		c.Parents = append(c.Parents, p.ID)
	}
	h.add(c)
}

// randomHistory forks (from any commit of a live tree, not only heads), appends, merges
// heads into each other in both directions and deletes branches, at random.
func randomHistory(rng *rand.Rand, ops int) *history {
	h := &history{commits: map[format.CommitID]format.Commit{}, heads: map[ulid.ULID]format.CommitID{}}
	root := ulid.Make()
	h.add(format.Commit{ID: format.CommitID{Tree: root, Seq: 0}, Lineage: map[ulid.ULID]int64{}})
	h.live = []ulid.ULID{root}
	for range ops {
		tree := h.live[rng.IntN(len(h.live))]
		switch n := rng.IntN(10); {
		case n < 2 && len(h.live) < 7:
			h.fork(format.CommitID{Tree: tree, Seq: rng.Int64N(h.heads[tree].Seq + 1)})
		case n < 6:
			h.appendTo(tree, nil)
		case n < 9:
			other := h.live[rng.IntN(len(h.live))]
			if other != tree {
				src := h.heads[other]
				h.appendTo(tree, &src)
			}
		case len(h.live) > 2 && tree != root:
			h.live = slices.DeleteFunc(h.live, func(t ulid.ULID) bool { return t == tree })
		}
	}
	return h
}

// TestMergeBaseCandidates_AreWhatFindMergeBasesReads: on random histories, the candidates
// are exactly the union of graph.BaseCandidates over every ordered pair of live heads, and
// every commit graph.FindMergeBases reads for any pair is one of them.
func TestMergeBaseCandidates_AreWhatFindMergeBasesReads(t *testing.T) {
	ctx := context.Background()
	reads := 0
	for seed := range uint64(40) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			h := randomHistory(rand.New(rand.NewPCG(seed, 7)), 80)
			var heads []format.Commit
			for _, tree := range h.live {
				heads = append(heads, h.commits[h.heads[tree]])
			}
			got := mergeBaseCandidates(heads)
			kept := map[format.CommitID]bool{}
			for _, id := range got {
				kept[id] = true
			}
			union := map[format.CommitID]bool{}
			for _, s := range heads {
				for _, tg := range heads {
					if s.ID == tg.ID {
						continue
					}
					for _, id := range graph.BaseCandidates(s, tg) {
						union[id] = true
					}
					read := func(_ context.Context, id format.CommitID) (format.Commit, error) {
						if !kept[id] {
							return format.Commit{}, fmt.Errorf("merge of %s into %s read %s, which is no candidate: %w", s.ID, tg.ID, id, graph.ErrCommitNotFound)
						}
						c, ok := h.commits[id]
						if !ok {
							return format.Commit{}, fmt.Errorf("no commit %s: %w", id, graph.ErrCommitNotFound)
						}
						return c, nil
					}
					res, err := graph.FindMergeBases(ctx, s, tg, read)
					if err != nil {
						t.Fatalf("find merge bases: %v", err)
					}
					reads += res.Reads
				}
			}
			if len(union) != len(kept) {
				t.Fatalf("candidates %v, want the %d pairwise BaseCandidates %v", got, len(union), union)
			}
			for id := range union {
				if !kept[id] {
					t.Fatalf("pairwise candidate %s missing from %v", id, got)
				}
			}
		})
	}
	if reads == 0 {
		t.Fatal("no merge read any candidate: the histories never diverged")
	}
}
