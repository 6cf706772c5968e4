package graph

import (
	"context"
	"fmt"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/internal/format"
)

// ForkSpec is a new branch incarnation starting at a commit.
type ForkSpec struct {
	// Branch is the new incarnation's logical name; Tree its tree.
	Branch string
	Tree   ulid.ULID
	// Source is the id of the commit the branch starts from.
	Source  string
	Author  string
	Message string
	Time    time.Time
	Op      string
}

// ForkPlan is a branch create decided before anything is written.
type ForkPlan struct {
	Source Commit
	// Commit is the fork commit (seq 0), naming Source's pins map as it stands.
	Commit     format.Commit
	CommitKey  string
	CommitBody []byte
	// Chunks are the new lineage chunks (none while lineages are inline).
	Chunks []Chunk
	// Ref is the live ref naming Commit as head; RefBody its bytes at RefKey.
	Ref     format.BranchRef
	RefKey  string
	RefBody []byte
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
	// The fork names the source's pins map as it stands.
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
	refBody, err := format.EncodeBranchRef(ref)
	if err != nil {
		return fail(invalid("Op", err))
	}
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
	return source, checkParams(param{"Op", format.ValidateOp(spec.Op)}, param{"Time", format.ValidateTime(spec.Time)},
		param{"Author", format.ValidateAuthor(spec.Author)}, param{"Message", format.ValidateMessage(spec.Message)})
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
