package graph

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage"
)

// DefaultBranch is the logical name of every graph's first branch.
const DefaultBranch = "main"

// FenceReasonUnpublished is the reason InitGraph writes on a main ref it
// fences after losing the graph record to another init.
const FenceReasonUnpublished = "unpublished"

// InitParams are the inputs of InitGraph. Every byte InitGraph writes is a
// function of them, so a re-run with the same params is idempotent.
type InitParams struct {
	// Graph is the new graph's name.
	Graph string
	// MainTree is the ULID of main's first incarnation; its native name is
	// "main.{MainTree}".
	MainTree ulid.ULID
	// Op is the operation id recorded on every object written.
	Op string
	// Time is the graph's creation time and the root commit's time.
	Time time.Time
	// Author is the root commit's author. Defaults to "graft".
	Author string
	// PrefixChecked says the caller checked the graph's prefix already
	// (CheckInitPrefix), so InitV2 does not list it again. Defaults to false.
	PrefixChecked bool
}

// InitResult is what InitGraph wrote (or found already written by an
// identical earlier run).
type InitResult struct {
	Graph   format.Graph
	Root    format.Commit
	MainRef format.BranchRef
	// Created is false when the graph record was already there with our bytes.
	Created bool
}

// InitGraph creates a graph: main's root commit (seq 0 of MainTree, no
// pins), then main's live ref, then the graph record, each put-if-absent, so
// the graph record exists only once the rest does. It is idempotent: a
// re-run with the same params succeeds. A graph that exists with other bytes
// is ErrGraphExists; if this call got as far as main's ref before losing
// the graph record to a different init, it fences that ref (compare-and-swap
// to a fence with reason "unpublished") so the loser leaves no live branch.
func InitGraph(ctx context.Context, s storage.Store, p InitParams) (InitResult, error) {
	res, bodies, err := buildInit(p)
	if err != nil {
		return InitResult{}, fmt.Errorf("init graph: %w", err)
	}
	graphKey := format.GraphKey(p.Graph)

	// The graph record is written last, so finding it settles the whole init.
	obj, err := s.Get(ctx, graphKey)
	switch {
	case err == nil && bytes.Equal(obj.Body, bodies.graph):
		return res, nil
	case err == nil:
		return InitResult{}, fmt.Errorf("init graph %q: %s holds another graph record: %w", p.Graph, graphKey, ErrGraphExists)
	case !errors.Is(err, storage.ErrNotFound):
		return InitResult{}, fmt.Errorf("init graph %q: read graph record: %w", p.Graph, err)
	}

	rootKey := format.CommitIDKey(p.Graph, res.Root.ID)
	if err := putOwn(ctx, s, rootKey, bodies.root, "root commit"); err != nil {
		return InitResult{}, fmt.Errorf("init graph %q: %w", p.Graph, err)
	}
	refKey := format.BranchRefKey(p.Graph, res.MainRef.Native)
	if err := putOwn(ctx, s, refKey, bodies.ref, "main ref"); err != nil {
		return InitResult{}, fmt.Errorf("init graph %q: %w", p.Graph, err)
	}
	put, err := PutIfAbsent(ctx, s, graphKey, bodies.graph)
	if err != nil {
		return InitResult{}, fmt.Errorf("init graph %q: put graph record: %w", p.Graph, err)
	}
	if put.Outcome == PutTaken {
		// Every init whose root commit matched ours has our params and so
		// writes our graph record; another record means a different main
		// won, and main.{MainTree} must never be live.
		fenceErr := fenceOwnRef(ctx, s, refKey, bodies.ref, res.MainRef, p.Op)
		if fenceErr != nil {
			return InitResult{}, fmt.Errorf("init graph %q: lost graph record to another init: %w (and fence main ref %s: %v)", p.Graph, ErrGraphExists, res.MainRef.Native, fenceErr)
		}
		return InitResult{}, fmt.Errorf("init graph %q: lost graph record to another init, fenced main ref %s: %w", p.Graph, res.MainRef.Native, ErrGraphExists)
	}
	res.Created = put.Outcome == PutCreated
	return res, nil
}

type initBodies struct{ root, ref, graph []byte }

func buildInit(p InitParams) (InitResult, initBodies, error) {
	if err := format.ValidateGraphName(p.Graph); err != nil {
		return InitResult{}, initBodies{}, invalid("Graph", err)
	}
	if p.MainTree.IsZero() {
		return InitResult{}, initBodies{}, invalidf("MainTree", "zero ULID")
	}
	if err := format.ValidateOp(p.Op); err != nil {
		return InitResult{}, initBodies{}, invalid("Op", err)
	}
	if err := format.ValidateTime(p.Time); err != nil {
		return InitResult{}, initBodies{}, invalid("Time", err)
	}
	author := p.Author
	if author == "" {
		author = "graft"
	}
	res := InitResult{
		Graph: format.Graph{Name: p.Graph, CreatedAt: p.Time.UTC(), Op: p.Op, DefaultBranch: DefaultBranch},
		Root: format.Commit{
			ID:      format.CommitID{Tree: p.MainTree, Seq: 0},
			Branch:  DefaultBranch,
			Pins:    map[string]ulid.ULID{},
			Lineage: map[ulid.ULID]int64{},
			Author:  author,
			Message: "initialize graph " + p.Graph,
			Time:    p.Time.UTC(),
			Op:      p.Op,
		},
		MainRef: format.BranchRef{
			State:  format.RefLive,
			Branch: DefaultBranch,
			Native: format.NativeName(DefaultBranch, p.MainTree),
			Tree:   p.MainTree,
			Op:     p.Op,
		},
	}
	var b initBodies
	var err error
	fields := map[string]string{"author": "Author", "time": "Time", "created_at": "Time"}
	if b.root, err = format.EncodeCommit(res.Root); err != nil {
		return InitResult{}, initBodies{}, invalidObject(err, fields)
	}
	if b.ref, err = format.EncodeBranchRef(res.MainRef); err != nil {
		return InitResult{}, initBodies{}, invalidObject(err, fields)
	}
	if b.graph, err = format.EncodeGraph(res.Graph); err != nil {
		return InitResult{}, initBodies{}, invalidObject(err, fields)
	}
	return res, b, nil
}

// putOwn puts body at key, treating other bytes there as ErrGraphExists.
func putOwn(ctx context.Context, s storage.Store, key string, body []byte, what string) error {
	put, err := PutIfAbsent(ctx, s, key, body)
	if err != nil {
		return fmt.Errorf("put %s: %w", what, err)
	}
	if put.Outcome == PutTaken {
		return fmt.Errorf("put %s: %s holds other bytes: %w", what, key, ErrGraphExists)
	}
	return nil
}

// fenceOwnRef replaces our live ref at key, if it still holds our bytes, by a
// fence, with compare-and-swap on its ETag. A fence with our bytes already
// there (an identical run fenced first) is success.
func fenceOwnRef(ctx context.Context, s storage.Store, key string, live []byte, ref format.BranchRef, op string) error {
	fence, err := format.EncodeBranchRef(format.BranchRef{
		State: format.RefFence, Branch: ref.Branch, Native: ref.Native, Tree: ref.Tree, Op: op, Reason: FenceReasonUnpublished,
	})
	if err != nil {
		return err
	}
	s = reissue(s)
	for attempt := 1; attempt <= MaxPutAttempts; attempt++ {
		obj, err := s.Get(ctx, key)
		if err != nil {
			return fmt.Errorf("read ref: %w", err)
		}
		switch {
		case bytes.Equal(obj.Body, fence):
			return nil
		case !bytes.Equal(obj.Body, live):
			return fmt.Errorf("ref %s holds neither our live ref nor our fence", key)
		}
		_, err = s.Put(ctx, key, fence, storage.PutOptions{IfMatch: obj.ETag})
		if err == nil {
			return nil
		}
		switch storage.CodeOf(err) {
		case storage.CodePreconditionFailed, storage.CodeAmbiguous, storage.CodeUnknown:
			continue // read again: our fence, or a change to look at
		}
		return fmt.Errorf("put fence: %w", err)
	}
	return fmt.Errorf("put fence: %w", storage.ErrAmbiguous)
}
