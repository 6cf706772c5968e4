package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
)

// PrepareRestoreInput is the input of PrepareRestore.
type PrepareRestoreInput struct {
	OpID, Graph, Branch string
	// ToCommit or ToTag (exactly one) names the commit whose pins to restore.
	ToCommit, ToTag string
	// ExpectedHead, when set, is the commit the branch's head must be.
	ExpectedHead string
	// NoBackup skips the backup tag of the pre-restore head.
	NoBackup bool
	// BackupTag names the backup tag; "" means BackupTagName's default.
	BackupTag       string
	Author, Message string
	// WorkflowID and RunID are the workflow's; RunID claims the ledger row.
	WorkflowID, RunID string
}

// PrepareRestoreResult is what PrepareRestore decided. A non-empty Outcome
// ends the restore before any storage effect.
type PrepareRestoreResult struct {
	Outcome outcome.Outcome
	Message string
	// Owned: the ledger row is this run's; the kernel finishes it.
	Owned bool
	// Target is the id of the commit whose pins the restore copies.
	Target string
	// Time is the operation's time; it goes into the backup tag and the
	// commit, so re-issues are byte-identical.
	Time time.Time
}

// PrepareRestore validates a restore, resolves the commit to restore (by id
// or through a tag) and the branch, records the operation and pins the
// target commit and every version it pins — one ledger transaction — and
// then probes that each of them still exists: anything missing is
// not_retained, with nothing written.
func (a *Activities) PrepareRestore(ctx context.Context, in PrepareRestoreInput) (PrepareRestoreResult, error) {
	end := func(o outcome.Outcome, f string, args ...any) (PrepareRestoreResult, error) {
		return PrepareRestoreResult{Outcome: o, Message: fmt.Sprintf(f, args...)}, nil
	}
	for _, check := range []error{format.ValidateGraphName(in.Graph), format.ValidateBranchName(in.Branch),
		format.ValidateOp(in.OpID), format.ValidateMessage(in.Message)} {
		if check != nil {
			return end(outcome.Invalid, "%v", check)
		}
	}
	if in.Author != "" {
		if err := format.ValidateAuthor(in.Author); err != nil {
			return end(outcome.Invalid, "%v", err)
		}
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
	inputs, _ := json.Marshal(map[string]any{
		"branch": in.Branch, "to_commit": in.ToCommit, "to_tag": in.ToTag, "expected_head": in.ExpectedHead,
		"no_backup": in.NoBackup, "backup_tag": in.BackupTag, "author": in.Author, "message": in.Message,
	})
	rec := catalog.OperationInsertParams{ID: in.OpID, Kind: catalog.OpRestore, Graph: in.Graph, Inputs: inputs,
		WorkflowID: in.WorkflowID, RunID: in.RunID, Owner: in.RunID}

	target, o, msg, err := a.resolveCommit(ctx, in.Graph, in.ToCommit, in.ToTag)
	var head branchHead
	if err == nil && o == "" {
		head, o, msg, err = a.readBranchHead(ctx, in.Graph, in.Branch)
	}
	if err != nil {
		return PrepareRestoreResult{}, err
	}
	if o == "" && !head.head.ID.IsV2() {
		// Every input checked before the first ledger write: the restore
		// commit on today's head must encode. (A format-2 restore commit is
		// checked by its plan: graph.PlanAppendOn.)
		if _, err := format.EncodeCommit(restoreCommit(in.Branch, head.head, target, in.OpID, in.Author, in.Message, head.head.Time)); err != nil {
			o, msg = outcome.Invalid, fmt.Sprintf("restore commit: %v", err)
		}
	}
	if o != "" {
		r, err := a.recordOnly(ctx, rec)
		if err != nil || !r.owned {
			return PrepareRestoreResult{Outcome: r.outcome, Message: r.message}, err
		}
		return PrepareRestoreResult{Outcome: o, Message: msg, Owned: true}, nil
	}
	r, err := a.recordWithPins(ctx, rec, commitPins(in.Graph, target))
	if err != nil {
		return PrepareRestoreResult{}, err
	}
	res := PrepareRestoreResult{Owned: r.owned, Target: target.ID.String(), Time: r.op.CreatedAt.UTC()}
	if r.outcome != "" {
		res.Outcome, res.Message = r.outcome, r.message
		return res, nil
	}
	keys := []string{format.CommitIDKey(in.Graph, target.ID)}
	for table, v := range target.Pins {
		keys = append(keys, format.TableVersionKey(in.Graph, table, v))
	}
	missing, err := a.probeKeys(ctx, keys...)
	if err != nil {
		return PrepareRestoreResult{}, err
	}
	if missing != "" {
		res.Outcome, res.Message = outcome.NotRetained, fmt.Sprintf("commit %s needs %s, which cleanup has reclaimed; nothing was restored", target.ID, missing)
	}
	return res, nil
}

// recordOnly records an operation that ends before any pin.
func (a *Activities) recordOnly(ctx context.Context, p catalog.OperationInsertParams) (recorded, error) {
	return a.recordWithPins(ctx, p, nil)
}

// resolveCommit reads the commit named by id, or by a live tag.
func (a *Activities) resolveCommit(ctx context.Context, graphName, id, tag string) (format.Commit, outcome.Outcome, string, error) {
	if tag != "" {
		if err := format.ValidateTagName(tag); err != nil {
			return format.Commit{}, outcome.Invalid, fmt.Sprintf("tag: %v", err), nil
		}
		t, err := graph.ReadTag(ctx, a.Store, graphName, tag)
		switch {
		case errors.Is(err, graph.ErrTagNotFound):
			return format.Commit{}, outcome.NotFound, fmt.Sprintf("tag %q does not exist in graph %q", tag, graphName), nil
		case isUnreadableObject(err):
			return format.Commit{}, outcome.Conflict, err.Error(), nil
		case err != nil:
			return format.Commit{}, "", "", fmt.Errorf("read tag: %w", err)
		case t.Tag.State != format.TagLive:
			return format.Commit{}, outcome.NotFound, fmt.Sprintf("tag %q was deleted (by operation %s)", tag, t.Tag.RetiredOp), nil
		}
		id = t.Tag.Commit.String()
	} else if _, err := format.ParseCommitID(id); err != nil {
		return format.Commit{}, outcome.Invalid, fmt.Sprintf("commit: %v", err), nil
	}
	var c format.Commit
	var err error
	if cid, _ := format.ParseCommitID(id); cid.IsV2() {
		// A format-2 commit: its id, branch, parents, time and op (its pins are a map).
		var c2 graph.Commit
		c2, err = graph.ReadCommitAny(ctx, a.Store, graphName, id)
		c = format.Commit{ID: c2.ID, Branch: c2.Branch, Parents: c2.Parents, Time: c2.Time, Op: c2.Op}
	} else {
		c, err = graph.ReadCommit(ctx, a.Store, graphName, id)
	}
	switch {
	case errors.Is(err, graph.ErrCommitNotFound) && tag != "":
		return format.Commit{}, outcome.NotRetained, fmt.Sprintf("tag %q names commit %s, which no longer exists", tag, id), nil
	case errors.Is(err, graph.ErrCommitNotFound):
		// A later commit of the same tree proves this one existed: cleanup reclaimed it.
		cid, _ := format.ParseCommitID(id)
		if head, herr := graph.ReadHead(ctx, a.Store, graphName, cid.Tree); herr == nil && head.ID.Seq > cid.Seq {
			return format.Commit{}, outcome.NotRetained, fmt.Sprintf("commit %s was reclaimed by cleanup", id), nil
		}
		return format.Commit{}, outcome.NotFound, fmt.Sprintf("commit %s does not exist (or cleanup reclaimed its whole tree)", id), nil
	case isUnreadableObject(err):
		return format.Commit{}, outcome.Conflict, err.Error(), nil
	case err != nil:
		return format.Commit{}, "", "", fmt.Errorf("read commit: %w", err)
	}
	return c, "", "", nil
}

// BackupTagName is the default name of the backup tag a restore takes of
// head, the branch's head before the restore: "backup/{branch}/{head}", or
// "backup/{head}" when the branch name is too long for that. The name is a
// function of the head, so a restore that re-plans on a moved head backs up
// each head it replaces under its own name, and two restores of the same
// head share one backup.
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

// PlanRestoreResult is the restore commit planned on the current head, and
// the backup tag of that head, or the outcome that ends the restore.
type PlanRestoreResult struct {
	Outcome outcome.Outcome
	Message string
	// Committed: this operation's restore commit is stored already.
	Committed bool
	// Moved: the head read moved on (cleanup reclaimed it before its pin was
	// registered): plan again on the new head.
	Moved bool
	// Head is the head the restore replaces.
	Head string
	// BackupTag is the backup tag's name and Tag its write; empty without a backup.
	BackupTag string
	Tag       WriteSpec
	// Commit is the restore commit's id, Spec its write.
	Commit string
	Spec   WriteSpec
}

// PlanRestore reads the branch's real head (which must be the expected head,
// if one was given), pins it — the backup tag will name it — then probes it
// still exists, and computes the backup tag and the restore commit: first
// parent the head, the target's pins, restored_from the target. It writes
// nothing to storage. A restore commit this operation sent already (recorded
// as its pending write) is recognised first, so a plan re-run after a worker
// crash never appends the restore again on a newer head.
func (a *Activities) PlanRestore(ctx context.Context, in PlanRestoreInput) (PlanRestoreResult, error) {
	end := func(o outcome.Outcome, f string, args ...any) (PlanRestoreResult, error) {
		return PlanRestoreResult{Outcome: o, Message: fmt.Sprintf(f, args...)}, nil
	}
	targetID, err := format.ParseCommitID(in.Target)
	if err != nil {
		return end(outcome.Invalid, "target: %v", err)
	}
	if own, ok, err := a.ownPendingCommit(ctx, in.Owner, in.Graph); err != nil || ok {
		if err != nil {
			return PlanRestoreResult{}, err
		}
		return PlanRestoreResult{Committed: own.landed, Commit: own.commit.ID.String(), Head: firstParent(own.commit), Spec: own.spec}, nil
	}
	bh, o, msg, err := a.readBranchHead(ctx, in.Graph, in.Branch)
	if err != nil || o != "" {
		return PlanRestoreResult{Outcome: o, Message: msg}, err
	}
	if bh.branch.RefFormat == format.Version2 {
		return a.planRestoreV2(ctx, in, bh.branch, targetID)
	}
	head := bh.head
	if head.Op == in.Owner.OpID && head.RestoredFrom == targetID {
		return PlanRestoreResult{Committed: true, Commit: head.ID.String(), Head: firstParent(head)}, nil
	}
	if in.ExpectedHead != "" && head.ID.String() != in.ExpectedHead {
		return end(outcome.Conflict, "the head of %q is %s, not the expected %s", in.Branch, head.ID, in.ExpectedHead)
	}
	target, err := graph.ReadCommit(ctx, a.Store, in.Graph, in.Target)
	switch {
	case errors.Is(err, graph.ErrCommitNotFound):
		return end(outcome.NotRetained, "commit %s no longer exists", in.Target)
	case err != nil:
		return PlanRestoreResult{}, fmt.Errorf("read target: %w", err)
	}
	headKey := format.CommitIDKey(in.Graph, head.ID)
	if err := a.Catalog.PinsRegister(ctx, catalog.PinsRegisterParams{OpID: in.Owner.OpID, Graph: in.Graph, Owner: in.Owner.Run,
		Pins: []catalog.Pin{{Kind: catalog.ObjectCommit, Key: headKey}}}); err != nil {
		if errors.Is(err, catalog.ErrCondemned) {
			return end(outcome.NotRetained, "head %s is condemned by a running cleanup: %v", head.ID, err)
		}
		return PlanRestoreResult{}, fmt.Errorf("pin head: %w", err)
	}
	// Pin, then probe: the head read may have moved on and been reclaimed by a
	// cleanup that finished before the pin. A backup tag must never name it.
	if missing, err := a.probeKeys(ctx, headKey); err != nil || missing != "" {
		if err != nil {
			return PlanRestoreResult{}, err
		}
		return PlanRestoreResult{Moved: true, Head: head.ID.String(),
			Message: fmt.Sprintf("head %s of %q was reclaimed after it was read: the branch moved on", head.ID, in.Branch)}, nil
	}
	res := PlanRestoreResult{Head: head.ID.String()}
	if !in.NoBackup {
		res.BackupTag = in.BackupTag
		if res.BackupTag == "" {
			res.BackupTag = BackupTagName(in.Branch, res.Head)
		}
		body, err := graph.TagBytes(graph.TagParams{Graph: in.Graph, Name: res.BackupTag, Commit: res.Head, Op: in.Owner.OpID, Time: in.Time})
		if err != nil {
			return end(outcome.Invalid, "backup tag: %v", err)
		}
		res.Tag = WriteSpec{Kind: WriteTag, Graph: in.Graph, Body: body, Subject: res.BackupTag}
	}
	c := restoreCommit(in.Branch, head, target, in.Owner.OpID, in.Author, in.Message, in.Time)
	body, err := format.EncodeCommit(c)
	if err != nil {
		return end(outcome.Invalid, "restore commit: %v", err)
	}
	res.Commit, res.Spec = c.ID.String(), WriteSpec{Kind: WriteCommit, Graph: in.Graph, Body: body, Landed: outcome.Done, Subject: c.ID.String()}
	return res, nil
}

// restoreCommit is the commit restoring target's pins on top of head.
func restoreCommit(branch string, head, target format.Commit, op, author, message string, at time.Time) format.Commit {
	if author == "" {
		author = "graft"
	}
	if message == "" {
		message = fmt.Sprintf("restore %s to %s", branch, target.ID)
	}
	c := format.Commit{
		ID:           format.CommitID{Tree: head.ID.Tree, Seq: head.ID.Seq + 1},
		Branch:       branch,
		Parents:      []format.CommitID{head.ID},
		Pins:         maps.Clone(target.Pins),
		RestoredFrom: target.ID,
		Lineage:      format.Lineage(head.ID.Tree, head),
		Author:       author,
		Message:      message,
		Time:         at.UTC(),
		Op:           op,
	}
	if c.Pins == nil {
		c.Pins = map[string]ulid.ULID{}
	}
	return c
}
