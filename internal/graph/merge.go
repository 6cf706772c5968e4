package graph

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/internal/bounded"
	"github.com/graftworks/graft/internal/format"
)

// Merges: the merge-base search over chunked lineages, and the object-level
// three-way merge of tables changed on both sides.
//
// A commit's ancestry is its lineage plus its own position. The common
// ancestors of two commits are bounded by the element-wise minimum of their
// ancestries over the trees both hold (one candidate per tree); the merge
// bases are the candidates no other candidate descends from. The lineages are
// walked side by side, so shared subtrees are not read, and are ruled out
// wholesale against a known common ancestor that shares them too.

// maxForkProbes bounds how far up a chain of forks the search looks.
const maxForkProbes = 8

// BaseSearch is what FindBases found.
type BaseSearch struct {
	Relation Relation
	// Bases: the source head when up to date, the target head when
	// adoptable, else the common ancestors no other one descends from (none
	// for unrelated heads, several after criss-cross merges).
	Bases []Commit
	// Candidates counts the candidates considered; Reads the commits read.
	Candidates, Reads int
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
	// The candidates in the heads' own trees.
	var own []format.CommitID
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
		sharedAt: func(c format.ChildRef, level int, low string) error {
			bs.blocks = append(bs.blocks, block{ref: c, level: level, low: low})
			return nil
		},
	})
	if err != nil {
		return BaseSearch{}, err
	}
	// Read the own-tree candidates together.
	var dominators []Commit
	ownCommits := make([]Commit, len(own))
	errs := make([]error, len(own))
	bounded.Each(len(own), 2, func(i int) { ownCommits[i], errs[i] = bs.readCommit(ctx, own[i]) })
	if err := errors.Join(errs...); err != nil {
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
	dominators = append(dominators, probes...)
	dominators = append(dominators, ownCommits...)
	for _, d := range dominators {
		if err := bs.prune(ctx, d); err != nil {
			return BaseSearch{}, err
		}
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
		for _, d := range dominators[min(1, len(dominators)):] {
			if err := bs.prune(ctx, d); err != nil {
				return BaseSearch{}, err
			}
		}
	}
	// What is left, one at a time, oldest tree first (normally main's).
	for {
		next, ok := bs.nextUnread()
		if !ok {
			break
		}
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
	trees := make([]ulid.ULID, 0, len(bs.read))
	for t := range bs.read {
		trees = append(trees, t)
	}
	slices.SortFunc(trees, func(a, b ulid.ULID) int { return a.Compare(b) })
	for _, t := range trees {
		if c := bs.read[t]; !bs.dropped[t] && bs.cands[t] == c.ID {
			res.Bases = append(res.Bases, *c)
		}
	}
	return res, nil
}

func (bs *baseSearch) nextUnread() (format.CommitID, bool) {
	var best format.CommitID
	found := false
	for t, id := range bs.cands {
		if bs.dropped[t] {
			continue
		}
		if c := bs.read[t]; c != nil && c.ID == id {
			continue
		}
		if !found || t.Compare(best.Tree) < 0 {
			best, found = id, true
		}
	}
	return best, found
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

// prune drops every candidate (but d) that common ancestor d descends from.
func (bs *baseSearch) prune(ctx context.Context, d Commit) error {
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
	return nil
}

// resolveBlock makes candidates of the entries of a shared lineage subtree
// that common ancestor d (if any) does not descend from, reading nothing where
// d's lineage holds the same subtree.
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
	// RelationUpToDate: the source head is the target head or its ancestor.
	RelationUpToDate Relation = "up_to_date"
	// RelationAdoptable: the target head is a proper ancestor of the source's.
	RelationAdoptable Relation = "adoptable"
	// RelationDiverged: each head has commits the other lacks.
	RelationDiverged Relation = "diverged"
)

// TableAction is what a merge does with one table.
type TableAction string

const (
	// TableUnchanged: both sides pin the same version, or neither pins it.
	TableUnchanged TableAction = "unchanged"
	// TableAdopt: only the source changed the table; the target takes its version.
	TableAdopt TableAction = "adopt"
	// TableKeep: only the target changed the table.
	TableKeep TableAction = "keep"
	// TableConflict: both changed it differently, or the bases disagree.
	TableConflict TableAction = "conflict"
	// TableMerged: both changed different objects; a new version has both.
	TableMerged TableAction = "merged"
)

// ObjectConflict is an object both sides changed differently (nil: absent).
type ObjectConflict struct {
	Name                 string
	Base, Source, Target *format.ManifestEntry
}

// TableMerge is one table's line in a merge plan.
type TableMerge struct {
	Table  string
	Action TableAction
	// Base, Source and Target are the versions each side pins (zero: none).
	Base, Source, Target ulid.ULID
	BaseAmbiguous        bool
	// Added, Removed and Replaced count the changes to the target's entries.
	Added, Removed, Replaced int64
	// Conflicts lists up to MaxListedConflicts; ConflictCount counts them all.
	Conflicts     []ObjectConflict
	ConflictCount int64
	// Why says, for a table-level conflict, what the two sides did.
	Why string
}

// MergeSpec parameterises PlanMerge.
type MergeSpec struct {
	// NewVersionID mints the id of each table merged at object level.
	NewVersionID func(table string) ulid.ULID
	// Time and Op go into the merged versions.
	Time time.Time
	Op   string
	// MaxListedConflicts bounds each table's Conflicts. Defaults to 100.
	MaxListedConflicts int
}

// MergePlan is what merging source into target would do.
type MergePlan struct {
	Relation Relation
	Bases    []format.CommitID
	// Tables has a line per table the merge changes; Unchanged counts the others.
	Tables    []TableMerge
	Unchanged int64
	// Conflicts counts the tables in conflict.
	Conflicts int
	// SetPins and DropPins edit the target's pins, or PinsFrom replaces them.
	SetPins  map[string]ulid.ULID
	DropPins []string
	PinsFrom format.CommitID
	// Versions are the merged tables' new versions, written before the commit.
	Versions []VersionPlan
}

// Writes reports whether the merge has no conflict and something to take.
func (p MergePlan) Writes() bool {
	return p.Conflicts == 0 && (len(p.SetPins) > 0 || len(p.DropPins) > 0 || !p.PinsFrom.IsZero())
}

// Spec returns the merge commit's spec on the target's head.
func (p MergePlan) Spec(target Head, source Commit, author, message string, at time.Time, op string) CommitSpec {
	sp := CommitSpec{Branch: target.Logical, ExpectedHead: target.Commit.ID.String(), SetPins: p.SetPins, DropPins: p.DropPins,
		MergedParent: source.ID.String(), Author: author, Message: message, Time: at, Op: op}
	if !p.PinsFrom.IsZero() {
		sp.PinsFrom = p.PinsFrom.String()
	}
	return sp
}

// PlanMerge classifies every table the heads pin differently (walking the
// pins side by side) by the three-way rule: changed by the source only →
// adopt; by the target only → keep; by both → merged object by object, only
// objects both changed differently conflicting. Its cost is the chunks in
// which the versions differ. It writes nothing.
func (g *Graph) PlanMerge(ctx context.Context, source, target Commit, bases BaseSearch, spec MergeSpec) (MergePlan, error) {
	plan := MergePlan{Relation: bases.Relation, SetPins: map[string]ulid.ULID{}}
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
			lines = append(lines, TableMerge{Table: e.Table, Source: e.Version})
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
				lines = append(lines, TableMerge{Table: a.Table, Source: a.Version, Target: b.Version})
			}
			return nil
		},
		shared: func(c format.ChildRef) error { plan.Unchanged += c.Count; return nil },
	})
	if err != nil {
		return MergePlan{}, fmt.Errorf("plan merge: compare pins: %w", err)
	}
	if bases.Relation == RelationAdoptable {
		plan.PinsFrom = source.ID
		plan.SetPins = nil
	}
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
		if line.Action == TableConflict {
			plan.Conflicts++
		}
	}
	plan.Tables = lines
	if plan.Conflicts > 0 {
		plan.SetPins, plan.DropPins, plan.PinsFrom, plan.Versions = nil, nil, format.CommitID{}, nil
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
		return g.countChange(ctx, line)
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
		line.Action = TableConflict
		line.Why = "one side dropped the table, the other changed it"
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
func (g *Graph) diffVersions(ctx context.Context, table string, a, b ulid.ULID) ([]change, Version, Version, error) {
	load := func(id ulid.ULID) (Version, error) {
		if id.IsZero() {
			return Version{Table: table}, nil
		}
		return g.Version(ctx, table, id)
	}
	va, err := load(a)
	if err != nil {
		return nil, va, Version{}, err
	}
	vb, err := load(b)
	if err != nil {
		return nil, va, vb, err
	}
	var out []change
	err = walkMaps(ctx, g.manifestOf(va), g.manifestOf(vb), walkFuncs[format.ManifestEntry]{
		onlyA: func(e format.ManifestEntry) error { out = append(out, change{name: e.Name, old: &e}); return nil },
		onlyB: func(e format.ManifestEntry) error { out = append(out, change{name: e.Name, new: &e}); return nil },
		both: func(x, y format.ManifestEntry) error {
			if x != y {
				out = append(out, change{name: x.Name, old: &x, new: &y})
			}
			return nil
		},
	})
	return out, va, vb, err
}

// countChange counts what adopting the source's version changes.
func (g *Graph) countChange(ctx context.Context, line *TableMerge) error {
	changes, _, _, err := g.diffVersions(ctx, line.Table, line.Target, line.Source)
	if err != nil {
		return err
	}
	for _, c := range changes {
		line.count(c)
	}
	return nil
}

// count adds c to the line's counts and returns its change in bytes.
func (line *TableMerge) count(c change) int64 {
	switch {
	case c.old == nil:
		line.Added++
		return c.new.Size
	case c.new == nil:
		line.Removed++
		return -c.old.Size
	}
	line.Replaced++
	return c.new.Size - c.old.Size
}

// mergeObjects merges a table both sides changed, object by object.
func (g *Graph) mergeObjects(ctx context.Context, line *TableMerge, plan *MergePlan, spec MergeSpec) error {
	ds, _, _, err := g.diffVersions(ctx, line.Table, line.Base, line.Source)
	if err != nil {
		return err
	}
	dt, _, target, err := g.diffVersions(ctx, line.Table, line.Base, line.Target)
	if err != nil {
		return err
	}
	var edits []mapEdit[format.ManifestEntry]
	bytes := target.Bytes
	i, j := 0, 0
	for i < len(ds) || j < len(dt) {
		switch {
		case j == len(dt) || i < len(ds) && ds[i].name < dt[j].name:
			// Only the source changed it: the target still has the base's.
			edits = append(edits, mapEdit[format.ManifestEntry]{Key: ds[i].name, Entry: ds[i].new})
			bytes += line.count(ds[i])
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
	if line.ConflictCount > 0 {
		line.Action = TableConflict
		line.Why = fmt.Sprintf("%d objects changed differently on both sides", line.ConflictCount)
		return nil
	}
	line.Action = TableMerged
	if len(edits) == 0 {
		// Both sides made the same changes: the target's version has them.
		line.Action = TableKeep
		return nil
	}
	if spec.NewVersionID == nil {
		return invalidf("NewVersionID", "needed to merge table %s at object level", line.Table)
	}
	if err := checkParams(param{"Op", format.ValidateOp(spec.Op)}, param{"Time", format.ValidateTime(spec.Time)}); err != nil {
		return err
	}
	ref, chunks, err := g.manifestOf(target).apply(ctx, edits)
	if err != nil {
		return err
	}
	id := spec.NewVersionID(line.Table)
	v := format.TableVersion{Table: line.Table, ID: id, Entries: ref, Bytes: bytes, CreatedAt: spec.Time.UTC(), Op: spec.Op}
	body, err := format.EncodeTableVersion(v)
	if err != nil {
		return err
	}
	vp := VersionPlan{Version: v, Key: format.TableVersionKey(g.Name, line.Table, id), Body: body, Chunks: chunks,
		Added: line.Added, Removed: line.Removed, Replaced: line.Replaced}
	plan.Versions = append(plan.Versions, vp)
	if plan.SetPins == nil {
		plan.SetPins = map[string]ulid.ULID{}
	}
	plan.SetPins[line.Table] = id
	return nil
}

func sameEntry(a, b *format.ManifestEntry) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

// Keys returns the keys the merge writes before its commit, to pin first.
func (p MergePlan) Keys() []string {
	var keys []string
	for _, v := range p.Versions {
		keys = append(keys, v.Keys()...)
	}
	return keys
}

// WriteMergedVersions writes the plan's merged versions (chunks first).
func (g *Graph) WriteMergedVersions(ctx context.Context, p MergePlan) error {
	for _, v := range p.Versions {
		if err := g.WriteVersion(ctx, v); err != nil {
			return err
		}
	}
	return nil
}

// MergeResult is what Merge did.
type MergeResult struct {
	Search BaseSearch
	Plan   MergePlan
	// Append is the merge commit's append; zero when nothing was written.
	Append AppendResult
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
	if err := g.WriteMergedVersions(ctx, plan); err != nil {
		return res, err
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
