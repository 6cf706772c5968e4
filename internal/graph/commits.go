package graph

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage"
)

// AppendParams are the inputs of AppendCommit.
type AppendParams struct {
	Graph string
	// Tree is the incarnation's tree the commit is appended to.
	Tree ulid.ULID
	// Branch is the logical name the tree belongs to.
	Branch string
	// ExpectedHead is the id of the commit the caller believes is the tree's
	// head; the new commit is its child, at seq+1.
	ExpectedHead string
	// Pins is the complete set of table versions the new commit reads (not
	// a delta): a table absent here is absent from the commit. Defaults to
	// none.
	Pins map[string]ulid.ULID
	// MergedParent is the id of a commit in another tree to record as the
	// second parent. Defaults to "" (none).
	MergedParent string
	// RestoredFrom is the id of a commit whose pins a restore copied.
	// Defaults to "" (none).
	RestoredFrom string
	Author       string
	Message      string
	Time         time.Time
	Op           string
}

// AppendCommit appends a commit to a tree with expected-head semantics. It
// reads the expected head (and the merged parent, if any) to compute the new
// commit's seq and lineage, then puts the commit at seq+1 with
// put-if-absent; that put is the head check. Another commit already at seq+1
// — the head moved, or ExpectedHead was never the head — is a
// *StaleHeadError. A put whose answer was lost but whose bytes landed is
// success, with no second commit. An outcome still unknown after
// MaxPutAttempts is an *InDoubtError (matching storage.ErrAmbiguous) carrying
// the commit; settle it later with SettleAppend.
func AppendCommit(ctx context.Context, s storage.Store, p AppendParams) (format.Commit, error) {
	head, merged, restored, err := checkAppend(p)
	if err != nil {
		return format.Commit{}, fmt.Errorf("append commit: %w", err)
	}
	parent, err := readCommit(ctx, s, p.Graph, head)
	if err != nil {
		return format.Commit{}, fmt.Errorf("append commit: read expected head: %w", err)
	}
	if parent.Branch != p.Branch {
		return format.Commit{}, fmt.Errorf("append commit: %w", invalidf("Branch", "tree %s belongs to branch %q, not %q", p.Tree, parent.Branch, p.Branch))
	}
	parents := []format.Commit{parent}
	if !merged.IsZero() {
		m, err := readCommit(ctx, s, p.Graph, merged)
		if err != nil {
			return format.Commit{}, fmt.Errorf("append commit: read merged parent: %w", err)
		}
		parents = append(parents, m)
	}
	c := format.Commit{
		ID:           format.CommitID{Tree: p.Tree, Seq: head.Seq + 1},
		Branch:       p.Branch,
		Parents:      []format.CommitID{head},
		Pins:         maps.Clone(p.Pins),
		RestoredFrom: restored,
		Lineage:      format.Lineage(p.Tree, parents...),
		Author:       p.Author,
		Message:      p.Message,
		Time:         p.Time.UTC(),
		Op:           p.Op,
	}
	if c.Pins == nil {
		c.Pins = map[string]ulid.ULID{}
	}
	if !merged.IsZero() {
		c.Parents = append(c.Parents, merged)
	}
	return settleCommit(ctx, s, "append commit", p.Graph, c)
}

func checkAppend(p AppendParams) (head, merged, restored format.CommitID, err error) {
	if err := format.ValidateGraphName(p.Graph); err != nil {
		return head, merged, restored, invalid("Graph", err)
	}
	if err := format.ValidateBranchName(p.Branch); err != nil {
		return head, merged, restored, invalid("Branch", err)
	}
	if head, err = format.ParseCommitID(p.ExpectedHead); err != nil {
		return head, merged, restored, invalid("ExpectedHead", err)
	}
	if head.Tree != p.Tree {
		return head, merged, restored, invalidf("ExpectedHead", "%s is not in tree %s", head, p.Tree)
	}
	if head.Seq == 1<<63-1 {
		return head, merged, restored, invalidf("ExpectedHead", "tree %s is full", p.Tree)
	}
	if p.MergedParent != "" {
		if merged, err = format.ParseCommitID(p.MergedParent); err != nil {
			return head, merged, restored, invalid("MergedParent", err)
		}
		if merged.Tree == p.Tree {
			return head, merged, restored, invalidf("MergedParent", "%s is in the commit's own tree", merged)
		}
	}
	if p.RestoredFrom != "" {
		if restored, err = format.ParseCommitID(p.RestoredFrom); err != nil {
			return head, merged, restored, invalid("RestoredFrom", err)
		}
	}
	for table, version := range p.Pins {
		if err := format.ValidateTableName(table); err != nil {
			return head, merged, restored, invalid("Pins", err)
		}
		if version.IsZero() {
			return head, merged, restored, invalidf("Pins", "table %s: zero version ULID", table)
		}
	}
	if err := format.ValidateOp(p.Op); err != nil {
		return head, merged, restored, invalid("Op", err)
	}
	if err := format.ValidateTime(p.Time); err != nil {
		return head, merged, restored, invalid("Time", err)
	}
	if err := format.ValidateAuthor(p.Author); err != nil {
		return head, merged, restored, invalid("Author", err)
	}
	if err := format.ValidateMessage(p.Message); err != nil {
		return head, merged, restored, invalid("Message", err)
	}
	return head, merged, restored, nil
}

var commitParamFields = map[string]string{
	"pins": "Pins", "author": "Author", "message": "Message", "time": "Time", "op": "Op", "branch": "Branch",
}

// settleCommit encodes c and puts it at its key, settling the outcome. Other
// bytes at the key are a *StaleHeadError for seq > 0 (the tree moved past
// c's first parent) and a *KeyTakenError for a tree's first commit.
func settleCommit(ctx context.Context, s storage.Store, verb, graph string, c format.Commit) (format.Commit, error) {
	body, err := format.EncodeCommit(c)
	if err != nil {
		return format.Commit{}, fmt.Errorf("%s: %w", verb, invalidObject(err, commitParamFields))
	}
	key := format.CommitIDKey(graph, c.ID)
	put, err := PutIfAbsent(ctx, s, key, body)
	var inDoubt *InDoubtError
	if errors.As(err, &inDoubt) {
		inDoubt.Graph, inDoubt.Commit = graph, &c
		return format.Commit{}, fmt.Errorf("%s %s: %w", verb, c.ID, inDoubt)
	}
	if err != nil {
		return format.Commit{}, fmt.Errorf("%s %s: %w", verb, c.ID, err)
	}
	if put.Outcome == PutTaken {
		if c.ID.Seq == 0 {
			return format.Commit{}, fmt.Errorf("%s %s: %w", verb, c.ID, &KeyTakenError{Key: key})
		}
		return format.Commit{}, fmt.Errorf("%s %s: %w", verb, c.ID, &StaleHeadError{Graph: graph, Expected: c.Parents[0], Key: key})
	}
	return c, nil
}

// SettleAppend settles an append left in doubt (the Commit of an
// *InDoubtError): it re-issues the byte-identical put-if-absent and reads
// back. The commit now at its key → the commit; another commit there →
// *StaleHeadError (ours never landed and never will), or *KeyTakenError for
// a fork commit; still unknown → *InDoubtError again. It settles a
// ForkCommit left in doubt the same way.
func SettleAppend(ctx context.Context, s storage.Store, graph string, c format.Commit) (format.Commit, error) {
	if err := format.ValidateGraphName(graph); err != nil {
		return format.Commit{}, fmt.Errorf("settle append: %w", invalid("Graph", err))
	}
	return settleCommit(ctx, s, "settle append", graph, c)
}

// ForkParams are the inputs of ForkCommit.
type ForkParams struct {
	Graph string
	// Tree is the new incarnation's tree.
	Tree ulid.ULID
	// Branch is the new incarnation's logical name.
	Branch string
	// Source is the id of the commit the branch starts from.
	Source  string
	Author  string
	Message string
	Time    time.Time
	Op      string
}

// ForkCommit writes the first commit (seq 0) of a new tree: one child of
// Source with Source's pins and lineage plus Source's own position, so
// creating a branch copies no table data and costs one GET and one PUT
// whatever the graph's size. Other bytes already at the key are
// *KeyTakenError; an unknown outcome is *InDoubtError (settle with SettleAppend).
func ForkCommit(ctx context.Context, s storage.Store, p ForkParams) (format.Commit, error) {
	if err := format.ValidateGraphName(p.Graph); err != nil {
		return format.Commit{}, fmt.Errorf("fork commit: %w", invalid("Graph", err))
	}
	if p.Tree.IsZero() {
		return format.Commit{}, fmt.Errorf("fork commit: %w", invalidf("Tree", "zero ULID"))
	}
	if err := format.ValidateBranchName(p.Branch); err != nil {
		return format.Commit{}, fmt.Errorf("fork commit: %w", invalid("Branch", err))
	}
	source, err := format.ParseCommitID(p.Source)
	if err != nil {
		return format.Commit{}, fmt.Errorf("fork commit: %w", invalid("Source", err))
	}
	if source.Tree == p.Tree {
		return format.Commit{}, fmt.Errorf("fork commit: %w", invalidf("Source", "%s is in the new tree", source))
	}
	if err := format.ValidateOp(p.Op); err != nil {
		return format.Commit{}, fmt.Errorf("fork commit: %w", invalid("Op", err))
	}
	if err := format.ValidateTime(p.Time); err != nil {
		return format.Commit{}, fmt.Errorf("fork commit: %w", invalid("Time", err))
	}
	if err := format.ValidateAuthor(p.Author); err != nil {
		return format.Commit{}, fmt.Errorf("fork commit: %w", invalid("Author", err))
	}
	if err := format.ValidateMessage(p.Message); err != nil {
		return format.Commit{}, fmt.Errorf("fork commit: %w", invalid("Message", err))
	}
	parent, err := readCommit(ctx, s, p.Graph, source)
	if err != nil {
		return format.Commit{}, fmt.Errorf("fork commit: read source: %w", err)
	}
	c := format.Commit{
		ID:      format.CommitID{Tree: p.Tree, Seq: 0},
		Branch:  p.Branch,
		Parents: []format.CommitID{source},
		Pins:    maps.Clone(parent.Pins),
		Lineage: format.Lineage(p.Tree, parent),
		Author:  p.Author,
		Message: p.Message,
		Time:    p.Time.UTC(),
		Op:      p.Op,
	}
	return settleCommit(ctx, s, "fork commit", p.Graph, c)
}
