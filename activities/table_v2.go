package activities

import (
	"context"
	"errors"
	"fmt"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/storage"
)

// The format-2 half of a table write (docs/format.md): the version is a manifest map whose
// entries are the uploaded objects, named by their ULIDs; the commit is planned on the
// branch's real head — the one its live ref names — and written as a publish.

// manifestEntriesV2 are a write's uploaded objects as format-2 manifest entries.
func manifestEntriesV2(entries []format.ObjectEntry) []format.ManifestEntry {
	out := make([]format.ManifestEntry, 0, len(entries))
	for _, e := range entries {
		out = append(out, format.ManifestEntry{Name: e.ID.String(), Object: e.ID, Size: e.Size, SHA256: e.SHA256})
	}
	return out
}

// writeManifestV2 plans the version, pins its new manifest chunks, and writes the chunks
// then the version, put-if-absent (graph.WriteVersion): its bytes are a function of the
// input, so a retry re-sends the same version.
func (a *Activities) writeManifestV2(ctx context.Context, in WriteManifestInput, version ulid.ULID, entries []format.ObjectEntry) (WriteManifestResult, error) {
	if in.Edit.onHead() {
		return WriteManifestResult{}, nil // the plan writes the version, on the head's
	}
	g, err := a.graphOf(in.Graph)
	if err != nil {
		return WriteManifestResult{Outcome: outcome.Invalid, Message: err.Error()}, nil
	}
	spec := graph.VersionSpec{Table: in.Table, VersionID: version, Put: versionEntries(entries, in.Edit.Imports), Time: in.Time.UTC(), Op: in.OpID}
	if in.Edit.Staged != "" {
		// The staged version lists the objects: the new one is it plus the imports, and
		// shares every chunk with it (PrepareWrite pinned and probed them).
		if spec.Base, err = format.ParseULID(in.Edit.Staged); err != nil {
			return WriteManifestResult{Outcome: outcome.Invalid, Message: "staged: " + err.Error()}, nil
		}
	}
	plan, err := g.PlanVersion(ctx, spec)
	switch {
	case errors.Is(err, graph.ErrInvalid):
		return WriteManifestResult{Outcome: outcome.Invalid, Message: err.Error()}, nil
	case errors.Is(err, graph.ErrVersionNotFound), errors.Is(err, graph.ErrChunkNotFound):
		return WriteManifestResult{Outcome: outcome.NotRetained, Message: "the staged version was reclaimed: " + err.Error()}, nil
	case err != nil:
		return WriteManifestResult{}, fmt.Errorf("plan version: %w", err)
	}
	var chunks []string
	for _, c := range plan.Chunks {
		chunks = append(chunks, c.Key)
	}
	if o, msg, err := a.pinKeys(ctx, Owner{OpID: in.OpID}, in.Graph, catalog.ObjectTableVersion, chunks); err != nil || o != "" {
		return WriteManifestResult{Outcome: o, Message: msg}, err
	}
	err = g.WriteVersion(ctx, plan)
	switch {
	case errors.Is(err, graph.ErrKeyTaken):
		return WriteManifestResult{Outcome: outcome.Conflict, Message: plan.Key + " already holds another manifest"}, nil
	case errors.Is(err, storage.ErrRefused):
		return WriteManifestResult{Outcome: outcome.Refused, Message: err.Error()}, nil
	case err != nil:
		return WriteManifestResult{}, fmt.Errorf("put manifest: %w", err)
	}
	return WriteManifestResult{}, nil
}

// maxPreChunks is the most manifest chunks an append's publish carries in its record (the
// ledger's pending write); an append of more — a staged list — writes them in the plan.
const maxPreChunks = 16

// planCommitV2 plans the commit pinning version on the branch's real head: its live ref's
// head, compared with an expected head (a mismatch is conflict, never a plan on the
// expected commit), and pins every key the plan writes before it is written.
func (a *Activities) planCommitV2(ctx context.Context, in PlanCommitInput, b graph.Branch, version ulid.ULID) (PlanCommitResult, error) {
	end := func(o outcome.Outcome, f string, args ...any) (PlanCommitResult, error) {
		return PlanCommitResult{Outcome: o, Message: fmt.Sprintf(f, args...)}, nil
	}
	if in.ExpectedHead != "" {
		id, err := format.ParseCommitID(in.ExpectedHead)
		if err != nil {
			return end(outcome.Invalid, "expected head: %v", err)
		}
		if id.Tree != b.Tree {
			return end(outcome.Conflict, "expected head %s is not on %s, the live incarnation of %q", in.ExpectedHead, b.Native, in.Branch)
		}
	}
	g, err := a.graphOf(in.Graph)
	if err != nil {
		return end(outcome.Invalid, "%v", err)
	}
	head, err := g.HeadOf(ctx, b)
	if isUnreadableObject(err) || errors.Is(err, graph.ErrCommitNotFound) {
		return end(outcome.Conflict, "read head of %s: %v", b.Native, err)
	}
	if err != nil {
		return PlanCommitResult{}, fmt.Errorf("read head: %w", err)
	}
	if head.Commit.Op == in.Owner.OpID {
		// Our commit is the head already (an earlier attempt published it).
		if v, ok, err := g.Pin(ctx, head.Commit, in.Table); err == nil && (ok && v == version || in.Edit.onHead()) {
			return PlanCommitResult{Committed: true, Commit: head.Commit.ID.String(), Parent: head.Commit.FirstParent().String(), Version: v.String()}, nil
		}
	}
	if in.ExpectedHead != "" && head.Commit.ID.String() != in.ExpectedHead {
		return end(outcome.Conflict, "the head of %q is %s, not the expected %s", in.Branch, head.Commit.ID, in.ExpectedHead)
	}
	var edited *graph.VersionPlan
	if in.Edit.onHead() {
		// The version edits the one the head pins; its id is a function of the operation
		// and the head, so a re-plan on a moved head mints another.
		base, _, err := g.Pin(ctx, head.Commit, in.Table)
		if err != nil {
			return PlanCommitResult{}, fmt.Errorf("read the head's version: %w", err)
		}
		objs, _, o, msg, err := a.writeObjects(ctx, in.Graph, in.Table, in.Owner.OpID, in.Objects, in.Edit)
		if err != nil || o != "" {
			return PlanCommitResult{Outcome: o, Message: msg}, err
		}
		entries, _, err := objectEntries(objs, storage.MaxObjectSize)
		if err != nil {
			return end(outcome.Invalid, "%v", err)
		}
		vp, err := g.PlanVersion(ctx, graph.VersionSpec{Table: in.Table, Base: base, Put: versionEntries(entries, in.Edit.Imports),
			Delete: in.Edit.Remove, Time: in.Time.UTC(), Op: in.Owner.OpID,
			VersionID: nativeULID(in.Owner.OpID+"/version/"+head.Commit.ID.String(), 0, in.Time)})
		switch {
		case errors.Is(err, graph.ErrInvalid):
			return end(outcome.Invalid, "%v", err)
		case errors.Is(err, graph.ErrVersionNotFound):
			return end(outcome.NotRetained, "the head's version of %s was reclaimed: %v", in.Table, err)
		case isUnreadableObject(err), errors.Is(err, graph.ErrCorrupt):
			return end(outcome.Conflict, "plan version on %s: %v", b.Native, err)
		case err != nil:
			return PlanCommitResult{}, fmt.Errorf("plan version: %w", err)
		}
		if o, msg, err := a.pinKeys(ctx, in.Owner, in.Graph, catalog.ObjectTableVersion, vp.Keys()); err != nil || o != "" {
			return PlanCommitResult{Outcome: o, Message: msg}, err
		}
		if len(vp.Chunks) > maxPreChunks {
			// Too many to carry in the publish's record (a staged append): write them now,
			// pinned, put-if-absent; the publish carries only the version.
			if err := g.PutChunks(ctx, vp.Chunks); err != nil {
				if errors.Is(err, storage.ErrRefused) {
					return end(outcome.Refused, "write the appended version's chunks: %v", err)
				}
				return PlanCommitResult{}, fmt.Errorf("write the appended version's chunks: %w", err)
			}
			vp.Chunks = nil
		}
		edited, version = &vp, vp.Version.ID
	}
	author := in.Author
	if author == "" {
		author = "graft"
	}
	message := in.Message
	if message == "" {
		message = fmt.Sprintf("write table %s version %s", in.Table, version)
	}
	plan, err := g.PlanAppendOn(ctx, head, graph.CommitSpec{Branch: in.Branch, ExpectedHead: in.ExpectedHead,
		SetPins: map[string]ulid.ULID{in.Table: version}, Author: author, Message: message, Time: in.Time.UTC(), Op: in.Owner.OpID})
	var stale *graph.StaleHeadError
	switch {
	case errors.As(err, &stale):
		return end(outcome.Conflict, "the head of %q is %s, not the expected %s", in.Branch, head.Commit.ID, in.ExpectedHead)
	case errors.Is(err, graph.ErrInvalid):
		return end(outcome.Invalid, "%v", err)
	case isUnreadableObject(err), errors.Is(err, graph.ErrCorrupt):
		return end(outcome.Conflict, "plan on %s: %v", b.Native, err)
	case err != nil:
		return PlanCommitResult{}, fmt.Errorf("plan commit: %w", err)
	}
	spec := publishSpec(in.Graph, plan, outcome.Done)
	res := PlanCommitResult{Commit: plan.Commit.ID.String(), Parent: head.Commit.ID.String()}
	if edited != nil {
		for _, c := range edited.Chunks {
			spec.Pre = append(spec.Pre, ChunkPut{Key: c.Key, Body: c.Body})
		}
		spec.Pre = append(spec.Pre, ChunkPut{Key: edited.Key, Body: edited.Body})
		res.Version = version.String()
	}
	if o, msg, err := a.pinAndRecord(ctx, in.Owner, in.Graph, keyPins(catalog.ObjectCommit, plan.Keys()...), spec); err != nil || o != "" {
		return PlanCommitResult{Outcome: o, Message: msg}, err
	}
	res.Spec, res.PendingRecorded = spec, true
	return res, nil
}

// ownPendingPublish is ownPendingCommit for a format-2 publish: published (the ref's head
// is our commit or descends from it) → landed; the ref still what the plan read → the same
// publish again; moved without it → not returned (the caller plans anew).
func (a *Activities) ownPendingPublish(ctx context.Context, spec WriteSpec) (ownCommit, bool, error) {
	p, err := publishOf(spec)
	if err != nil {
		return ownCommit{}, false, nil
	}
	own := ownCommit{spec: spec, commit: format.Commit{ID: p.Commit.ID, Parents: p.Commit.Parents}}
	v, err := a.readPublish(ctx, spec)
	if err != nil {
		return ownCommit{}, false, err
	}
	switch v.State {
	case Landed:
		own.landed = true
		return own, true, nil
	case Ambiguous:
		return own, true, nil
	}
	return ownCommit{}, false, nil
}
