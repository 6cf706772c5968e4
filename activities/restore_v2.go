package activities

import (
	"context"
	"errors"
	"fmt"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
)

// planRestoreV2 is PlanRestore on a format-2 branch: the head its live ref names (an
// expected head must be it), pinned then probed; the backup tag of that head (format 2);
// and the restore commit — first parent the head, the target's pins map as it stands,
// restored_from the target — planned by graph.PlanAppendOn and written as a publish.
func (a *Activities) planRestoreV2(ctx context.Context, in PlanRestoreInput, b graph.Branch, targetID format.CommitID) (PlanRestoreResult, error) {
	end := func(o outcome.Outcome, f string, args ...any) (PlanRestoreResult, error) {
		return PlanRestoreResult{Outcome: o, Message: fmt.Sprintf(f, args...)}, nil
	}
	g, err := a.graphOf(in.Graph)
	if err != nil {
		return end(outcome.Invalid, "%v", err)
	}
	head, err := g.HeadOf(ctx, b)
	switch {
	case isUnreadableObject(err), errors.Is(err, graph.ErrCommitNotFound):
		return end(outcome.Conflict, "read head of %s: %v", b.Native, err)
	case err != nil:
		return PlanRestoreResult{}, fmt.Errorf("read head: %w", err)
	}
	if head.Commit.Op == in.Owner.OpID && head.Commit.RestoredFrom == targetID {
		return PlanRestoreResult{Committed: true, Commit: head.Commit.ID.String(), Head: head.Commit.FirstParent().String()}, nil
	}
	if in.ExpectedHead != "" && head.Commit.ID.String() != in.ExpectedHead {
		return end(outcome.Conflict, "the head of %q is %s, not the expected %s", in.Branch, head.Commit.ID, in.ExpectedHead)
	}
	headKey := format.CommitIDKey(in.Graph, head.Commit.ID)
	if o, msg, err := a.pinKeys(ctx, in.Owner, in.Graph, catalog.ObjectCommit, []string{headKey}); err != nil || o != "" {
		return PlanRestoreResult{Outcome: o, Message: msg}, err
	}
	if missing, err := a.probeKeys(ctx, headKey); err != nil || missing != "" {
		if err != nil {
			return PlanRestoreResult{}, err
		}
		return PlanRestoreResult{Moved: true, Head: head.Commit.ID.String(),
			Message: fmt.Sprintf("head %s of %q was reclaimed after it was read: the branch moved on", head.Commit.ID, in.Branch)}, nil
	}
	res := PlanRestoreResult{Head: head.Commit.ID.String()}
	if !in.NoBackup {
		res.BackupTag = in.BackupTag
		if res.BackupTag == "" {
			res.BackupTag = BackupTagName(in.Branch, res.Head)
		}
		body, err := tagBytes(head.Commit.ID, graph.TagParams{Graph: in.Graph, Name: res.BackupTag, Commit: res.Head, Op: in.Owner.OpID, Time: in.Time})
		if err != nil {
			return end(outcome.Invalid, "backup tag: %v", err)
		}
		res.Tag = WriteSpec{Kind: WriteTag, Graph: in.Graph, Body: body, Subject: res.BackupTag}
	}
	author, message := in.Author, in.Message
	if author == "" {
		author = "graft"
	}
	if message == "" {
		message = fmt.Sprintf("restore %s to %s", in.Branch, targetID)
	}
	plan, err := g.PlanAppendOn(ctx, head, graph.CommitSpec{Branch: in.Branch, ExpectedHead: in.ExpectedHead,
		PinsFrom: targetID.String(), RestoredFrom: targetID.String(), Author: author, Message: message, Time: in.Time.UTC(), Op: in.Owner.OpID})
	var stale *graph.StaleHeadError
	switch {
	case errors.As(err, &stale):
		return end(outcome.Conflict, "the head of %q is %s, not the expected %s", in.Branch, head.Commit.ID, in.ExpectedHead)
	case errors.Is(err, graph.ErrCommitNotFound):
		return end(outcome.NotRetained, "commit %s no longer exists", targetID)
	case errors.Is(err, graph.ErrInvalid):
		return end(outcome.Invalid, "restore commit: %v", err)
	case isUnreadableObject(err), errors.Is(err, graph.ErrCorrupt):
		return end(outcome.Conflict, "plan on %s: %v", b.Native, err)
	case err != nil:
		return PlanRestoreResult{}, fmt.Errorf("plan restore: %w", err)
	}
	if o, msg, err := a.pinKeys(ctx, in.Owner, in.Graph, catalog.ObjectCommit, plan.Keys()); err != nil || o != "" {
		return PlanRestoreResult{Outcome: o, Message: msg}, err
	}
	res.Commit, res.Spec = plan.Commit.ID.String(), publishSpec(in.Graph, plan, outcome.Done)
	return res, nil
}
