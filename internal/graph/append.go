package graph

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage"
)

// CommitSpec says what a new commit on a branch changes.
type CommitSpec struct {
	// Branch is the logical branch the commit is appended to.
	Branch string
	// ExpectedHead, when set, is the commit id the head must be.
	ExpectedHead string
	// PinsFrom, when set, is a commit whose pins replace the head's (a restore).
	PinsFrom string
	// SetPins pins tables to versions; DropPins unpins tables.
	SetPins  map[string]ulid.ULID
	DropPins []string
	// MergedParent, when set, is a commit of another tree: the second parent.
	MergedParent string
	// RestoredFrom records the commit a restore copied. Defaults to "".
	RestoredFrom string
	Author       string
	Message      string
	Time         time.Time
	Op           string
}

// commitParamFields maps commit JSON fields to the CommitSpec fields behind them.
var commitParamFields = map[string]string{
	"pins": "Pins", "author": "Author", "message": "Message", "time": "Time", "op": "Op", "branch": "Branch",
}

// AppendPlan is everything an append writes, decided before any write.
type AppendPlan struct {
	// Head is the branch and head the plan read.
	Head Head
	// Commit is the new commit; CommitBody its exact bytes at CommitKey.
	Commit     format.Commit
	CommitKey  string
	CommitBody []byte
	// Chunks are the new pins and lineage chunks the commit names.
	Chunks []Chunk
	// Publish is the head swap that makes Commit the head.
	Publish Publish
}

// Keys returns the keys the append writes, chunks first, for an operation to
// pin before writing (an existing chunk may be shared with versions cleanup
// is reclaiming: the pin keeps it, not the put).
func (p AppendPlan) Keys() []string { return chunkKeys(p.Chunks, p.CommitKey) }

// chunkKeys returns the chunks' keys, then last.
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
	for _, table := range spec.DropPins {
		if err := format.ValidateTableName(table); err != nil {
			return invalid("DropPins", err)
		}
		if _, ok := spec.SetPins[table]; ok {
			return invalidf("DropPins", "table %s is both set and dropped", table)
		}
	}
	return checkParams(param{"Op", format.ValidateOp(spec.Op)}, param{"Time", format.ValidateTime(spec.Time)},
		param{"Author", format.ValidateAuthor(spec.Author)}, param{"Message", format.ValidateMessage(spec.Message)})
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

// PlanAppendOn places spec on a head already read, writing nothing. An
// ExpectedHead other than the head is a *StaleHeadError. It reads the merged
// parent, PinsFrom, and the chunks on the changed paths of pins and lineage.
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
	var edits []mapEdit[format.PinEntry]
	for _, table := range slices.Sorted(maps.Keys(spec.SetPins)) {
		e := format.PinEntry{Table: table, Version: spec.SetPins[table]}
		edits = append(edits, mapEdit[format.PinEntry]{Key: table, Entry: &e})
	}
	for _, table := range slices.Sorted(slices.Values(spec.DropPins)) {
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
	return AppendPlan{
		Head:       head,
		Commit:     sealed,
		CommitKey:  format.CommitIDKey(g.Name, sealed.ID),
		CommitBody: body,
		Chunks:     append(pinChunks, linChunks...),
		Publish:    Publish{Native: head.Native, IfMatch: head.ETag, Body: refBody, Commit: sealed.ID},
	}, nil
}

// WriteAppend writes a plan's chunks, then its commit, put-if-absent. The
// commit's key is unique to its bytes (other bytes there are ErrCorrupt), so a
// late put writes the same bytes; nothing shows on the branch until Publish.
func (g *Graph) WriteAppend(ctx context.Context, p AppendPlan) error {
	return g.writeCommit(ctx, "append", p.Commit.ID, p.Chunks, p.CommitKey, p.CommitBody)
}

func (g *Graph) writeCommit(ctx context.Context, what string, id format.CommitID, chunks []Chunk, key string, body []byte) error {
	if err := putChunks(ctx, g.S, chunks); err != nil {
		return fmt.Errorf("write %s %s: %w", what, id, err)
	}
	if err := putObject(ctx, g.S, key, body); err != nil {
		return fmt.Errorf("write %s %s: put commit: %w", what, id, err)
	}
	return nil
}

// putObject puts a content-addressed object; other bytes there are corruption.
func putObject(ctx context.Context, s storage.Store, key string, body []byte) error {
	put, err := PutIfAbsent(ctx, s, key, body)
	if err != nil {
		return err
	}
	if put.Outcome == PutTaken {
		return fmt.Errorf("%w: %w", ErrCorrupt, &KeyTakenError{Key: key})
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
