package graph

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/internal/bounded"
	"github.com/graftworks/graft/internal/format"
)

// Merges: the merge-base search over lineages, and the three-way merge of tables.
//
// A commit's ancestry is its lineage plus its own position. Two commits' common
// ancestors are bounded by the element-wise minimum of their ancestries over the
// trees both hold (one candidate per tree); the merge bases are the candidates
// no other descends from. The lineages are walked side by side, so shared
// subtrees go unread, ruled out wholesale by a common ancestor sharing them too.

// maxForkProbes bounds how far up a chain of forks the search looks.
const maxForkProbes = 8

// BaseSearch is what FindBases found.
type BaseSearch struct {
	Relation Relation
	// Bases: the source head when up to date, the target head when adoptable, else
	// the common ancestors no other descends from (none if unrelated, several after criss-cross).
	Bases             []Commit
	Candidates, Reads int // candidates considered, commits read
}

// FindBases relates source to target and finds their merge bases.
func (g *Graph) FindBases(ctx context.Context, source, target Commit) (BaseSearch, error) {
	if ok, err := g.IsAncestorOf(ctx, source.ID, target); err != nil || ok {
		return BaseSearch{Relation: RelationUpToDate, Bases: []Commit{source}}, err
	}
	if ok, err := g.IsAncestorOf(ctx, target.ID, source); err != nil || ok {
		return BaseSearch{Relation: RelationAdoptable, Bases: []Commit{target}}, err
	}
	bs := &baseSearch{g: g, cands: map[ulid.ULID]format.CommitID{}, read: map[ulid.ULID]*Commit{}, dropped: map[ulid.ULID]bool{}}
	res, err := bs.run(ctx, source, target)
	if err != nil {
		return BaseSearch{}, fmt.Errorf("find merge bases of %s and %s: %w", source.ID, target.ID, err)
	}
	return res, nil
}

// block is a lineage subtree both heads share: a chunk of level, after key low.
type block struct {
	ref   format.ChildRef
	level int
	low   string
}

type baseSearch struct {
	g       *Graph
	mu      sync.Mutex
	cands   map[ulid.ULID]format.CommitID // by tree: the lower of the two heads' positions
	read    map[ulid.ULID]*Commit         // candidates read, by tree
	dropped map[ulid.ULID]bool            // candidates a common ancestor descends from
	blocks  []block                       // lineage subtrees both heads share
	reads   int
	seen    int
}

func lower(a, b format.CommitID) format.CommitID {
	if b.Seq < a.Seq {
		return b
	}
	return a
}

func (bs *baseSearch) addCand(id format.CommitID) {
	if cur, ok := bs.cands[id.Tree]; ok {
		id = lower(cur, id)
	} else {
		bs.seen++
	}
	bs.cands[id.Tree] = id
}

func (bs *baseSearch) readCommit(ctx context.Context, id format.CommitID) (Commit, error) {
	c, err := bs.g.Commit(ctx, id)
	if err != nil {
		return Commit{}, fmt.Errorf("read merge base candidate %s: %w", id, err)
	}
	bs.mu.Lock()
	bs.reads++
	bs.mu.Unlock()
	return c, nil
}

func (bs *baseSearch) run(ctx context.Context, source, target Commit) (BaseSearch, error) {
	g := bs.g
	var own []format.CommitID // the candidates in the heads' own trees
	for _, p := range [][2]Commit{{target, source}, {source, target}} {
		at, ok, err := g.ancestorAt(ctx, p[0], p[1].ID.Tree)
		if err != nil {
			return BaseSearch{}, err
		} else if ok {
			bs.addCand(at)
			own = append(own, at)
		}
	}
	// The trees both lineages hold; shared subtrees become blocks.
	err := walkMaps(ctx, g.lineageOf(source), g.lineageOf(target), walkFuncs[format.LineageEntry]{
		both: func(a, b format.LineageEntry) error { bs.addCand(lower(a.ID(), b.ID())); return nil },
		shared: func(c format.ChildRef, level int, low string) error {
			bs.blocks = append(bs.blocks, block{ref: c, level: level, low: low})
			return nil
		},
	})
	if err != nil {
		return BaseSearch{}, err
	}
	ownCommits := make([]Commit, len(own))
	if err := bounded.EachErr(len(own), 2, func(i int) (err error) {
		ownCommits[i], err = bs.readCommit(ctx, own[i])
		return err
	}); err != nil {
		return BaseSearch{}, err
	}
	for i := range ownCommits {
		bs.read[ownCommits[i].ID.Tree] = &ownCommits[i]
	}
	// Probes: the forks up the heads' chains that are common ancestors.
	probes, err := bs.forkProbes(ctx, source, target)
	if err != nil {
		return BaseSearch{}, err
	}
	dominators := append(probes, ownCommits...)
	if err := bs.prune(ctx, dominators...); err != nil {
		return BaseSearch{}, err
	}
	// Shared subtrees: ruled out where a dominator shares them; the rest are candidates.
	for _, b := range bs.blocks {
		var against *Commit
		if len(dominators) > 0 {
			against = &dominators[0]
		}
		if err := bs.resolveBlock(ctx, b, against); err != nil {
			return BaseSearch{}, err
		}
		if err := bs.prune(ctx, dominators[min(1, len(dominators)):]...); err != nil {
			return BaseSearch{}, err
		}
	}
	// What is left, one at a time, oldest tree first (normally main's).
	for next, ok := bs.nextUnread(); ok; next, ok = bs.nextUnread() {
		c, err := bs.readCommit(ctx, next)
		if err != nil {
			return BaseSearch{}, err
		}
		bs.read[c.ID.Tree] = &c
		if err := bs.prune(ctx, c); err != nil {
			return BaseSearch{}, err
		}
	}
	res := BaseSearch{Relation: RelationDiverged, Candidates: bs.seen, Reads: bs.reads}
	for _, t := range slices.SortedFunc(maps.Keys(bs.read), ulid.ULID.Compare) {
		if c := bs.read[t]; !bs.dropped[t] && bs.cands[t] == c.ID {
			res.Bases = append(res.Bases, *c)
		}
	}
	return res, nil
}

func (bs *baseSearch) nextUnread() (format.CommitID, bool) {
	var best format.CommitID
	for t, id := range bs.cands {
		if c := bs.read[t]; bs.dropped[t] || c != nil && c.ID == id {
			continue
		}
		if best.IsZero() || t.Compare(best.Tree) < 0 {
			best = id
		}
	}
	return best, !best.IsZero()
}

// forkProbes reads the forks up each head's chain that are common ancestors.
func (bs *baseSearch) forkProbes(ctx context.Context, source, target Commit) ([]Commit, error) {
	var out []Commit
	seen := map[format.CommitID]bool{}
	for _, pair := range [][2]Commit{{source, target}, {target, source}} {
		head, other := pair[0], pair[1]
		fork := head.Fork
		for i := 0; i < maxForkProbes && !fork.IsZero() && !seen[fork]; i++ {
			seen[fork] = true
			p, err := bs.readCommit(ctx, fork)
			if err != nil {
				return nil, err
			}
			common, err := bs.g.IsAncestorOf(ctx, fork, other)
			if err != nil {
				return nil, err
			}
			if common {
				out = append(out, p)
				if id, ok := bs.cands[p.ID.Tree]; ok && id == p.ID {
					bs.read[p.ID.Tree] = &p
				}
				break // its own forks are its ancestors: it rules them out
			}
			fork = p.Fork
		}
	}
	return out, nil
}

// prune drops every candidate (but d) that a common ancestor d descends from.
func (bs *baseSearch) prune(ctx context.Context, ds ...Commit) error {
	for _, d := range ds {
		for t, id := range bs.cands {
			if bs.dropped[t] || id == d.ID {
				continue
			}
			at, ok, err := bs.g.ancestorAt(ctx, d, t)
			if err != nil {
				return err
			}
			if ok && at.Seq >= id.Seq {
				bs.dropped[t] = true
			}
		}
	}
	return nil
}

// resolveBlock makes candidates of a shared lineage subtree's entries that common
// ancestor d (if any) does not descend from, reading nothing d's lineage shares.
func (bs *baseSearch) resolveBlock(ctx context.Context, b block, d *Commit) error {
	tree := subtree(bs.g.lineage, b.ref, b.level, b.low)
	undominated := func(e format.LineageEntry) {
		if !bs.dropped[e.Tree] {
			bs.addCand(e.ID())
		}
	}
	if d == nil {
		return tree.each(ctx, func(e format.LineageEntry) error { undominated(e); return nil })
	}
	return walkMaps(ctx, tree, bs.g.lineageOf(*d), walkFuncs[format.LineageEntry]{
		onlyA: func(e format.LineageEntry) error {
			if e.Tree != d.ID.Tree || e.Seq > d.ID.Seq {
				undominated(e)
			}
			return nil
		},
		both: func(a, x format.LineageEntry) error {
			if x.Seq < a.Seq {
				undominated(a)
			}
			return nil
		},
	})
}

// Relation is how a merge's source head relates to its target head.
type Relation string

const (
	RelationUpToDate  Relation = "up_to_date" // the source head is the target head or its ancestor
	RelationAdoptable Relation = "adoptable"  // the target head is a proper ancestor of the source's
	RelationDiverged  Relation = "diverged"   // each head has commits the other lacks
)

// TableAction is what a merge does with one table.
type TableAction string

const (
	TableUnchanged TableAction = "unchanged" // both sides pin the same version, or neither pins it
	TableAdopt     TableAction = "adopt"     // only the source changed it; the target takes its version
	TableKeep      TableAction = "keep"      // only the target changed the table
	TableConflict  TableAction = "conflict"  // both changed it differently, or the bases disagree
	TableMerged    TableAction = "merged"    // both changed different objects; a new version has both
)

// ObjectConflict is an object both sides changed differently (nil: absent).
type ObjectConflict struct {
	Name                 string
	Base, Source, Target *format.ManifestEntry
}

// TableMerge is one table's line in a merge plan: the versions each side pins
// (zero: none), the changes to the target's entries, the first MaxListedConflicts
// of ConflictCount conflicts, and for a table-level conflict Why.
type TableMerge struct {
	Table                    string
	Action                   TableAction
	Base, Source, Target     ulid.ULID
	BaseAmbiguous            bool
	Added, Removed, Replaced int64
	Conflicts                []ObjectConflict
	ConflictCount            int64
	Why                      string

	sourcePin format.PinEntry // the source's pin of the table, with the change it records
}

// MergeSpec parameterises PlanMerge: NewVersionID mints each table merged at
// object level, with Time and Op; MaxListedConflicts defaults to 100.
type MergeSpec struct {
	NewVersionID       func(table string) ulid.ULID
	Time               time.Time
	Op                 string
	MaxListedConflicts int
}

// MergePlan is what merging source into target would do: a line per table it
// changes (Unchanged counts the others), the edits of the target's pins (or
// PinsFrom replacing them), and the new versions to write before the commit.
type MergePlan struct {
	Relation  Relation
	Bases     []format.CommitID
	Tables    []TableMerge
	Unchanged int64
	Conflicts int
	SetPins   map[string]ulid.ULID
	Changes   map[string]Change // of SetPins, from the target's versions
	DropPins  []string
	PinsFrom  format.CommitID
	Versions  []VersionPlan
}

// Writes reports whether the merge has no conflict and something to take.
func (p MergePlan) Writes() bool {
	return p.Conflicts == 0 && (len(p.SetPins) > 0 || len(p.DropPins) > 0 || !p.PinsFrom.IsZero())
}

// Spec returns the merge commit's spec on the target's head.
func (p MergePlan) Spec(target Head, source Commit, author, message string, at time.Time, op string) CommitSpec {
	sp := CommitSpec{Branch: target.Logical, ExpectedHead: target.Commit.ID.String(), SetPins: p.SetPins, Changes: p.Changes, DropPins: p.DropPins,
		MergedParent: source.ID.String(), Author: author, Message: message, Time: at, Op: op}
	if !p.PinsFrom.IsZero() {
		sp.PinsFrom = p.PinsFrom.String()
	}
	return sp
}

// PlanMerge classifies every table the heads pin differently by the three-way
// rule: changed by the source only → adopt; by the target only → keep; by both →
// merged object by object, objects both changed differently conflicting. It
// reads the chunks in which the versions differ and writes nothing.
func (g *Graph) PlanMerge(ctx context.Context, source, target Commit, bases BaseSearch, spec MergeSpec) (MergePlan, error) {
	plan := MergePlan{Relation: bases.Relation, SetPins: map[string]ulid.ULID{}, Changes: map[string]Change{}}
	for _, b := range bases.Bases {
		plan.Bases = append(plan.Bases, b.ID)
	}
	if bases.Relation == RelationUpToDate {
		plan.Unchanged = target.Pins.Len()
		return plan, nil
	}
	if spec.MaxListedConflicts <= 0 {
		spec.MaxListedConflicts = 100
	}
	var lines []TableMerge
	err := walkMaps(ctx, g.pinsOf(source), g.pinsOf(target), walkFuncs[format.PinEntry]{
		onlyA: func(e format.PinEntry) error {
			lines = append(lines, TableMerge{Table: e.Table, Source: e.Version, sourcePin: e})
			return nil
		},
		onlyB: func(e format.PinEntry) error {
			lines = append(lines, TableMerge{Table: e.Table, Target: e.Version})
			return nil
		},
		both: func(a, b format.PinEntry) error {
			if a.Version == b.Version {
				plan.Unchanged++
			} else {
				lines = append(lines, TableMerge{Table: a.Table, Source: a.Version, Target: b.Version, sourcePin: a})
			}
			return nil
		},
		shared: func(c format.ChildRef, _ int, _ string) error { plan.Unchanged += c.Count; return nil },
	})
	if err != nil {
		return MergePlan{}, fmt.Errorf("plan merge: compare pins: %w", err)
	}
	if bases.Relation == RelationAdoptable {
		plan.PinsFrom = source.ID
		plan.SetPins, plan.Changes = nil, nil
	}
	var adopted []int // lines adopted, counted once all are classified
	for i := range lines {
		line := &lines[i]
		for j, b := range bases.Bases {
			v, _, err := g.Pin(ctx, b, line.Table)
			if err != nil {
				return MergePlan{}, fmt.Errorf("plan merge: base pins: %w", err)
			}
			if j > 0 && v != line.Base {
				line.BaseAmbiguous = true
			}
			line.Base = v
		}
		if line.BaseAmbiguous {
			line.Base = ulid.ULID{}
		}
		if err := g.classify(ctx, line, &plan, spec); err != nil {
			return MergePlan{}, fmt.Errorf("plan merge: table %s: %w", line.Table, err)
		}
		switch line.Action {
		case TableConflict:
			plan.Conflicts++
		case TableAdopt:
			adopted = append(adopted, i)
		}
	}
	if err := g.countChanges(ctx, lines, adopted); err != nil {
		return MergePlan{}, fmt.Errorf("plan merge: %w", err)
	}
	for _, i := range adopted {
		// The merge commit's pin of an adopted version records what it changes from the
		// target's, as counted: a later merge of the target into a branch still on that
		// version reads neither.
		if line := lines[i]; plan.SetPins[line.Table] == line.Source && !line.Source.IsZero() && !line.Target.IsZero() {
			plan.Changes[line.Table] = Change{Base: line.Target, Added: line.Added, Removed: line.Removed, Replaced: line.Replaced}
		}
	}
	plan.Tables = lines
	if plan.Conflicts > 0 {
		plan.SetPins, plan.Changes, plan.DropPins, plan.PinsFrom, plan.Versions = nil, nil, nil, format.CommitID{}, nil
	}
	return plan, nil
}

func (g *Graph) classify(ctx context.Context, line *TableMerge, plan *MergePlan, spec MergeSpec) error {
	adopt := func() error {
		line.Action = TableAdopt
		if plan.PinsFrom.IsZero() {
			if line.Source.IsZero() {
				plan.DropPins = append(plan.DropPins, line.Table)
			} else {
				plan.SetPins[line.Table] = line.Source
			}
		}
		return nil
	}
	switch {
	case plan.Relation == RelationAdoptable:
		return adopt()
	case line.BaseAmbiguous:
		line.Action, line.Why = TableConflict, "the merge bases pin different versions of it"
		return nil
	case line.Target == line.Base:
		return adopt()
	case line.Source == line.Base:
		line.Action = TableKeep
		return nil
	case line.Source.IsZero() || line.Target.IsZero():
		line.Action, line.Why = TableConflict, "one side dropped the table, the other changed it"
		return nil
	}
	return g.mergeObjects(ctx, line, plan, spec)
}

// change is one entry's change between two versions of a table.
type change struct {
	name     string
	old, new *format.ManifestEntry // nil: absent
}

// diffVersions returns the entries that differ from a to b (zero: empty table).
func (g *Graph) diffVersions(ctx context.Context, table string, a, b ulid.ULID) ([]change, error) {
	var vs [2]Version
	for i, id := range []ulid.ULID{a, b} {
		var err error
		if vs[i], err = g.versionOrEmpty(ctx, table, id); err != nil {
			return nil, err
		}
	}
	return g.diffRead(ctx, vs[0], vs[1])
}

// diffRead returns the entries that differ from version a to version b.
func (g *Graph) diffRead(ctx context.Context, a, b Version) ([]change, error) {
	var out []change
	err := walkMaps(ctx, g.manifestOf(a), g.manifestOf(b), walkFuncs[format.ManifestEntry]{
		onlyA: func(e format.ManifestEntry) error { out = append(out, change{name: e.Name, old: &e}); return nil },
		onlyB: func(e format.ManifestEntry) error { out = append(out, change{name: e.Name, new: &e}); return nil },
		both: func(x, y format.ManifestEntry) error {
			if x != y {
				out = append(out, change{name: x.Name, old: &x, new: &y})
			}
			return nil
		},
	})
	return out, err
}

// mergeReads bounds the adopted tables a merge counts at once. Each count is a
// version read or two, independent of the others: read one after another, they
// made a merge's time grow with the tables it adopts by a store round trip each.
const mergeReads = 8

// countChanges counts what adopting each of lines[adopted] changes, mergeReads
// at a time.
func (g *Graph) countChanges(ctx context.Context, lines []TableMerge, adopted []int) error {
	return bounded.EachErr(len(adopted), mergeReads, func(i int) error {
		line := &lines[adopted[i]]
		if err := g.countChange(ctx, line); err != nil {
			return fmt.Errorf("table %s: %w", line.Table, err)
		}
		return nil
	})
}

// countChange counts what adopting the source's version changes: from the source's
// pin, or else its record, when either counted it from the target's version; else by
// diffing the two.
func (g *Graph) countChange(ctx context.Context, line *TableMerge) error {
	if p := line.sourcePin; !line.Target.IsZero() && p.Base == line.Target {
		line.Added, line.Removed, line.Replaced = p.Added, p.Removed, p.Replaced
		return nil
	}
	source, err := g.versionOrEmpty(ctx, line.Table, line.Source)
	if err != nil {
		return err
	}
	if !line.Target.IsZero() && source.Base == line.Target {
		line.Added, line.Removed, line.Replaced = source.Added, source.Removed, source.Replaced
		return nil
	}
	target, err := g.versionOrEmpty(ctx, line.Table, line.Target)
	if err != nil {
		return err
	}
	changes, err := g.diffRead(ctx, target, source)
	if err != nil {
		return err
	}
	for _, c := range changes {
		line.count(c)
	}
	return nil
}

func (line *TableMerge) count(c change) {
	switch {
	case c.old == nil:
		line.Added++
	case c.new == nil:
		line.Removed++
	default:
		line.Replaced++
	}
}

// mergeObjects merges a table both sides changed, object by object.
func (g *Graph) mergeObjects(ctx context.Context, line *TableMerge, plan *MergePlan, spec MergeSpec) error {
	ds, err := g.diffVersions(ctx, line.Table, line.Base, line.Source)
	if err != nil {
		return err
	}
	dt, err := g.diffVersions(ctx, line.Table, line.Base, line.Target)
	if err != nil {
		return err
	}
	edit := VersionSpec{Table: line.Table, Base: line.Target, Time: spec.Time, Op: spec.Op}
	i, j := 0, 0
	for i < len(ds) || j < len(dt) {
		switch {
		case j == len(dt) || i < len(ds) && ds[i].name < dt[j].name:
			// Only the source changed it: the target still has the base's.
			if ds[i].new == nil {
				edit.Delete = append(edit.Delete, ds[i].name)
			} else {
				edit.Put = append(edit.Put, *ds[i].new)
			}
			line.count(ds[i])
			i++
		case i == len(ds) || dt[j].name < ds[i].name:
			j++ // only the target changed it: kept
		default:
			s, t := ds[i], dt[j]
			if !sameEntry(s.new, t.new) {
				line.ConflictCount++
				if len(line.Conflicts) < spec.MaxListedConflicts {
					line.Conflicts = append(line.Conflicts, ObjectConflict{Name: s.name, Base: s.old, Source: s.new, Target: t.new})
				}
			}
			i++
			j++
		}
	}
	switch {
	case line.ConflictCount > 0:
		line.Action = TableConflict
		line.Why = fmt.Sprintf("%d objects changed differently on both sides", line.ConflictCount)
		return nil
	case len(edit.Put)+len(edit.Delete) == 0:
		line.Action = TableKeep // both sides made the same changes: the target's version has them
		return nil
	}
	line.Action = TableMerged
	if spec.NewVersionID == nil {
		return invalidf("NewVersionID", "needed to merge table %s at object level", line.Table)
	}
	edit.VersionID = spec.NewVersionID(line.Table)
	vp, err := g.PlanVersion(ctx, edit)
	if err != nil {
		return err
	}
	plan.Versions = append(plan.Versions, vp)
	if plan.SetPins == nil {
		plan.SetPins, plan.Changes = map[string]ulid.ULID{}, map[string]Change{}
	}
	plan.SetPins[line.Table] = edit.VersionID
	if c, ok := ChangeOf(vp.Version); ok {
		plan.Changes[line.Table] = c
	}
	return nil
}

func sameEntry(a, b *format.ManifestEntry) bool {
	return a == b || a != nil && b != nil && *a == *b
}

// Keys returns the keys the merge writes before its commit, to pin first.
func (p MergePlan) Keys() []string {
	var keys []string
	for _, v := range p.Versions {
		keys = append(keys, v.Keys()...)
	}
	return keys
}

// MergeResult is what Merge did.
type MergeResult struct {
	Search BaseSearch
	Plan   MergePlan
	Append AppendResult // the merge commit's append; zero when nothing was written
}

// Merge runs a whole merge in one call; a conflict writes nothing.
func (g *Graph) Merge(ctx context.Context, sourceBranch, targetBranch string, spec MergeSpec, author, message string) (MergeResult, error) {
	src, err := g.BranchHead(ctx, sourceBranch)
	if err != nil {
		return MergeResult{}, err
	}
	dst, err := g.BranchHead(ctx, targetBranch)
	if err != nil {
		return MergeResult{}, err
	}
	search, err := g.FindBases(ctx, src.Commit, dst.Commit)
	if err != nil {
		return MergeResult{}, err
	}
	plan, err := g.PlanMerge(ctx, src.Commit, dst.Commit, search, spec)
	if err != nil {
		return MergeResult{}, err
	}
	res := MergeResult{Search: search, Plan: plan}
	if !plan.Writes() {
		return res, nil
	}
	for _, v := range plan.Versions {
		if err := g.WriteVersion(ctx, v); err != nil {
			return res, err
		}
	}
	ap, err := g.PlanAppendOn(ctx, dst, plan.Spec(dst, src.Commit, author, message, spec.Time, spec.Op))
	if err != nil {
		return res, err
	}
	if err := g.WriteAppend(ctx, ap); err != nil {
		return res, err
	}
	pub, err := g.Publish(ctx, ap.Publish)
	res.Append = AppendResult{Plan: ap, Publish: pub}
	return res, err
}
