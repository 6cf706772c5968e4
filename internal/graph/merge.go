package graph

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage"
)

// Merge planning: how a source head relates to a target head, their merge
// base, and what a merge does with each table. Everything here is a function
// of commits and their lineage; the only reads are of merge-base candidates,
// through a CommitReader, and their number depends on how many trees the two
// heads share, never on how long their histories are.
//
// A commit's ancestry is a vector: its lineage (every other tree holding an
// ancestor, with the highest such seq) plus its own tree at its own seq.
// Because a tree is linear — seq n's first parent is n-1 — the ancestors of
// a commit in tree X are exactly the commits of X up to that vector's entry.
// The common ancestors of two commits are therefore described by the
// element-wise minimum of their vectors over the trees both hold; each entry
// of it names one common ancestor, a *candidate*. The merge bases are the
// candidates no other candidate descends from. Candidate c in tree X has
// candidate d in tree Y as an ancestor iff ancestry(c)[Y] reaches d's seq,
// which one read of c answers.

// Ancestry returns c's ancestor vector: c's lineage plus c's own tree at c's
// own seq. Commit (X, s) is c or an ancestor of c iff s ≤ Ancestry(c)[X].
func Ancestry(c format.Commit) map[ulid.ULID]int64 {
	out := make(map[ulid.ULID]int64, len(c.Lineage)+1)
	maps.Copy(out, c.Lineage)
	out[c.ID.Tree] = c.ID.Seq
	return out
}

// IsAncestor reports whether id is c itself or an ancestor of c, from c's
// id and lineage alone.
func IsAncestor(id format.CommitID, c format.Commit) bool {
	if id.Tree == c.ID.Tree {
		return id.Seq <= c.ID.Seq
	}
	seq, ok := c.Lineage[id.Tree]
	return ok && id.Seq <= seq
}

// Relation is how a merge's source head relates to its target head.
type Relation string

const (
	// RelationUpToDate: the source head is the target head or one of its
	// ancestors; the target has everything the source has.
	RelationUpToDate Relation = "up_to_date"
	// RelationAdoptable: the target head is a proper ancestor of the source
	// head; the target can take the source's state wholesale.
	RelationAdoptable Relation = "adoptable"
	// RelationDiverged: each head has commits the other lacks.
	RelationDiverged Relation = "diverged"
)

// CommitReader reads one commit by id. FindMergeBases calls it only for
// merge-base candidates.
type CommitReader func(ctx context.Context, id format.CommitID) (format.Commit, error)

// StoreCommitReader reads commits of graph from s, one GET each.
func StoreCommitReader(s storage.Store, graph string) CommitReader {
	return func(ctx context.Context, id format.CommitID) (format.Commit, error) {
		return readCommit(ctx, s, graph, id)
	}
}

// MergeBases is what FindMergeBases found.
type MergeBases struct {
	Relation Relation
	// Bases are the merge bases: the common ancestors no other common
	// ancestor descends from. The source head when up to date, the target
	// head when adoptable. Histories built by forks and merges of one
	// branch into another have exactly one; criss-cross merges can leave
	// several; heads with no common ancestor (not possible within one
	// graph unless its history was rewritten by hand) have none.
	Bases []format.Commit
	// Candidates counts the common ancestors the lineages named; Reads the
	// ones FindMergeBases had to read.
	Candidates, Reads int
}

// BaseCandidates returns the common ancestors of source and target that
// their ancestor vectors name — one per tree both hold, at the lower of the
// two seqs — in the order FindMergeBases reads them: the source's tree, the
// target's tree, then the others by tree ULID, oldest first (main, the
// trunk most branches share, is normally the oldest tree).
func BaseCandidates(source, target format.Commit) []format.CommitID {
	as, at := Ancestry(source), Ancestry(target)
	var out []format.CommitID
	for tree, s := range as {
		if t, ok := at[tree]; ok {
			out = append(out, format.CommitID{Tree: tree, Seq: min(s, t)})
		}
	}
	rank := func(id format.CommitID) int {
		switch id.Tree {
		case source.ID.Tree:
			return 0
		case target.ID.Tree:
			return 1
		}
		return 2
	}
	slices.SortFunc(out, func(a, b format.CommitID) int {
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra - rb
		}
		return a.Tree.Compare(b.Tree)
	})
	return out
}

// FindMergeBases relates source to target and finds their merge bases from
// the two heads' lineages. Up to date and adoptable need no read.
// Otherwise it reads candidates in BaseCandidates order and, after each
// read, drops every candidate the commit read descends from, until none is
// left unread. The candidates in the source's and the target's own trees
// (the latest commit of each that the other head has, after merges in
// either direction) are read first and together, since either may be the
// base; the others one at a time. So a branch forked from the other, two
// branches forked from a third, and repeated merges in either direction
// cost one or two reads (two in parallel), and any history at most one
// read per tree the two heads share — never more with a longer history. A
// reader error (a reclaimed base: ErrCommitNotFound) is returned wrapped.
// read must be safe for concurrent use.
func FindMergeBases(ctx context.Context, source, target format.Commit, read CommitReader) (MergeBases, error) {
	if IsAncestor(source.ID, target) {
		return MergeBases{Relation: RelationUpToDate, Bases: []format.Commit{source}}, nil
	}
	if IsAncestor(target.ID, source) {
		return MergeBases{Relation: RelationAdoptable, Bases: []format.Commit{target}}, nil
	}
	cands := BaseCandidates(source, target)
	res := MergeBases{Relation: RelationDiverged, Candidates: len(cands)}
	commits := make([]*format.Commit, len(cands))
	dropped := make([]bool, len(cands))
	readOne := func(i int) error {
		c, err := read(ctx, cands[i])
		if err != nil {
			return fmt.Errorf("read merge base candidate %s: %w", cands[i], err)
		}
		if c.ID != cands[i] {
			return fmt.Errorf("read merge base candidate %s: got commit %s", cands[i], c.ID)
		}
		commits[i] = &c
		return nil
	}
	// prune drops every candidate commit i descends from.
	prune := func(i int) {
		anc := Ancestry(*commits[i])
		for j, other := range cands {
			if j != i && anc[other.Tree] >= other.Seq {
				dropped[j] = true
			}
		}
	}
	own := 0
	for own < len(cands) && (cands[own].Tree == source.ID.Tree || cands[own].Tree == target.ID.Tree) {
		own++
	}
	errs := make([]error, own)
	var wg sync.WaitGroup
	for i := range own {
		wg.Go(func() { errs[i] = readOne(i) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return MergeBases{}, err
	}
	res.Reads += own
	for i := range own {
		if !dropped[i] {
			prune(i)
		}
	}
	for i := own; i < len(cands); i++ {
		if dropped[i] {
			continue
		}
		if err := readOne(i); err != nil {
			return MergeBases{}, err
		}
		res.Reads++
		prune(i)
	}
	for i, c := range commits {
		if c != nil && !dropped[i] {
			res.Bases = append(res.Bases, *c)
		}
	}
	return res, nil
}

// TableAction is what a merge does with one table.
type TableAction string

const (
	// TableUnchanged: source and target pin the same version (or neither pins it).
	TableUnchanged TableAction = "unchanged"
	// TableAdopt: only the source changed the table since the base; the
	// target takes the source's version (or drops the table, if the source did).
	TableAdopt TableAction = "adopt"
	// TableKeep: only the target changed the table; it keeps its version.
	TableKeep TableAction = "keep"
	// TableConflict: both changed the table, to different versions — or the
	// merge bases disagree about it and the two sides differ.
	TableConflict TableAction = "conflict"
)

// TablePlan is one table's line in a merge plan. A zero version means that
// side does not pin the table.
type TablePlan struct {
	Table                string
	Action               TableAction
	Base, Source, Target ulid.ULID
	// BaseAmbiguous is set when several merge bases pin different versions
	// of the table (criss-cross history); Base is then zero.
	BaseAmbiguous bool
}

// MergePlan is what merging source into target would do.
type MergePlan struct {
	Relation Relation
	Bases    []format.CommitID
	// Tables has a line for every table the source, the target or a base
	// pins, sorted by name.
	Tables []TablePlan
	// Pins is the target's pins after the merge: the target's, with every
	// adopted table set to the source's version. Nil when there is a conflict.
	Pins map[string]ulid.ULID
	// Counts per action.
	Unchanged, Adopted, Kept, Conflicts int
}

// Writes reports whether the merge changes the target: no conflict and at
// least one table to adopt.
func (p MergePlan) Writes() bool { return p.Conflicts == 0 && p.Adopted > 0 }

// PlanMerge classifies every table by the three-way rule, given the merge
// bases FindMergeBases found: a table both sides pin alike is unchanged;
// otherwise, if the target still pins the base's version the source's is
// adopted, if the source does the target's is kept, and if neither does
// it is a conflict. With several bases a table's base is the version they
// all pin; when they disagree and the sides differ the table is a
// conflict. With no base at all the base pins nothing, so a table only one
// side has is that side's addition.
func PlanMerge(source, target format.Commit, bases MergeBases) MergePlan {
	plan := MergePlan{Relation: bases.Relation}
	names := map[string]bool{}
	for t := range source.Pins {
		names[t] = true
	}
	for t := range target.Pins {
		names[t] = true
	}
	for _, b := range bases.Bases {
		plan.Bases = append(plan.Bases, b.ID)
		for t := range b.Pins {
			names[t] = true
		}
	}
	pins := maps.Clone(target.Pins)
	if pins == nil {
		pins = map[string]ulid.ULID{}
	}
	for _, table := range slices.Sorted(maps.Keys(names)) {
		line := TablePlan{Table: table, Source: source.Pins[table], Target: target.Pins[table]}
		for i, b := range bases.Bases {
			v := b.Pins[table]
			if i > 0 && v != line.Base {
				line.BaseAmbiguous = true
			}
			line.Base = v
		}
		if line.BaseAmbiguous {
			line.Base = ulid.ULID{}
		}
		switch {
		case line.Source == line.Target:
			line.Action = TableUnchanged
			plan.Unchanged++
		case line.BaseAmbiguous:
			line.Action = TableConflict
			plan.Conflicts++
		case line.Target == line.Base:
			line.Action = TableAdopt
			plan.Adopted++
			if line.Source.IsZero() {
				delete(pins, table)
			} else {
				pins[table] = line.Source
			}
		case line.Source == line.Base:
			line.Action = TableKeep
			plan.Kept++
		default:
			line.Action = TableConflict
			plan.Conflicts++
		}
		plan.Tables = append(plan.Tables, line)
	}
	if plan.Conflicts == 0 {
		plan.Pins = pins
	}
	return plan
}
