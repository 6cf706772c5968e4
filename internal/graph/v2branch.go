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

// InitV2Result is what InitV2 wrote (or found written by an identical run).
type InitV2Result struct {
	Graph   format.Graph
	Root    format.CommitV2
	MainRef format.BranchRef
	Created bool
}

// InitV2 creates a format-2 graph: main's root commit (seq 0, no parents, no
// pins), then main's live ref naming it as head, then the graph record, each
// put-if-absent, so the graph record exists only once the rest does. Every
// byte is a function of p, so a re-run is idempotent. A graph that exists
// with other bytes (of either format) is ErrGraphExists; if this call got as
// far as main's ref before losing the graph record to a different init, it
// replaces its own ref by a fence (compare-and-swap), so the loser leaves no
// live branch. Unless p.PrefixChecked, a prefix that holds any key but the
// ones this init writes is a *PrefixTakenError (ErrPrefixTaken), and nothing
// is written (CheckInitPrefix).
func InitV2(ctx context.Context, s storage.Store, p InitParams) (InitV2Result, error) {
	res, root, ref, rec, err := buildInitV2(p)
	if err != nil {
		return InitV2Result{}, fmt.Errorf("init graph: %w", err)
	}
	graphKey := format.GraphKey(p.Graph)
	obj, err := s.Get(ctx, graphKey)
	switch {
	case err == nil && bytes.Equal(obj.Body, rec):
		return res, nil
	case err == nil:
		return InitV2Result{}, fmt.Errorf("init graph %q: %s holds another graph record: %w", p.Graph, graphKey, ErrGraphExists)
	case !errors.Is(err, storage.ErrNotFound):
		return InitV2Result{}, fmt.Errorf("init graph %q: read graph record: %w", p.Graph, err)
	}
	rootKey, refKey := format.CommitIDKey(p.Graph, res.Root.ID), format.BranchRefKey(p.Graph, res.MainRef.Native)
	// A graph owns its whole prefix: it never starts on keys it did not write. The keys
	// an interrupted run of this same init wrote are its own.
	if !p.PrefixChecked {
		if err := CheckInitPrefix(ctx, s, p.Graph, func(k string) bool { return k == rootKey || k == refKey }); err != nil {
			return InitV2Result{}, fmt.Errorf("init graph: %w", err)
		}
	}
	if err := putOwn(ctx, s, rootKey, root, "root commit"); err != nil {
		return InitV2Result{}, fmt.Errorf("init graph %q: %w", p.Graph, err)
	}
	if err := putOwn(ctx, s, refKey, ref, "main ref"); err != nil {
		return InitV2Result{}, fmt.Errorf("init graph %q: %w", p.Graph, err)
	}
	put, err := PutIfAbsent(ctx, s, graphKey, rec)
	if err != nil {
		return InitV2Result{}, fmt.Errorf("init graph %q: put graph record: %w", p.Graph, err)
	}
	if put.Outcome == PutTaken {
		fence := res.MainRef
		fence.State, fence.Head, fence.Reason = format.RefFence, format.CommitID{}, FenceReasonUnpublished
		fenceBytes, ferr := format.EncodeBranchRefV2(fence)
		if ferr == nil {
			ferr = swapOwnRef(ctx, s, refKey, ref, fenceBytes)
		}
		if ferr != nil {
			return InitV2Result{}, fmt.Errorf("init graph %q: lost graph record to another init: %w (and fence main ref %s: %v)", p.Graph, ErrGraphExists, res.MainRef.Native, ferr)
		}
		return InitV2Result{}, fmt.Errorf("init graph %q: lost graph record to another init, fenced main ref %s: %w", p.Graph, res.MainRef.Native, ErrGraphExists)
	}
	res.Created = put.Outcome == PutCreated
	return res, nil
}

func buildInitV2(p InitParams) (InitV2Result, []byte, []byte, []byte, error) {
	if err := format.ValidateGraphName(p.Graph); err != nil {
		return InitV2Result{}, nil, nil, nil, invalid("Graph", err)
	}
	if p.MainTree.IsZero() {
		return InitV2Result{}, nil, nil, nil, invalidf("MainTree", "zero ULID")
	}
	if err := format.ValidateOp(p.Op); err != nil {
		return InitV2Result{}, nil, nil, nil, invalid("Op", err)
	}
	if err := format.ValidateTime(p.Time); err != nil {
		return InitV2Result{}, nil, nil, nil, invalid("Time", err)
	}
	author := p.Author
	if author == "" {
		author = "graft"
	}
	fields := map[string]string{"author": "Author", "time": "Time", "created_at": "Time"}
	root, rootBytes, err := format.SealCommit(format.CommitV2{
		ID: format.CommitID{Tree: p.MainTree}, Branch: DefaultBranch,
		Author: author, Message: "initialize graph " + p.Graph, Time: p.Time.UTC(), Op: p.Op,
	})
	if err != nil {
		return InitV2Result{}, nil, nil, nil, invalidObject(err, fields)
	}
	ref := format.BranchRef{State: format.RefLive, Branch: DefaultBranch, Native: format.NativeName(DefaultBranch, p.MainTree),
		Tree: p.MainTree, Head: root.ID, Op: p.Op}
	refBytes, err := format.EncodeBranchRefV2(ref)
	if err != nil {
		return InitV2Result{}, nil, nil, nil, invalidObject(err, fields)
	}
	g := format.Graph{Name: p.Graph, CreatedAt: p.Time.UTC(), Op: p.Op, DefaultBranch: DefaultBranch}
	rec, err := format.EncodeGraphV2(g)
	if err != nil {
		return InitV2Result{}, nil, nil, nil, invalidObject(err, fields)
	}
	return InitV2Result{Graph: g, Root: root, MainRef: ref}, rootBytes, refBytes, rec, nil
}

// swapOwnRef replaces our bytes at key by next with compare-and-swap; next
// already there is success, anything else an error.
func swapOwnRef(ctx context.Context, s storage.Store, key string, ours, next []byte) error {
	s = reissue(s)
	for attempt := 1; attempt <= MaxPutAttempts; attempt++ {
		obj, err := s.Get(ctx, key)
		if err != nil {
			return fmt.Errorf("read ref: %w", err)
		}
		switch {
		case bytes.Equal(obj.Body, next):
			return nil
		case !bytes.Equal(obj.Body, ours):
			return fmt.Errorf("ref %s holds neither our ref nor its replacement", key)
		}
		_, err = s.Put(ctx, key, next, storage.PutOptions{IfMatch: obj.ETag})
		if err == nil {
			return nil
		}
		switch storage.CodeOf(err) {
		case storage.CodePreconditionFailed, storage.CodeAmbiguous, storage.CodeUnknown:
			continue
		}
		return fmt.Errorf("swap ref: %w", err)
	}
	return fmt.Errorf("swap ref: %w", storage.ErrAmbiguous)
}

// ForkSpec is a new branch incarnation starting at a commit.
type ForkSpec struct {
	// Branch is the new incarnation's logical name; Tree its tree (the
	// native name is "{Branch}.{Tree}").
	Branch string
	Tree   ulid.ULID
	// Source is the id of the commit the branch starts from (either format).
	Source  string
	Author  string
	Message string
	Time    time.Time
	Op      string
}

// ForkPlan is a branch create decided before anything is written.
type ForkPlan struct {
	Source Commit
	// Commit is the fork commit (seq 0 of the new tree): Source's pins as
	// they stand (the same map, so nothing is copied), and its lineage plus
	// Source's own position.
	Commit     format.CommitV2
	CommitKey  string
	CommitBody []byte
	// Chunks are the new lineage chunks (none while lineages are inline).
	Chunks []Chunk
	// Ref is the live ref naming Commit as head; RefBody its bytes at RefKey.
	Ref     format.BranchRef
	RefKey  string
	RefBody []byte
}

// Keys returns the keys the fork writes before its ref: pin them first.
func (p ForkPlan) Keys() []string {
	keys := make([]string, 0, len(p.Chunks)+1)
	for _, c := range p.Chunks {
		keys = append(keys, c.Key)
	}
	return append(keys, p.CommitKey)
}

// PlanFork reads the source commit and plans the new incarnation: one GET,
// plus the chunks on the path where the source's tree joins its lineage.
// It writes nothing; whatever the graph's size, a create writes one commit,
// O(height) lineage chunks (none for small lineages) and one ref.
func (g *Graph) PlanFork(ctx context.Context, spec ForkSpec) (ForkPlan, error) {
	source, err := spec.check()
	if err != nil {
		return ForkPlan{}, fmt.Errorf("plan fork of %s: %w", spec.Branch, err)
	}
	src, err := g.Commit(ctx, source)
	if err != nil {
		return ForkPlan{}, fmt.Errorf("plan fork of %s: read source: %w", spec.Branch, err)
	}
	return g.planForkOn(ctx, spec, src)
}

// PlanForkOn is PlanFork on a source commit the caller has read already: the plan costs
// no read of it. A src that is not the commit spec.Source names is read again, as
// PlanFork reads it.
func (g *Graph) PlanForkOn(ctx context.Context, spec ForkSpec, src Commit) (ForkPlan, error) {
	source, err := spec.check()
	if err != nil {
		return ForkPlan{}, fmt.Errorf("plan fork of %s: %w", spec.Branch, err)
	}
	if src.ID != source {
		return g.PlanFork(ctx, spec)
	}
	return g.planForkOn(ctx, spec, src)
}

// check validates a fork's spec and returns its source's id.
func (spec ForkSpec) check() (format.CommitID, error) {
	if err := format.ValidateBranchName(spec.Branch); err != nil {
		return format.CommitID{}, invalid("Branch", err)
	}
	if spec.Tree.IsZero() {
		return format.CommitID{}, invalidf("Tree", "zero ULID")
	}
	source, err := format.ParseCommitID(spec.Source)
	if err != nil {
		return format.CommitID{}, invalid("Source", err)
	}
	if source.Tree == spec.Tree {
		return format.CommitID{}, invalidf("Source", "%s is in the new tree", source)
	}
	for _, check := range []struct {
		field string
		err   error
	}{{"Op", format.ValidateOp(spec.Op)}, {"Time", format.ValidateTime(spec.Time)},
		{"Author", format.ValidateAuthor(spec.Author)}, {"Message", format.ValidateMessage(spec.Message)}} {
		if check.err != nil {
			return format.CommitID{}, invalid(check.field, check.err)
		}
	}
	return source, nil
}

func (g *Graph) planForkOn(ctx context.Context, spec ForkSpec, src Commit) (ForkPlan, error) {
	fail := func(err error) (ForkPlan, error) {
		return ForkPlan{}, fmt.Errorf("plan fork of %s: %w", spec.Branch, err)
	}
	// A format-1 source's pins may be too many to write inline: then as
	// chunks. Otherwise the fork names the source's map as it stands.
	pins, pinChunks, err := mapTree[format.PinEntry]{r: g.pins, ref: src.Pins}.apply(ctx, nil)
	if err != nil {
		return fail(err)
	}
	return g.finishFork(ctx, spec, src, pins, pinChunks)
}

func (g *Graph) finishFork(ctx context.Context, spec ForkSpec, src Commit, pins format.MapRef[format.PinEntry], pinChunks []Chunk) (ForkPlan, error) {
	fail := func(err error) (ForkPlan, error) {
		return ForkPlan{}, fmt.Errorf("plan fork of %s: %w", spec.Branch, err)
	}
	lineage, chunks, err := g.childLineage(ctx, spec.Tree, src)
	if err != nil {
		return fail(fmt.Errorf("lineage: %w", err))
	}
	c, body, err := format.SealCommit(format.CommitV2{
		ID:      format.CommitID{Tree: spec.Tree},
		Branch:  spec.Branch,
		Parents: []format.CommitID{src.ID},
		Fork:    src.ID,
		Pins:    pins,
		Lineage: lineage,
		Author:  spec.Author,
		Message: spec.Message,
		Time:    spec.Time.UTC(),
		Op:      spec.Op,
	})
	if err != nil {
		return fail(invalidObject(err, commitParamFields))
	}
	native := format.NativeName(spec.Branch, spec.Tree)
	ref := format.BranchRef{State: format.RefLive, Branch: spec.Branch, Native: native, Tree: spec.Tree, Head: c.ID, Op: spec.Op}
	refBody, err := format.EncodeBranchRefV2(ref)
	if err != nil {
		return fail(invalid("Op", err))
	}
	return ForkPlan{Source: src, Commit: c, CommitKey: format.CommitIDKey(g.Name, c.ID), CommitBody: body,
		Chunks: append(pinChunks, chunks...), Ref: ref, RefKey: format.BranchRefKey(g.Name, native), RefBody: refBody}, nil
}

// WriteFork writes the fork's chunks, then its commit, put-if-absent.
func (g *Graph) WriteFork(ctx context.Context, p ForkPlan) error {
	if err := putChunks(ctx, g.S, p.Chunks); err != nil {
		return fmt.Errorf("write fork %s: %w", p.Commit.ID, err)
	}
	if err := putObject(ctx, g.S, p.CommitKey, p.CommitBody); err != nil {
		return fmt.Errorf("write fork %s: put commit: %w", p.Commit.ID, err)
	}
	return nil
}

// PutForkRef puts the fork's live ref with put-if-absent, settled by
// read-back (PutIfAbsent): PutTaken means another writer's ref (or a fence)
// holds the key. Nothing a create settles is decided here.
func (g *Graph) PutForkRef(ctx context.Context, p ForkPlan) (PutResult, error) {
	return PutIfAbsent(ctx, g.S, p.RefKey, p.RefBody)
}

// CreateBranch plans, writes and publishes a fork in one call (for tools
// and tests; workflows run the steps separately). A ref key that holds
// other bytes is a *KeyTakenError.
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

// FenceBytes returns the bytes of a format-2 fence at native's ref key.
func FenceBytes(native, op, reason string) ([]byte, error) {
	logical, tree, err := format.ParseNative(native)
	if err != nil {
		return nil, invalid("Native", err)
	}
	b, err := format.EncodeBranchRefV2(format.BranchRef{State: format.RefFence, Branch: logical, Native: native, Tree: tree, Op: op, Reason: reason})
	if err != nil {
		return nil, invalidObject(err, map[string]string{"op": "Op", "reason": "Reason"})
	}
	return b, nil
}
