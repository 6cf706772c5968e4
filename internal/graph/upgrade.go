package graph

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage"
)

// Upgrading a format-1 graph to format 2 rewrites the control objects whose
// meaning changed and nothing else: the graph record (which says the graph
// is format 2) and every live branch ref (which becomes its tree's head
// pointer, naming the head that listing the tree finds). No data object,
// table version, commit or tag is rewritten — they are immutable, other
// objects and the ledger name them by key or id, and format 2 reads them as
// they are. Retired refs and fences stay format 1: they only ever fence.
//
// Precondition (the upgrade workflow checks it in the ledger): no format-1
// operation is in flight on the graph, so no format-1 append can land after
// the upgrade — in format 1 the put at seq+1 was the head check, and a late
// one could refill a key cleanup emptied. The graph record is upgraded
// first, so format-1 code that starts afterwards refuses the graph (it
// reads a record of a format it does not know); a format-1 append that lands
// anyway, between reading a tree's head and swapping its ref, is found by
// the re-check after the swap and the ref is moved on to it.

// UpgradeParams are the inputs of Upgrade.
type UpgradeParams struct {
	Graph string
	// Op is the upgrade operation's id, recorded in every object it writes.
	Op string
}

// UpgradeResult is what Upgrade did.
type UpgradeResult struct {
	// GraphRecord is true when this call (or an earlier one of the same
	// operation) wrote the format-2 graph record; false when another
	// operation had.
	GraphRecord bool
	// Refs are the native names of the live refs now format 2 through
	// this operation, including ones an earlier run of it did.
	Refs []string
	// CaughtUp counts refs moved on to a format-1 commit that landed while
	// the upgrade ran.
	CaughtUp int
}

// maxCatchUp bounds how many late format-1 commits one ref is moved on to.
const maxCatchUp = 16

// Upgrade rewrites a format-1 graph's control objects as format 2, without
// touching data. It is idempotent (every byte it writes is a function of the
// objects it reads and p) and resumable: run it again after any failure.
func Upgrade(ctx context.Context, s storage.Store, p UpgradeParams) (UpgradeResult, error) {
	if err := format.ValidateGraphName(p.Graph); err != nil {
		return UpgradeResult{}, invalid("Graph", err)
	}
	if err := format.ValidateOp(p.Op); err != nil {
		return UpgradeResult{}, invalid("Op", err)
	}
	var res UpgradeResult
	var err error
	if res.GraphRecord, err = upgradeRecord(ctx, s, p); err != nil {
		return res, err
	}
	keys, natives, err := listKeys(ctx, s, format.BranchRefsPrefix(p.Graph), func(key string) (string, error) {
		return format.ParseBranchRefKey(p.Graph, key)
	})
	if err != nil {
		return res, fmt.Errorf("upgrade graph %q: list refs: %w", p.Graph, err)
	}
	refs, err := readRefs(ctx, s, keys, natives)
	if err != nil {
		return res, fmt.Errorf("upgrade graph %q: %w", p.Graph, err)
	}
	for _, inc := range refs {
		switch {
		case inc.Format == format.Version2 && inc.Ref.State == format.RefLive && inc.Ref.Op == p.Op:
			res.Refs = append(res.Refs, inc.Native) // an earlier run of ours
			n, err := catchUp(ctx, s, p, inc.Native)
			if err != nil {
				return res, err
			}
			res.CaughtUp += n
		case inc.Format == format.Version && inc.Ref.State == format.RefLive:
			if err := upgradeRef(ctx, s, p, inc); err != nil {
				return res, err
			}
			res.Refs = append(res.Refs, inc.Native)
			n, err := catchUp(ctx, s, p, inc.Native)
			if err != nil {
				return res, err
			}
			res.CaughtUp += n
		}
	}
	return res, nil
}

func upgradeRecord(ctx context.Context, s storage.Store, p UpgradeParams) (bool, error) {
	key := format.GraphKey(p.Graph)
	s = reissue(s)
	for attempt := 1; ; attempt++ {
		obj, err := s.Get(ctx, key)
		if errors.Is(err, storage.ErrNotFound) {
			return false, fmt.Errorf("upgrade graph %q: %w", p.Graph, ErrGraphNotFound)
		}
		if err != nil {
			return false, fmt.Errorf("upgrade graph %q: read graph record: %w", p.Graph, err)
		}
		g, version, err := format.DecodeGraphAny(obj.Body)
		if err != nil {
			return false, fmt.Errorf("upgrade graph %q: %s: %w", p.Graph, key, err)
		}
		if version == format.Version2 {
			return g.UpgradeOp == p.Op, nil
		}
		if attempt > MaxPutAttempts {
			return false, fmt.Errorf("upgrade graph %q: graph record: %w", p.Graph, &InDoubtError{Key: key, Attempts: attempt - 1, Err: storage.ErrAmbiguous})
		}
		g.UpgradeOp = p.Op
		next, err := format.EncodeGraphV2(g)
		if err != nil {
			return false, fmt.Errorf("upgrade graph %q: %w", p.Graph, err)
		}
		if _, err := s.Put(ctx, key, next, storage.PutOptions{IfMatch: obj.ETag}); err != nil {
			switch storage.CodeOf(err) {
			case storage.CodePreconditionFailed, storage.CodeAmbiguous, storage.CodeUnknown:
				continue // read again: ours, another upgrade's, or still format 1
			}
			return false, fmt.Errorf("upgrade graph %q: put graph record: %w", p.Graph, err)
		}
		return true, nil
	}
}

// upgradeRef swaps a live format-1 ref to a format-2 ref naming the tree's
// head (the newest format-1 commit).
func upgradeRef(ctx context.Context, s storage.Store, p UpgradeParams, inc Incarnation) error {
	head, err := ReadHead(ctx, s, p.Graph, inc.Ref.Tree)
	if err != nil {
		return fmt.Errorf("upgrade ref %s: %w", inc.Native, err)
	}
	ref := inc.Ref
	ref.Head, ref.Op = head.ID, p.Op
	next, err := format.EncodeBranchRefV2(ref)
	if err != nil {
		return fmt.Errorf("upgrade ref %s: %w", inc.Native, err)
	}
	old, err := format.EncodeBranchRef(inc.Ref)
	if err != nil {
		return fmt.Errorf("upgrade ref %s: %w", inc.Native, err)
	}
	key := format.BranchRefKey(p.Graph, inc.Native)
	if err := swapRef(ctx, s, key, old, next); err != nil {
		return fmt.Errorf("upgrade ref %s: %w", inc.Native, err)
	}
	return nil
}

// swapRef replaces from by to at key by compare-and-swap, settling by
// reading back: to there is done; from there is re-issued; anything else is
// a *RefChangedError.
func swapRef(ctx context.Context, s storage.Store, key string, from, to []byte) error {
	var last error
	s = reissue(s)
	for puts := 0; ; puts++ {
		obj, err := s.Get(ctx, key)
		if err != nil {
			return fmt.Errorf("read ref: %w", err)
		}
		switch {
		case bytes.Equal(obj.Body, to):
			return nil
		case !bytes.Equal(obj.Body, from):
			ref, _, _ := format.DecodeBranchRefAny(obj.Body)
			return &RefChangedError{Key: key, Found: ref.State, Op: ref.Op}
		}
		if puts == MaxPutAttempts {
			return &InDoubtError{Key: key, Body: to, Attempts: puts, Err: last}
		}
		if _, err := s.Put(ctx, key, to, storage.PutOptions{IfMatch: obj.ETag}); err != nil {
			switch storage.CodeOf(err) {
			case storage.CodePreconditionFailed, storage.CodeAmbiguous, storage.CodeUnknown:
				last = err
				continue
			}
			return fmt.Errorf("swap ref: %w", err)
		}
		return nil
	}
}

// catchUp moves an upgraded ref on to format-1 commits that landed after its
// head was read (a format-1 append in flight across the upgrade, which the
// precondition rules out but this repairs): while the tree's newest format-1
// commit is the child of the ref's head, swap the ref to it.
func catchUp(ctx context.Context, s storage.Store, p UpgradeParams, native string) (int, error) {
	g := &Graph{S: s, Name: p.Graph}
	n := 0
	for ; n < maxCatchUp; n++ {
		inc, _, err := g.RefHead(ctx, native)
		if err != nil {
			return n, fmt.Errorf("upgrade ref %s: re-check: %w", native, err)
		}
		if inc.Format != format.Version2 || inc.Ref.State != format.RefLive || inc.Ref.Head.IsV2() || inc.Ref.Op != p.Op {
			return n, nil // moved on by format-2 writers, or retired: nothing of ours to catch up
		}
		next, err := readCommit(ctx, s, p.Graph, format.CommitID{Tree: inc.Ref.Tree, Seq: inc.Ref.Head.Seq + 1})
		if errors.Is(err, ErrCommitNotFound) {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("upgrade ref %s: re-check: %w", native, err)
		}
		if len(next.Parents) == 0 || next.Parents[0] != inc.Ref.Head {
			return n, nil
		}
		ref := inc.Ref
		ref.Head = next.ID
		to, err := format.EncodeBranchRefV2(ref)
		if err != nil {
			return n, err
		}
		from, _ := format.EncodeBranchRefV2(inc.Ref)
		if err := swapRef(ctx, s, format.BranchRefKey(p.Graph, native), from, to); err != nil {
			return n, fmt.Errorf("upgrade ref %s: catch up to %s: %w", native, next.ID, err)
		}
	}
	return n, nil
}
