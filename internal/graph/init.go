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

// FenceReasonUnpublished is the reason of the fence a losing Init leaves.
const FenceReasonUnpublished = "unpublished"

// InitParams are the inputs of Init, which writes a function of them alone.
type InitParams struct {
	Graph         string
	MainTree      ulid.ULID // main's first incarnation, "main.{MainTree}"
	Op            string    // recorded on every object written
	Time          time.Time // the graph's creation time and the root commit's time
	Author        string    // the root commit's author; defaults to "graft"
	PrefixChecked bool      // the caller already ran CheckInitPrefix
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

// InitResult is what Init wrote (or found written by an identical run).
type InitResult struct {
	Graph   format.Graph
	Root    format.Commit
	MainRef format.BranchRef
	Created bool
}

// Init creates a graph: main's root commit, main's live ref, then the graph
// record, each put-if-absent, so the record exists only once the rest does. A
// re-run is idempotent; other bytes are ErrGraphExists, and an init losing the
// record fences its main ref. Unless p.PrefixChecked, a prefix holding other keys
// is a *PrefixTakenError and nothing is written.
func Init(ctx context.Context, s storage.Store, p InitParams) (InitResult, error) {
	res, root, ref, rec, err := buildInit(p)
	if err != nil {
		return InitResult{}, fmt.Errorf("init graph: %w", err)
	}
	graphKey := format.GraphKey(p.Graph)
	obj, err := s.Get(ctx, graphKey)
	switch {
	case err == nil && bytes.Equal(obj.Body, rec):
		return res, nil
	case err == nil:
		return InitResult{}, fmt.Errorf("init graph %q: %s holds another graph record: %w", p.Graph, graphKey, ErrGraphExists)
	case !errors.Is(err, storage.ErrNotFound):
		return InitResult{}, fmt.Errorf("init graph %q: read graph record: %w", p.Graph, err)
	}
	rootKey, refKey := format.CommitIDKey(p.Graph, res.Root.ID), format.BranchRefKey(p.Graph, res.MainRef.Native)
	// A graph owns its whole prefix; only an interrupted run's keys may be there.
	if !p.PrefixChecked {
		if err := CheckInitPrefix(ctx, s, p.Graph, func(k string) bool { return k == rootKey || k == refKey }); err != nil {
			return InitResult{}, fmt.Errorf("init graph: %w", err)
		}
	}
	if err := putOwn(ctx, s, rootKey, root, "root commit"); err != nil {
		return InitResult{}, fmt.Errorf("init graph %q: %w", p.Graph, err)
	}
	if err := putOwn(ctx, s, refKey, ref, "main ref"); err != nil {
		return InitResult{}, fmt.Errorf("init graph %q: %w", p.Graph, err)
	}
	put, err := PutIfAbsent(ctx, s, graphKey, rec)
	if err != nil {
		return InitResult{}, fmt.Errorf("init graph %q: put graph record: %w", p.Graph, err)
	}
	if put.Outcome == PutTaken {
		fence := res.MainRef
		fence.State, fence.Head, fence.Reason = format.RefFence, format.CommitID{}, FenceReasonUnpublished
		fenceBytes, _ := format.EncodeBranchRef(fence) // our valid ref, fenced, encodes
		if ferr := swapOwn(ctx, s, refKey, "", ref, fenceBytes); ferr != nil {
			return InitResult{}, fmt.Errorf("init graph %q: lost graph record to another init: %w (and fence main ref %s: %v)", p.Graph, ErrGraphExists, res.MainRef.Native, ferr)
		}
		return InitResult{}, fmt.Errorf("init graph %q: lost graph record to another init, fenced main ref %s: %w", p.Graph, res.MainRef.Native, ErrGraphExists)
	}
	res.Created = put.Outcome == PutCreated
	return res, nil
}

func buildInit(p InitParams) (InitResult, []byte, []byte, []byte, error) {
	if err := checkParams(param{"Graph", format.ValidateGraphName(p.Graph)}, param{"MainTree", nonZero(p.MainTree)},
		param{"Op", format.ValidateOp(p.Op)}, param{"Time", format.ValidateTime(p.Time)}); err != nil {
		return InitResult{}, nil, nil, nil, err
	}
	author := p.Author
	if author == "" {
		author = "graft"
	}
	root, rootBytes, err := format.SealCommit(format.Commit{
		ID: format.CommitID{Tree: p.MainTree}, Branch: DefaultBranch,
		Author: author, Message: "initialize graph " + p.Graph, Time: p.Time.UTC(), Op: p.Op,
	})
	if err != nil {
		err = invalidObject(err, map[string]string{"author": "Author", "time": "Time"})
		return InitResult{}, nil, nil, nil, err
	}
	// The ref and the record hold only checked parameters: they encode.
	ref := format.BranchRef{State: format.RefLive, Branch: DefaultBranch, Native: format.NativeName(DefaultBranch, p.MainTree),
		Tree: p.MainTree, Head: root.ID, Op: p.Op}
	refBytes, _ := format.EncodeBranchRef(ref)
	g := format.Graph{Name: p.Graph, CreatedAt: p.Time.UTC(), Op: p.Op, DefaultBranch: DefaultBranch}
	rec, _ := format.EncodeGraph(g)
	return InitResult{Graph: g, Root: root, MainRef: ref}, rootBytes, refBytes, rec, nil
}
