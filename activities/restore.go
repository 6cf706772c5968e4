package activities

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
)

// PrepareRestoreInput is the input of PrepareRestore.
type PrepareRestoreInput struct {
	OpID, Graph, Branch string
	ToCommit, ToTag     string // exactly one names the commit whose pins to restore
	ExpectedHead        string // when set, the commit the branch's head must be
	NoBackup            bool   // skips the backup tag of the pre-restore head
	BackupTag           string // "" for BackupTagName's
	Author, Message     string
	WorkflowID, RunID   string // the workflow's; RunID claims the ledger row
}

// PrepareRestoreResult is what PrepareRestore decided; an Outcome ends the restore.
type PrepareRestoreResult struct {
	Outcome outcome.Outcome
	Message string
	Owned   bool      // the ledger row is this run's: the kernel finishes it
	Target  string    // the id of the commit whose pins the restore copies
	Time    time.Time // the operation's time, in the backup tag and the commit
	// Recorded is the result this run recorded when it finished the operation, found
	// when the step runs again after that end (docs/operations.md).
	Recorded json.RawMessage `json:",omitempty"`
}

// PrepareRestore validates a restore, resolves the commit to restore (by id or tag) and the
// branch, records the operation with the target pinned, then probes it still exists
// (not_retained otherwise, nothing written).
func (a *Activities) PrepareRestore(ctx context.Context, in PrepareRestoreInput) (PrepareRestoreResult, error) {
	end := func(o outcome.Outcome, f string, args ...any) (PrepareRestoreResult, error) {
		return PrepareRestoreResult{Outcome: o, Message: fmt.Sprintf(f, args...)}, nil
	}
	if err := firstError(format.ValidateGraphName(in.Graph), format.ValidateBranchName(in.Branch),
		format.ValidateOp(in.OpID), format.ValidateMessage(in.Message), validAuthor(in.Author)); err != nil {
		return end(outcome.Invalid, "%v", err)
	}
	if (in.ToCommit == "") == (in.ToTag == "") {
		return end(outcome.Invalid, "give exactly one of a commit id and a tag to restore to")
	}
	if in.ExpectedHead != "" {
		if _, err := format.ParseCommitID(in.ExpectedHead); err != nil {
			return end(outcome.Invalid, "expected head: %v", err)
		}
	}
	if in.BackupTag != "" {
		if err := format.ValidateTagName(in.BackupTag); err != nil {
			return end(outcome.Invalid, "backup tag: %v", err)
		}
	}
	rec := opRecord(catalog.OpRestore, in.OpID, in.Graph, in.WorkflowID, in.RunID, map[string]any{
		"branch": in.Branch, "to_commit": in.ToCommit, "to_tag": in.ToTag, "expected_head": in.ExpectedHead,
		"no_backup": in.NoBackup, "backup_tag": in.BackupTag, "author": in.Author, "message": in.Message,
	})

	target, o, msg, err := a.resolveCommit(ctx, in.Graph, in.ToCommit, in.ToTag)
	if err == nil && o == "" {
		_, o, msg, err = a.readBranchHead(ctx, in.Graph, in.Branch)
	}
	if err != nil {
		return PrepareRestoreResult{}, err
	}
	c, err := a.claimCommit(ctx, rec, target.ID, o, msg, "; nothing was restored")
	if err != nil {
		return PrepareRestoreResult{}, err
	}
	res := PrepareRestoreResult{Outcome: c.outcome, Message: c.message, Owned: c.owned, Recorded: c.recorded}
	if o == "" {
		res.Target, res.Time = target.ID.String(), c.op.CreatedAt.UTC()
	}
	return res, nil
}

// resolveCommit reads the commit named by id, or by a live tag.
func (a *Activities) resolveCommit(ctx context.Context, graphName, id, tag string) (graph.Commit, outcome.Outcome, string, error) {
	if tag != "" {
		if err := format.ValidateTagName(tag); err != nil {
			return graph.Commit{}, outcome.Invalid, fmt.Sprintf("tag: %v", err), nil
		}
		t, err := graph.ReadTag(ctx, a.Store, graphName, tag)
		switch {
		case errors.Is(err, graph.ErrTagNotFound):
			return graph.Commit{}, outcome.NotFound, fmt.Sprintf("tag %q does not exist in graph %q", tag, graphName), nil
		case isUnreadableObject(err):
			return graph.Commit{}, outcome.Conflict, err.Error(), nil
		case err != nil:
			return graph.Commit{}, "", "", fmt.Errorf("read tag: %w", err)
		case t.Tag.State != format.TagLive:
			return graph.Commit{}, outcome.NotFound, fmt.Sprintf("tag %q was deleted (by operation %s)", tag, t.Tag.RetiredOp), nil
		}
		id = t.Tag.Commit.String()
	}
	cid, err := format.ParseCommitID(id)
	if err != nil {
		return graph.Commit{}, outcome.Invalid, fmt.Sprintf("commit: %v", err), nil
	}
	c, err := graph.ReadCommit(ctx, a.Store, graphName, id)
	switch {
	case errors.Is(err, graph.ErrCommitNotFound) && tag != "":
		return graph.Commit{}, outcome.NotRetained, fmt.Sprintf("tag %q names commit %s, which no longer exists", tag, id), nil
	case errors.Is(err, graph.ErrCommitNotFound):
		o, msg, err := a.missingCommit(ctx, graphName, id, cid)
		return graph.Commit{}, o, msg, err
	case isUnreadableObject(err):
		return graph.Commit{}, outcome.Conflict, err.Error(), nil
	case err != nil:
		return graph.Commit{}, "", "", fmt.Errorf("read commit: %w", err)
	}
	return c, "", "", nil
}

// missingCommit says why commit id (cid parsed) is not found: reclaimed by a cleanup, as
// the ledger records (not_retained), or never there (not_found).
func (a *Activities) missingCommit(ctx context.Context, graphName, id string, cid format.CommitID) (outcome.Outcome, string, error) {
	run, reclaimed, err := a.Catalog.KeyReclaimed(ctx, catalog.KeyReclaimedParams{Graph: graphName, Key: format.CommitIDKey(graphName, cid)})
	switch {
	case err != nil:
		return "", "", fmt.Errorf("look up reclaimed commit: %w", err)
	case reclaimed:
		return outcome.NotRetained, fmt.Sprintf("commit %s was reclaimed by cleanup run %s", id, run), nil
	}
	return outcome.NotFound, fmt.Sprintf("commit %s does not exist", id), nil
}

// BackupTagName is the default backup tag of the head a restore replaces:
// "backup/{branch}/{head}", or "backup/{head}" when that is too long. A function of the
// head, so a re-plan on a moved head backs up each head under its own name.
func BackupTagName(branch, head string) string {
	name := "backup/" + branch + "/" + head
	if format.ValidateTagName(name) != nil {
		name = "backup/" + head
	}
	return name
}

// PlanRestoreInput is the input of PlanRestore.
type PlanRestoreInput struct {
	Owner         Owner
	Graph, Branch string
	// Target is the commit whose pins to restore (PrepareRestoreResult.Target).
	Target          string
	ExpectedHead    string
	NoBackup        bool
	BackupTag       string
	Author, Message string
	Time            time.Time
}

// PlanRestoreResult is the restore commit planned on the current head and that head's
// backup tag, or the outcome that ends the restore.
type PlanRestoreResult struct {
	Outcome outcome.Outcome
	Message string
	// Committed: this operation's restore commit is stored already.
	Committed bool
	Moved     bool   // cleanup reclaimed the head read before its pin: plan again on the new head
	Head      string // the head the restore replaces
	// BackupTag is the backup tag's name and Tag its write; empty without a backup.
	BackupTag string
	Tag       WriteSpec
	// Commit is the restore commit's id, Spec its write.
	Commit string
	Spec   WriteSpec
	// Recorded is the result this run recorded when it finished the operation, found
	// when the step runs again after that end (docs/operations.md).
	Recorded json.RawMessage `json:",omitempty"`
}

// PlanRestore reads the branch's real head, pins it for the backup tag, probes it, and
// computes the backup tag and the restore commit (first parent the head, the target's
// pins); it writes nothing. A restore commit this operation sent already is recognised.
func (a *Activities) PlanRestore(ctx context.Context, in PlanRestoreInput) (PlanRestoreResult, error) {
	end := func(o outcome.Outcome, f string, args ...any) (PlanRestoreResult, error) {
		return PlanRestoreResult{Outcome: o, Message: fmt.Sprintf(f, args...)}, nil
	}
	targetID, err := format.ParseCommitID(in.Target)
	if err != nil {
		return end(outcome.Invalid, "target: %v", err)
	}
	if own, ok, err := a.ownPendingCommit(ctx, in.Owner, in.Graph); err != nil || ok {
		if own.ended {
			return PlanRestoreResult{Outcome: own.out, Message: own.msg, Recorded: own.recorded}, nil
		}
		return PlanRestoreResult{Committed: own.landed, Commit: own.id, Head: own.parent, Spec: own.spec}, err
	}
	head, o, msg, err := a.readBranchHead(ctx, in.Graph, in.Branch)
	if err != nil || o != "" {
		return PlanRestoreResult{Outcome: o, Message: msg}, err
	}
	g, err := a.openGraph(in.Graph)
	if err != nil {
		return end(outcome.Invalid, "%v", err)
	}
	if head.Commit.Op == in.Owner.OpID && head.Commit.RestoredFrom == targetID {
		return PlanRestoreResult{Committed: true, Commit: head.Commit.ID.String(), Head: head.Commit.FirstParent().String()}, nil
	}
	if in.ExpectedHead != "" && head.Commit.ID.String() != in.ExpectedHead {
		return end(outcome.Conflict, "the head of %q is %s, not the expected %s", in.Branch, head.Commit.ID, in.ExpectedHead)
	}
	headKey := format.CommitIDKey(in.Graph, head.Commit.ID)
	if o, msg, err := a.pinAndRecord(ctx, in.Owner, in.Graph, keyPins(catalog.ObjectCommit, headKey), nil); err != nil || o != "" {
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
		res.BackupTag = cmp.Or(in.BackupTag, BackupTagName(in.Branch, res.Head))
		body, err := graph.TagBytes(graph.TagParams{Graph: in.Graph, Name: res.BackupTag, Commit: res.Head, Op: in.Owner.OpID, Time: in.Time})
		if err != nil {
			return end(outcome.Invalid, "backup tag: %v", err)
		}
		res.Tag = WriteSpec{Kind: WriteTag, Graph: in.Graph, Body: body, Subject: res.BackupTag}
	}
	author, message := cmp.Or(in.Author, "graft"), cmp.Or(in.Message, fmt.Sprintf("restore %s to %s", in.Branch, targetID))
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
		return end(outcome.Conflict, "plan on %s: %v", head.Native, err)
	case err != nil:
		return PlanRestoreResult{}, fmt.Errorf("plan restore: %w", err)
	}
	if o, msg, err := a.pinAndRecord(ctx, in.Owner, in.Graph, keyPins(catalog.ObjectCommit, plan.Keys()...), nil); err != nil || o != "" {
		return PlanRestoreResult{Outcome: o, Message: msg}, err
	}
	res.Commit, res.Spec = plan.Commit.ID.String(), publishSpec(in.Graph, plan, outcome.Done)
	return res, nil
}
