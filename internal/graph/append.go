package graph

import (
	"context"
	"fmt"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/internal/format"
)

// CommitSpec says what a new commit on a branch changes. ExpectedHead,
// PinsFrom (a restore: its pins replace the head's), MergedParent (of another
// tree) and RestoredFrom are commit ids, optional.
type CommitSpec struct {
	Branch       string
	ExpectedHead string
	PinsFrom     string
	SetPins      map[string]ulid.ULID
	// Changes, optional, gives for tables of SetPins what the version changes from
	// another version of the table: the pin carries it (format.PinEntry).
	Changes      map[string]Change
	DropPins     []string
	MergedParent string
	RestoredFrom string
	Author       string
	Message      string
	Time         time.Time
	Op           string
}

// Change is what a version of a table changes from another version of it, Base:
// the entries it adds, removes and replaces. A pin records it beside the version, so
// a merge adopting the version into a branch that pins Base reports the counts
// without reading either version.
type Change struct {
	Base                     ulid.ULID
	Added, Removed, Replaced int64
}

// ChangeOf returns v's change from its base, as its record states it; ok is false
// for a version written without a base.
func ChangeOf(v format.TableVersion) (c Change, ok bool) {
	return Change{Base: v.Base, Added: v.Added, Removed: v.Removed, Replaced: v.Replaced}, !v.Base.IsZero()
}

// commitParamFields maps commit JSON fields to the CommitSpec fields behind them.
var commitParamFields = map[string]string{
	"pins": "Pins", "author": "Author", "message": "Message", "time": "Time", "op": "Op", "branch": "Branch",
}

// AppendPlan is everything an append writes, decided before any write: the head
// read, the commit, its new pins and lineage chunks, and the swap making it head.
type AppendPlan struct {
	Head       Head
	Commit     format.Commit
	CommitKey  string
	CommitBody []byte
	Chunks     []Chunk
	Publish    Publish
}

// Keys returns the keys the append writes, chunks first, for an operation to
// pin before writing (an existing chunk may be shared with versions cleanup
// is reclaiming: the pin keeps it, not the put).
func (p AppendPlan) Keys() []string { return chunkKeys(p.Chunks, p.CommitKey) }

func chunkKeys(chunks []Chunk, last string) []string {
	keys := make([]string, 0, len(chunks)+1)
	for _, c := range chunks {
		keys = append(keys, c.Key)
	}
	return append(keys, last)
}

func (spec CommitSpec) check() error {
	if err := format.ValidateBranchName(spec.Branch); err != nil {
		return invalid("Branch", err)
	}
	for _, id := range []struct{ field, v string }{{"ExpectedHead", spec.ExpectedHead}, {"PinsFrom", spec.PinsFrom},
		{"MergedParent", spec.MergedParent}, {"RestoredFrom", spec.RestoredFrom}} {
		if id.v != "" {
			if _, err := format.ParseCommitID(id.v); err != nil {
				return invalid(id.field, err)
			}
		}
	}
	for table, v := range spec.SetPins {
		if err := format.ValidateTableName(table); err != nil {
			return invalid("SetPins", err)
		}
		if v.IsZero() {
			return invalidf("SetPins", "table %s: zero version ULID", table)
		}
	}
	for table, c := range spec.Changes {
		v, ok := spec.SetPins[table]
		switch {
		case !ok:
			return invalidf("Changes", "table %s is not set", table)
		case c.Base.IsZero() || c.Base == v:
			return invalidf("Changes", "table %s: the base is zero, or the version itself", table)
		case c.Added < 0 || c.Removed < 0 || c.Replaced < 0:
			return invalidf("Changes", "table %s: a negative count", table)
		}
	}
	for _, table := range spec.DropPins {
		if err := format.ValidateTableName(table); err != nil {
			return invalid("DropPins", err)
		}
		if _, ok := spec.SetPins[table]; ok {
			return invalidf("DropPins", "table %s is both set and dropped", table)
		}
	}
	return checkCommitParams(spec.Op, spec.Time, spec.Author, spec.Message)
}

// PlanAppend reads the branch's head and places spec on it, writing nothing.
func (g *Graph) PlanAppend(ctx context.Context, spec CommitSpec) (AppendPlan, error) {
	if err := spec.check(); err != nil {
		return AppendPlan{}, fmt.Errorf("plan append: %w", err)
	}
	head, err := g.BranchHead(ctx, spec.Branch)
	if err != nil {
		return AppendPlan{}, fmt.Errorf("plan append: %w", err)
	}
	return g.PlanAppendOn(ctx, head, spec)
}

// PlanAppendOn places spec on a head already read, writing nothing; an
// ExpectedHead other than the head is a *StaleHeadError.
func (g *Graph) PlanAppendOn(ctx context.Context, head Head, spec CommitSpec) (AppendPlan, error) {
	fail := func(err error) (AppendPlan, error) {
		return AppendPlan{}, fmt.Errorf("plan append to %s: %w", spec.Branch, err)
	}
	if err := spec.check(); err != nil {
		return fail(err)
	}
	if head.Logical != spec.Branch || head.Commit.Branch != spec.Branch {
		return fail(invalidf("Branch", "the head read is of %q", head.Logical))
	}
	if spec.ExpectedHead != "" && spec.ExpectedHead != head.Commit.ID.String() {
		expected, _ := format.ParseCommitID(spec.ExpectedHead)
		return fail(&StaleHeadError{Graph: g.Name, Expected: expected, Found: head.Commit.ID, Key: format.BranchRefKey(g.Name, head.Native)})
	}
	if head.Commit.ID.Seq == 1<<63-1 {
		return fail(invalidf("Branch", "tree %s is full", head.Tree))
	}
	parents := []Commit{head.Commit}
	if spec.MergedParent != "" {
		id, _ := format.ParseCommitID(spec.MergedParent)
		if id.Tree == head.Tree {
			return fail(invalidf("MergedParent", "%s is in the branch's own tree", id))
		}
		m, err := g.Commit(ctx, id)
		if err != nil {
			return fail(fmt.Errorf("read merged parent: %w", err))
		}
		parents = append(parents, m)
	}
	pins := head.Commit.Pins
	if spec.PinsFrom != "" {
		id, _ := format.ParseCommitID(spec.PinsFrom)
		from, err := g.Commit(ctx, id)
		if err != nil {
			return fail(fmt.Errorf("read commit to take pins from: %w", err))
		}
		pins = from.Pins
	}
	var edits []mapEdit[format.PinEntry] // apply sorts them
	for table, v := range spec.SetPins {
		e := format.PinEntry{Table: table, Version: v}
		if c, ok := spec.Changes[table]; ok {
			e = e.Change(c.Base, c.Added, c.Removed, c.Replaced)
		}
		edits = append(edits, mapEdit[format.PinEntry]{Key: table, Entry: &e})
	}
	for _, table := range spec.DropPins {
		edits = append(edits, mapEdit[format.PinEntry]{Key: table})
	}
	newPins, pinChunks, err := mapTree[format.PinEntry]{r: g.pins, ref: pins}.apply(ctx, edits)
	if err != nil {
		return fail(fmt.Errorf("pins: %w", err))
	}
	lineage, linChunks, err := g.childLineage(ctx, head.Tree, parents...)
	if err != nil {
		return fail(fmt.Errorf("lineage: %w", err))
	}
	c := format.Commit{ID: format.CommitID{Tree: head.Tree, Seq: head.Commit.ID.Seq + 1}, Branch: spec.Branch,
		Parents: []format.CommitID{head.Commit.ID}, Fork: head.Commit.Fork, Pins: newPins, Lineage: lineage,
		Author: spec.Author, Message: spec.Message, Time: spec.Time.UTC(), Op: spec.Op}
	if len(parents) == 2 {
		c.Parents = append(c.Parents, parents[1].ID)
	}
	if spec.RestoredFrom != "" {
		c.RestoredFrom, _ = format.ParseCommitID(spec.RestoredFrom)
	}
	sealed, body, err := format.SealCommit(c)
	if err != nil {
		return fail(invalidObject(err, commitParamFields))
	}
	ref := format.BranchRef{State: format.RefLive, Branch: spec.Branch, Native: head.Native, Tree: head.Tree, Head: sealed.ID, Op: spec.Op}
	refBody, err := format.EncodeBranchRef(ref)
	if err != nil {
		return fail(invalid("Op", err))
	}
	return AppendPlan{Head: head, Commit: sealed, CommitKey: format.CommitIDKey(g.Name, sealed.ID),
		CommitBody: body, Chunks: append(pinChunks, linChunks...),
		Publish: Publish{Native: head.Native, IfMatch: head.ETag, Body: refBody, Commit: sealed.ID}}, nil
}

// WriteAppend writes a plan's chunks, then its commit, put-if-absent (its key is
// unique to its bytes: other bytes there are ErrCorrupt); nothing shows until Publish.
func (g *Graph) WriteAppend(ctx context.Context, p AppendPlan) error {
	return g.writeCommit(ctx, "append", p.Commit.ID, p.Chunks, p.CommitKey, p.CommitBody)
}

func (g *Graph) writeCommit(ctx context.Context, what string, id format.CommitID, chunks []Chunk, key string, body []byte) error {
	if err := g.PutChunks(ctx, chunks); err != nil {
		return fmt.Errorf("write %s %s: %w", what, id, err)
	}
	if err := putNew(ctx, g.S, key, body, true); err != nil {
		return fmt.Errorf("write %s %s: put commit: %w", what, id, err)
	}
	return nil
}

// AppendResult is what Append did.
type AppendResult struct {
	Plan    AppendPlan
	Publish PublishResult
}

// Append runs PlanAppend, WriteAppend and Publish.
func (g *Graph) Append(ctx context.Context, spec CommitSpec) (AppendResult, error) {
	p, err := g.PlanAppend(ctx, spec)
	if err != nil {
		return AppendResult{}, err
	}
	if err := g.WriteAppend(ctx, p); err != nil {
		return AppendResult{Plan: p}, err
	}
	res, err := g.Publish(ctx, p.Publish)
	return AppendResult{Plan: p, Publish: res}, err
}

// ForkSpec is a new branch incarnation (logical name Branch, tree Tree) starting at commit Source.
type ForkSpec struct {
	Branch  string
	Tree    ulid.ULID
	Source  string
	Author  string
	Message string
	Time    time.Time
	Op      string
}

// ForkPlan is a branch create decided before anything is written: the fork commit
// (seq 0, with Source's pins), its new chunks, and the live ref naming it head.
type ForkPlan struct {
	Source     Commit
	Commit     format.Commit
	CommitKey  string
	CommitBody []byte
	Chunks     []Chunk
	Ref        format.BranchRef
	RefKey     string
	RefBody    []byte
}

// PlanFork reads the source commit and plans the new incarnation.
func (g *Graph) PlanFork(ctx context.Context, spec ForkSpec) (ForkPlan, error) {
	return g.PlanForkOn(ctx, spec, Commit{})
}

// PlanForkOn is PlanFork on src, read again if it is not spec.Source.
func (g *Graph) PlanForkOn(ctx context.Context, spec ForkSpec, src Commit) (ForkPlan, error) {
	fail := func(err error) (ForkPlan, error) {
		return ForkPlan{}, fmt.Errorf("plan fork of %s: %w", spec.Branch, err)
	}
	source, err := spec.check()
	if err != nil {
		return fail(err)
	}
	if src.ID != source {
		if src, err = g.Commit(ctx, source); err != nil {
			return fail(fmt.Errorf("read source: %w", err))
		}
	}
	pins, pinChunks, err := g.pinsOf(src).apply(ctx, nil)
	if err != nil {
		return fail(err)
	}
	lineage, chunks, err := g.childLineage(ctx, spec.Tree, src)
	if err != nil {
		return fail(fmt.Errorf("lineage: %w", err))
	}
	c, body, err := format.SealCommit(format.Commit{ID: format.CommitID{Tree: spec.Tree}, Branch: spec.Branch,
		Parents: []format.CommitID{src.ID}, Fork: src.ID, Pins: pins, Lineage: lineage,
		Author: spec.Author, Message: spec.Message, Time: spec.Time.UTC(), Op: spec.Op})
	if err != nil {
		return fail(invalidObject(err, commitParamFields))
	}
	native := format.NativeName(spec.Branch, spec.Tree)
	ref := format.BranchRef{State: format.RefLive, Branch: spec.Branch, Native: native, Tree: spec.Tree, Head: c.ID, Op: spec.Op}
	refBody, _ := format.EncodeBranchRef(ref) // checked fields and a sealed commit of the tree encode
	return ForkPlan{Source: src, Commit: c, CommitKey: format.CommitIDKey(g.Name, c.ID), CommitBody: body,
		Chunks: append(pinChunks, chunks...), Ref: ref, RefKey: format.BranchRefKey(g.Name, native), RefBody: refBody}, nil
}

// check validates a fork's spec and returns its source's id.
func (spec ForkSpec) check() (format.CommitID, error) {
	if err := checkParams(param{"Branch", format.ValidateBranchName(spec.Branch)}, param{"Tree", nonZero(spec.Tree)}); err != nil {
		return format.CommitID{}, err
	}
	source, err := format.ParseCommitID(spec.Source)
	if err != nil {
		return format.CommitID{}, invalid("Source", err)
	}
	if source.Tree == spec.Tree {
		return format.CommitID{}, invalidf("Source", "%s is in the new tree", source)
	}
	return source, checkCommitParams(spec.Op, spec.Time, spec.Author, spec.Message)
}

// checkCommitParams checks the parameters every new commit has.
func checkCommitParams(op string, at time.Time, author, message string) error {
	return checkParams(param{"Op", format.ValidateOp(op)}, param{"Time", format.ValidateTime(at)},
		param{"Author", format.ValidateAuthor(author)}, param{"Message", format.ValidateMessage(message)})
}

// WriteFork writes the fork's chunks, then its commit, put-if-absent.
func (g *Graph) WriteFork(ctx context.Context, p ForkPlan) error {
	return g.writeCommit(ctx, "fork", p.Commit.ID, p.Chunks, p.CommitKey, p.CommitBody)
}

// PutForkRef puts the fork's live ref (PutIfAbsent).
func (g *Graph) PutForkRef(ctx context.Context, p ForkPlan) (PutResult, error) {
	return PutIfAbsent(ctx, g.S, p.RefKey, p.RefBody)
}

// CreateBranch plans, writes and publishes a fork in one call.
func (g *Graph) CreateBranch(ctx context.Context, spec ForkSpec) (ForkPlan, error) {
	p, err := g.PlanFork(ctx, spec)
	if err != nil {
		return ForkPlan{}, err
	}
	if err := g.WriteFork(ctx, p); err != nil {
		return p, err
	}
	put, err := g.PutForkRef(ctx, p)
	if err != nil {
		return p, fmt.Errorf("create branch %s: put ref: %w", p.Ref.Native, err)
	}
	if put.Outcome == PutTaken {
		return p, fmt.Errorf("create branch %s: %w", p.Ref.Native, &KeyTakenError{Key: p.RefKey})
	}
	return p, nil
}

// FenceBytes returns the bytes of a fence at native's ref key.
func FenceBytes(native, op, reason string) ([]byte, error) {
	logical, tree, err := format.ParseNative(native)
	if err != nil {
		return nil, invalid("Native", err)
	}
	b, err := format.EncodeBranchRef(format.BranchRef{State: format.RefFence, Branch: logical, Native: native, Tree: tree, Op: op, Reason: reason})
	if err != nil {
		return nil, invalidObject(err, map[string]string{"op": "Op", "reason": "Reason"})
	}
	return b, nil
}
