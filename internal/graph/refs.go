package graph

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage"
)

// A live ref is its tree's head pointer. An append puts its commit, then swaps
// the ref If-Match the ETag the plan read: the swap is its linearisation point.
// A failed swap never succeeds later: a ref's bytes, so its ETag, never repeat.

// Head is a branch's live incarnation and its head commit, the one the ref names.
type Head struct {
	Branch
	Commit Commit
}

// BranchHead resolves a logical branch (ResolveBranch) and reads its head.
func (g *Graph) BranchHead(ctx context.Context, logical string) (Head, error) {
	b, err := ResolveBranch(ctx, g.S, g.Name, logical)
	if err != nil {
		return Head{}, err
	}
	return g.HeadOf(ctx, b)
}

// HeadOf reads the head of a resolved branch.
func (g *Graph) HeadOf(ctx context.Context, b Branch) (Head, error) {
	c, err := g.Commit(ctx, b.Ref.Head)
	if err != nil {
		return Head{}, fmt.Errorf("read head of %s: %w", b.Native, err)
	}
	if c.ID.Tree != b.Tree || c.Branch != b.Logical {
		return Head{}, fmt.Errorf("read head of %s: %w", b.Native, &format.MalformedError{Kind: format.KindCommit, Field: "branch",
			Reason: fmt.Sprintf("the head %s is of branch %q in tree %s", c.ID, c.Branch, c.ID.Tree)})
	}
	return Head{Branch: b, Commit: c}, nil
}

// RefHead reads the ref of native (any state) and the head it names, if any.
func (g *Graph) RefHead(ctx context.Context, native string) (Incarnation, Commit, error) {
	if err := format.ValidateNative(native); err != nil {
		return Incarnation{}, Commit{}, invalid("Native", err)
	}
	key := format.BranchRefKey(g.Name, native)
	obj, err := g.S.Get(ctx, key)
	if err != nil {
		return Incarnation{}, Commit{}, fmt.Errorf("read ref %s: %w", native, err)
	}
	inc, err := decodeRefAt(native, obj)
	if err != nil {
		return Incarnation{}, Commit{}, fmt.Errorf("read ref %s: %s: %w", native, key, err)
	}
	if inc.Ref.Head.IsZero() {
		return inc, Commit{}, nil
	}
	c, err := g.Commit(ctx, inc.Ref.Head)
	return inc, c, err
}

// Publish is the compare-and-swap that makes a planned commit the head: from the
// ref the plan read (IfMatch) to Body, the new live ref naming Commit as head.
type Publish struct {
	Native  string
	IfMatch string
	Body    []byte
	Commit  format.CommitID
}

// PublishOutcome says how a Publish settled.
type PublishOutcome string

const (
	Published        PublishOutcome = "published"         // this call's swap made the commit the head
	AlreadyPublished PublishOutcome = "already_published" // an earlier swap of these bytes landed
)

// PublishResult is how a Publish settled: the ref's head now, its ETag when
// it is ours, and the commits read to find ours behind a newer head.
type PublishResult struct {
	Outcome PublishOutcome
	Head    format.CommitID
	ETag    string
	Walked  int
}

// Publish swaps the ref to p.Body If-Match p.IfMatch, settling every answer by
// reading back (readBack): still p.IfMatch → re-issue, at most MaxPutAttempts
// puts. A definite refusal is returned as is; still unknown at the end is an
// *InDoubtError carrying p, for SettlePublish.
func (g *Graph) Publish(ctx context.Context, p Publish) (PublishResult, error) {
	return g.publish(ctx, p, true)
}

// SettlePublish settles a Publish left in doubt, reading the ref first.
func (g *Graph) SettlePublish(ctx context.Context, p Publish) (PublishResult, error) {
	return g.publish(ctx, p, false)
}

func (g *Graph) publish(ctx context.Context, p Publish, putFirst bool) (PublishResult, error) {
	if err := format.ValidateNative(p.Native); err != nil {
		return PublishResult{}, fmt.Errorf("publish: %w", invalid("Native", err))
	}
	if p.IfMatch == "" || len(p.Body) == 0 || p.Commit.Digest.IsZero() {
		return PublishResult{}, fmt.Errorf("publish: %w", invalidf("Publish", "needs an ETag, the new ref's bytes and a sealed commit"))
	}
	key := format.BranchRefKey(g.Name, p.Native)
	var last error
	puts := 0
	s := reissue(g.S)
	for {
		if putFirst || puts > 0 {
			if puts == MaxPutAttempts || (puts > 0 && ctx.Err() != nil) {
				return PublishResult{}, fmt.Errorf("publish %s on %s: %w", p.Commit, p.Native,
					&InDoubtError{Key: key, Body: p.Body, Attempts: puts, Err: errors.Join(last, ctx.Err()), Graph: g.Name, Publish: &p})
			}
			puts++
			res, err := s.Put(ctx, key, p.Body, storage.PutOptions{IfMatch: p.IfMatch})
			if err == nil {
				return PublishResult{Outcome: Published, Head: p.Commit, ETag: res.ETag}, nil
			}
			if !unsettled(err) {
				return PublishResult{}, fmt.Errorf("publish %s on %s: %w", p.Commit, p.Native, err)
			}
			last = err
		}
		putFirst = true
		res, pending, err := g.readBack(ctx, p, key, "publish")
		if !pending {
			return res, err
		}
		if err != nil {
			last = err // cannot tell yet: re-issuing is safe (the condition decides)
		}
	}
}

// readBack reads the ref p swaps and says where p stands: our bytes, or our
// commit on its head's first-parent chain → AlreadyPublished; still p.IfMatch,
// or unreadable for now (the read's error) → pending; gone → *RefChangedError;
// else *StaleHeadError (the ref's bytes never return to p.IfMatch).
func (g *Graph) readBack(ctx context.Context, p Publish, key, what string) (PublishResult, bool, error) {
	obj, err := g.S.Get(ctx, key)
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return PublishResult{}, false, fmt.Errorf("%s %s on %s: %w", what, p.Commit, p.Native, &RefChangedError{Key: key, ETag: p.IfMatch})
	case err != nil:
		return PublishResult{}, true, err
	case bytes.Equal(obj.Body, p.Body):
		return PublishResult{Outcome: AlreadyPublished, Head: p.Commit, ETag: obj.ETag}, false, nil
	case obj.ETag == p.IfMatch:
		return PublishResult{}, true, nil
	}
	ref, err := format.DecodeBranchRef(obj.Body)
	if err != nil {
		return PublishResult{}, false, fmt.Errorf("%s %s on %s: %s: %w", what, p.Commit, p.Native, key, err)
	}
	found, walked, err := g.onChain(ctx, ref.Head, p.Commit)
	switch {
	case err != nil:
		err = fmt.Errorf("find it behind head %s: %w", ref.Head, err)
	case !found:
		err = &StaleHeadError{Graph: g.Name, Key: key, Found: ref.Head, Planned: p.Commit, State: ref.State,
			Walked: walked}
	}
	if err != nil {
		return PublishResult{}, false, fmt.Errorf("publish %s on %s: %w", p.Commit, p.Native, err)
	}
	return PublishResult{Outcome: AlreadyPublished, Head: ref.Head, Walked: walked}, false, nil
}

// onChain reports whether id is on head's first-parent chain.
func (g *Graph) onChain(ctx context.Context, head, id format.CommitID) (bool, int, error) {
	if head.Tree != id.Tree || head.Seq < id.Seq {
		return false, 0, nil
	}
	at, walked := head, 0
	for at.Seq > id.Seq {
		c, err := g.Commit(ctx, at)
		for retry := 1; retry < MaxPutAttempts && errors.Is(err, storage.ErrUnavailable) && ctx.Err() == nil; retry++ {
			c, err = g.Commit(ctx, at) // a read changes nothing: try again
		}
		if err != nil {
			return false, walked, err
		}
		walked++
		at = c.FirstParent()
		if at.Tree != id.Tree {
			return false, walked, fmt.Errorf("commit %s: first parent %s leaves its tree", c.ID, at)
		}
	}
	return at == id, walked, nil
}

// CheckPublish reads, without writing, where p stands, as readBack says.
func (g *Graph) CheckPublish(ctx context.Context, p Publish) (res PublishResult, pending bool, err error) {
	if err := format.ValidateNative(p.Native); err != nil {
		return PublishResult{}, false, fmt.Errorf("check publish: %w", invalid("Native", err))
	}
	res, pending, err = g.readBack(ctx, p, format.BranchRefKey(g.Name, p.Native), "check publish")
	if pending && err != nil {
		return PublishResult{}, false, fmt.Errorf("check publish %s on %s: %w", p.Commit, p.Native, err)
	}
	return res, pending, err
}

// FencePublish makes a pending Publish unable to land: if the ref still has
// p.IfMatch, it swaps in the same head with op as its operation (bytes nobody
// else writes, so p.IfMatch never returns). It returns what CheckPublish then
// says; a fence whose answer is lost is checked again on the next call.
func (g *Graph) FencePublish(ctx context.Context, p Publish, op string) (PublishResult, bool, error) {
	if err := format.ValidateOp(op); err != nil {
		return PublishResult{}, false, fmt.Errorf("fence publish: %w", invalid("Op", err))
	}
	res, pending, err := g.CheckPublish(ctx, p)
	if err != nil || !pending {
		return res, pending, err
	}
	key := format.BranchRefKey(g.Name, p.Native)
	obj, err := g.S.Get(ctx, key)
	if err != nil {
		return PublishResult{}, true, fmt.Errorf("fence publish %s on %s: %w", p.Commit, p.Native, err)
	}
	if obj.ETag != p.IfMatch {
		return g.CheckPublish(ctx, p)
	}
	ref, err := format.DecodeBranchRef(obj.Body)
	if err != nil || ref.State != format.RefLive {
		return PublishResult{}, true, fmt.Errorf("fence publish %s on %s: the ref read is not a live ref: %v", p.Commit, p.Native, err)
	}
	if ref.Op == op {
		return PublishResult{}, true, fmt.Errorf("fence publish %s on %s: %w", p.Commit, p.Native,
			invalidf("Op", "the ref read was written by the fencing operation %s", op))
	}
	ref.Op = op
	body, _ := format.EncodeBranchRef(ref) // a valid live ref with a checked op encodes
	if _, err = g.S.Put(ctx, key, body, storage.PutOptions{IfMatch: p.IfMatch}); err != nil && !unsettled(err) {
		return PublishResult{}, true, fmt.Errorf("fence publish %s on %s: %w", p.Commit, p.Native, err)
	}
	return g.CheckPublish(ctx, p)
}
