package activities

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/storage"
)

// TableObject is one data object of a new table version, uploaded under format.ObjectKey.
type TableObject struct {
	ID     string // ULID
	Size   int64
	SHA256 string // lower-case hex
}

// PrepareWriteInput is the input of PrepareWrite.
type PrepareWriteInput struct {
	OpID, Graph, Branch, Table string
	Objects                    []TableObject
	Edit                       TableEdit
	// ExpectedHead is the commit the branch's head must be; "" for whatever it is.
	ExpectedHead      string
	Author, Message   string
	WorkflowID, RunID string // the workflow's; RunID claims the ledger row
	// Planned: the objects are not uploaded yet (a pin-first write): pin them and probe
	// nothing; the write probes them (ProbeWrite) once its client uploaded them.
	Planned bool
	// StagedPlan, with Edit.Staged, is the staged list not put yet: Planned pins its keys
	// and objects without reading it; ProbeWrite checks the list against it.
	StagedPlan *StagedPlan
}

// PrepareWriteResult is what PrepareWrite decided; an Outcome ends the write.
type PrepareWriteResult struct {
	Outcome outcome.Outcome
	Message string
	Owned   bool // the ledger row is this run's: the kernel finishes it
	// Time is the operation's first recording, in the manifest and the commit.
	Time    time.Time
	Version string // the new table version's ULID
	Objects int    // the write's uploaded objects, inline or staged
	Native  string // the branch's live incarnation when the write started
	Bytes   int64
	// Recorded is the result this run recorded when it finished the operation, found
	// when the step runs again after that end (docs/operations.md).
	Recorded json.RawMessage `json:",omitempty"`
}

// objectProbeConcurrency bounds the parallel HEADs of a probe.
const objectProbeConcurrency = 8

// PrepareWrite validates a table write, records the operation, checks that the graph and
// branch exist, pins the new version and its data objects, then probes that every object
// was uploaded with its size: a cleanup either sees the pins or refuses them. A Planned
// write stops after the pins: its objects are uploaded after them, so no cleanup may
// reclaim one, whatever its guard window.
func (a *Activities) PrepareWrite(ctx context.Context, in PrepareWriteInput) (PrepareWriteResult, error) {
	end := func(o outcome.Outcome, f string, args ...any) (PrepareWriteResult, error) {
		return PrepareWriteResult{Outcome: o, Message: fmt.Sprintf(f, args...)}, nil
	}
	if err := firstError(format.ValidateGraphName(in.Graph), format.ValidateBranchName(in.Branch),
		format.ValidateTableName(in.Table), format.ValidateOp(in.OpID), format.ValidateMessage(in.Message),
		validAuthor(in.Author)); err != nil {
		return end(outcome.Invalid, "%v", err)
	}
	if in.ExpectedHead != "" {
		if _, err := format.ParseCommitID(in.ExpectedHead); err != nil {
			return end(outcome.Invalid, "expected head: %v", err)
		}
	}
	if err := in.Edit.check(); err != nil {
		return end(outcome.Invalid, "%v", err)
	}
	// A key a graph owns or may come to own is never imported (docs/format.md, *Ownership*):
	// its shape is checked here, a graph at its prefix once the graph's format is known.
	for i, im := range in.Edit.Imports {
		if why := graph.ImportKeyOwned(in.Graph, im.Key); why != "" {
			return end(outcome.Invalid, "imports[%d]: %s is %s; import only objects outside every graph's prefix", i, im.Key, why)
		}
	}
	var (
		objs      []TableObject
		st        staged
		stagedOut outcome.Outcome
		stagedMsg string
		planned   = in.Planned && in.StagedPlan != nil
		err       error
	)
	if in.StagedPlan != nil && !in.Planned {
		return end(outcome.Invalid, "a staged plan is for a write that awaits its upload (await_upload)")
	}
	if planned {
		if in.Edit.Staged == "" || len(in.Objects) > 0 {
			return end(outcome.Invalid, "a staged plan needs a staged version and no objects inline")
		}
		if st, err = plannedStaged(in.Graph, in.Table, in.Edit.Staged, *in.StagedPlan); err != nil {
			return end(outcome.Invalid, "%v", err)
		}
		objs = st.objects
	} else if objs, st, stagedOut, stagedMsg, err = a.writeObjects(ctx, in.Graph, in.Table, in.OpID, in.Objects, in.Edit); err != nil {
		return PrepareWriteResult{}, err
	}
	if stagedOut == outcome.Invalid {
		return end(stagedOut, "%s", stagedMsg)
	}
	var (
		entries []objectEntry
		total   int64
		digest  string
	)
	if planned { // by ULID only: their sizes and checksums are in the list, not put yet
		entries = mapped(objs, func(o TableObject) objectEntry { return objectEntry{ID: ulid.MustParse(o.ID)} })
		total, digest = in.StagedPlan.Bytes, in.StagedPlan.ObjectsSHA256
	} else {
		if entries, total, err = objectEntries(objs); err != nil {
			return end(outcome.Invalid, "%v", err)
		}
		digest = objectsDigest(entries)
	}
	fields := map[string]any{
		"branch": in.Branch, "table": in.Table, "expected_head": in.ExpectedHead, "author": in.Author,
		"message": in.Message, "objects": len(entries), "bytes": total, "objects_sha256": digest,
	}
	if !in.Edit.empty() {
		fields["edit_sha256"] = in.Edit.digest()
	}
	c, err := a.claim(ctx, nil, opRecord(catalog.OpWriteTable, in.OpID, in.Graph, in.WorkflowID, in.RunID, fields))
	if err != nil || !c.owned {
		return PrepareWriteResult{Outcome: c.outcome, Message: c.message, Recorded: c.recorded}, err
	}
	op := c.op
	res := PrepareWriteResult{Owned: true, Time: op.CreatedAt.UTC(), Bytes: total, Objects: len(entries)}
	stop := func(o outcome.Outcome, f string, args ...any) (PrepareWriteResult, error) {
		res.Outcome, res.Message = o, fmt.Sprintf(f, args...)
		return res, nil
	}
	res.Version = nativeULID(in.OpID+"/version", 0, res.Time).String()

	switch _, err := graph.ReadGraph(ctx, a.Store, in.Graph); {
	case errors.Is(err, graph.ErrGraphNotFound):
		return stop(outcome.NotFound, "graph %q does not exist; create it with `graft graph init %s`", in.Graph, in.Graph)
	case isUnreadableObject(err):
		return stop(outcome.Conflict, "graph %q: its graph record is unreadable: %v", in.Graph, err)
	case err != nil:
		return PrepareWriteResult{}, fmt.Errorf("read graph: %w", err)
	}
	if len(in.Edit.Imports) > 0 {
		keys := mapped(in.Edit.Imports, func(im TableImport) string { return im.Key })
		err := graph.CheckImportKeys(ctx, a.Store, in.Graph, keys, func(i int) string { return fmt.Sprintf("imports[%d]", i) })
		switch {
		case errors.Is(err, graph.ErrInvalid):
			return stop(outcome.Invalid, "%v", err)
		case err != nil:
			return PrepareWriteResult{}, fmt.Errorf("check imports: %w", err)
		}
	}
	if stagedOut != "" {
		return stop(stagedOut, "%s", stagedMsg)
	}
	b, out, msg, err := a.resolveWriteBranch(ctx, in.Graph, in.Branch)
	if err != nil || out != "" {
		if err != nil {
			return PrepareWriteResult{}, err
		}
		return stop(out, "%s", msg)
	}
	res.Native = b.Native
	if in.ExpectedHead != "" {
		if head, _ := format.ParseCommitID(in.ExpectedHead); head.Tree != b.Tree {
			return stop(outcome.Conflict, "expected head %s is not on %s, the live incarnation of %q", in.ExpectedHead, b.Native, in.Branch)
		}
	}

	version, _ := ulid.Parse(res.Version)
	pins := append(keyPins(catalog.ObjectTableVersion, format.TableVersionKey(in.Graph, in.Table, version)),
		keyPins(catalog.ObjectData, objectKeys(in.Graph, in.Table, entries)...)...)
	pins = append(pins, keyPins(catalog.ObjectTableVersion, st.keys...)...)
	if err := a.Catalog.PinsRegister(ctx, catalog.PinsRegisterParams{OpID: in.OpID, Graph: in.Graph, Pins: pins, Owner: in.RunID}); err != nil {
		if errors.Is(err, catalog.ErrCondemned) {
			return stop(outcome.NotRetained, "uploaded objects are condemned by a running cleanup: %v", err)
		}
		return PrepareWriteResult{}, fmt.Errorf("pin version: %w", err)
	}
	if in.Planned {
		return res, nil
	}
	if o, msg, err := a.probeWrite(ctx, in, entries, st); err != nil || o != "" {
		if err != nil {
			return PrepareWriteResult{}, err
		}
		return stop(o, "%s", msg)
	}
	return res, nil
}

// probeWrite probes what a pinned write names: every object with its size, the staged
// version's own keys, the imports.
func (a *Activities) probeWrite(ctx context.Context, in PrepareWriteInput, entries []objectEntry, st staged) (outcome.Outcome, string, error) {
	if o, msg, err := a.probeObjects(ctx, in.Graph, in.Table, entries); err != nil || o != "" {
		return o, msg, err
	}
	if o, msg, err := a.probeStaged(ctx, st); err != nil || o != "" {
		return o, msg, err
	}
	return a.probeImports(ctx, in.Edit.Imports)
}

// ProbeWrite probes, after its client uploaded them, the objects a pin-first write
// pinned (PrepareWrite, Planned): every object with its size, the staged version's keys,
// the imports. An Outcome ends the write; the rest of the result is empty.
func (a *Activities) ProbeWrite(ctx context.Context, in PrepareWriteInput) (PrepareWriteResult, error) {
	end := func(o outcome.Outcome, msg string) (PrepareWriteResult, error) {
		return PrepareWriteResult{Outcome: o, Message: msg}, nil
	}
	objs, st, stagedOut, stagedMsg, err := a.writeObjects(ctx, in.Graph, in.Table, in.OpID, in.Objects, in.Edit)
	if err != nil || stagedOut != "" {
		return PrepareWriteResult{Outcome: stagedOut, Message: stagedMsg}, err
	}
	if in.StagedPlan != nil {
		plan, err := plannedStaged(in.Graph, in.Table, in.Edit.Staged, *in.StagedPlan)
		if err != nil {
			return end(outcome.Invalid, err.Error())
		}
		if why := checkPlanned(st, plan, *in.StagedPlan); why != "" {
			return end(outcome.Invalid, fmt.Sprintf("staged version %s is not the list the write planned: %s", st.id, why))
		}
	}
	entries, _, err := objectEntries(objs)
	if err != nil {
		return end(outcome.Invalid, err.Error())
	}
	o, msg, err := a.probeWrite(ctx, in, entries, st)
	return PrepareWriteResult{Outcome: o, Message: msg}, err
}

// resolveWriteBranch finds the live incarnation a write appends to (resolveBranch), or the
// outcome that ends the write.
func (a *Activities) resolveWriteBranch(ctx context.Context, graphName, branch string) (graph.Branch, outcome.Outcome, string, error) {
	b, err := a.resolveBranch(ctx, graphName, branch)
	var ml *graph.MultipleLiveError
	switch {
	case err == nil:
		return b, "", "", nil
	case errors.Is(err, graph.ErrBranchNotFound):
		return b, outcome.NotFound, fmt.Sprintf("branch %q does not exist in graph %q", branch, graphName), nil
	case errors.As(err, &ml):
		return b, outcome.Conflict, fmt.Sprintf("%v; %s", ml, ml.RepairHint()), nil
	case isUnreadableObject(err):
		return b, outcome.Conflict, fmt.Sprintf("branch %q: %v", branch, err), nil
	}
	return b, "", "", fmt.Errorf("resolve branch: %w", err)
}

// objectEntry is one uploaded object of a write, validated.
type objectEntry struct {
	ID     ulid.ULID
	Size   int64
	SHA256 string
}

// objectEntries validates a version's object list and returns it sorted by ID, with its size.
func objectEntries(objs []TableObject) ([]objectEntry, int64, error) {
	entries := make([]objectEntry, 0, len(objs))
	seen := make(map[ulid.ULID]bool, len(objs))
	var total int64
	for i, o := range objs {
		id, err := format.ParseULID(o.ID)
		if err != nil {
			return nil, 0, fmt.Errorf("objects[%d].id: %w", i, err)
		}
		if seen[id] {
			return nil, 0, fmt.Errorf("objects[%d].id: %s listed twice", i, id)
		}
		seen[id] = true
		if o.Size < 0 || o.Size > storage.MaxObjectSize {
			return nil, 0, fmt.Errorf("objects[%d].size: %d is outside 0..%d", i, o.Size, storage.MaxObjectSize)
		}
		if b, err := hex.DecodeString(o.SHA256); err != nil || len(b) != sha256.Size || hex.EncodeToString(b) != o.SHA256 {
			return nil, 0, fmt.Errorf("objects[%d].sha256: not 64 lower-case hex digits", i)
		}
		entries = append(entries, objectEntry{ID: id, Size: o.Size, SHA256: o.SHA256})
		total += o.Size
	}
	slices.SortFunc(entries, func(a, b objectEntry) int { return a.ID.Compare(b.ID) })
	return entries, total, nil
}

// objectsDigest identifies an object list in the ledger's record of the inputs.
func objectsDigest(entries []objectEntry) string {
	h := sha256.New()
	for _, e := range entries {
		fmt.Fprintf(h, "%s %d %s\n", e.ID, e.Size, e.SHA256)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func objectKeys(graphName, table string, entries []objectEntry) []string {
	return mapped(entries, func(e objectEntry) string { return format.ObjectKey(graphName, table, e.ID) })
}

// probeObjects HEADs every object: each must exist with its listed size.
func (a *Activities) probeObjects(ctx context.Context, graphName, table string, entries []objectEntry) (outcome.Outcome, string, error) {
	infos, errs := a.headAll(ctx, objectKeys(graphName, table, entries))
	for i, e := range entries {
		switch {
		case errors.Is(errs[i], storage.ErrNotFound):
			return outcome.NotRetained, fmt.Sprintf("data object %s of table %q is missing: never uploaded, or reclaimed by cleanup", e.ID, table), nil
		case errs[i] != nil:
			return "", "", fmt.Errorf("probe data object %s: %w", e.ID, errs[i])
		case infos[i].Size != e.Size:
			return outcome.Invalid, fmt.Sprintf("data object %s holds %d bytes, not the %d listed", e.ID, infos[i].Size, e.Size), nil
		}
	}
	return "", "", nil
}

// WriteManifestInput is the input of WriteManifest.
type WriteManifestInput struct {
	OpID, Graph, Table, Version string
	Objects                     []TableObject
	Time                        time.Time
	// Edit: imports join the version; an append or a remove is the plan's to write.
	Edit TableEdit
}

// WriteManifestResult is the output of WriteManifest: no Outcome, the manifest is stored.
type WriteManifestResult struct {
	Outcome outcome.Outcome
	Message string
}

// WriteManifest plans the new version, pins its new manifest chunks and puts the chunks then
// the version, after PrepareWrite probed its objects. Its bytes are a function of the input.
func (a *Activities) WriteManifest(ctx context.Context, in WriteManifestInput) (WriteManifestResult, error) {
	version, err := format.ParseULID(in.Version)
	if err != nil {
		return WriteManifestResult{Outcome: outcome.Invalid, Message: "version: " + err.Error()}, nil
	}
	var entries []objectEntry
	if in.Edit.Staged == "" { // else the staged version lists them
		if entries, _, err = objectEntries(in.Objects); err != nil {
			return WriteManifestResult{Outcome: outcome.Invalid, Message: err.Error()}, nil
		}
	}
	if in.Edit.onHead() {
		return WriteManifestResult{}, nil // the plan writes the version, on the head's
	}
	g, err := a.openGraph(in.Graph)
	if err != nil {
		return WriteManifestResult{Outcome: outcome.Invalid, Message: err.Error()}, nil
	}
	spec := graph.VersionSpec{Table: in.Table, VersionID: version, Put: versionEntries(entries, in.Edit.Imports), Time: in.Time.UTC(), Op: in.OpID}
	if in.Edit.Staged != "" {
		// The new version is the staged one plus the imports, sharing its chunks.
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
	pins := keyPins(catalog.ObjectTableVersion, mapped(plan.Chunks, func(c graph.Chunk) string { return c.Key })...)
	if o, msg, err := a.pinAndRecord(ctx, Owner{OpID: in.OpID}, in.Graph, pins, nil); err != nil || o != "" {
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

// PlanCommitInput is the input of PlanCommit.
type PlanCommitInput struct {
	Owner                         Owner
	Graph, Branch, Table, Version string
	ExpectedHead                  string
	Author, Message               string
	Time                          time.Time
	// Objects and Edit: an append or a remove plans the version on the head's (and writes
	// it with the commit).
	Objects []TableObject
	Edit    TableEdit
}

// PlanCommitResult is the commit PlanCommit computed, or the outcome that ends the write.
type PlanCommitResult struct {
	Outcome        outcome.Outcome
	Message        string
	Committed      bool   // this operation's commit is stored already
	Commit, Parent string // the new commit's id and its first parent's
	// Version, when set, is the version the commit pins (an append or a remove, planned on
	// the head's version); otherwise the prepared one.
	Version string
	Spec    WriteSpec // the commit write, with the exact bytes every put and re-issue sends
	// PendingRecorded: Spec is recorded as the pending write, with the pins of what it names.
	PendingRecorded bool `json:",omitempty"`
	// Recorded is the result this run recorded when it finished the operation, found
	// when the step runs again after that end (docs/operations.md).
	Recorded json.RawMessage `json:",omitempty"`
}

// PlanCommit reads the branch's real head (an expected head must be it) and computes the
// commit on top of it with the table's version replaced, pinning every key the plan
// writes; it writes nothing to storage. An earlier attempt's pending commit is recognised
// first: stored, committed; possibly in flight, the same commit again.
func (a *Activities) PlanCommit(ctx context.Context, in PlanCommitInput) (PlanCommitResult, error) {
	end := func(o outcome.Outcome, f string, args ...any) (PlanCommitResult, error) {
		return PlanCommitResult{Outcome: o, Message: fmt.Sprintf(f, args...)}, nil
	}
	version, err := format.ParseULID(in.Version)
	if err != nil {
		return end(outcome.Invalid, "version: %v", err)
	}
	if own, ok, err := a.ownPendingCommit(ctx, in.Owner, in.Graph); err != nil || ok {
		if own.ended {
			return PlanCommitResult{Outcome: own.out, Message: own.msg, Recorded: own.recorded}, nil
		}
		return PlanCommitResult{Committed: own.landed, Commit: own.id, Parent: own.parent, Spec: own.spec}, err
	}
	head, out, msg, err := a.readBranchHead(ctx, in.Graph, in.Branch)
	if err != nil || out != "" {
		return PlanCommitResult{Outcome: out, Message: msg}, err
	}
	// PrepareWrite checked the expected head's shape; the branch may be another incarnation now.
	if id, _ := format.ParseCommitID(in.ExpectedHead); in.ExpectedHead != "" && id.Tree != head.Tree {
		return end(outcome.Conflict, "expected head %s is not on %s, the live incarnation of %q", in.ExpectedHead, head.Native, in.Branch)
	}
	g, err := a.openGraph(in.Graph)
	if err != nil {
		return end(outcome.Invalid, "%v", err)
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
		// The version edits the head's; a re-plan on a moved head mints another id.
		base, _, err := g.Pin(ctx, head.Commit, in.Table)
		if err != nil {
			return PlanCommitResult{}, fmt.Errorf("read the head's version: %w", err)
		}
		objs, _, o, msg, err := a.writeObjects(ctx, in.Graph, in.Table, in.Owner.OpID, in.Objects, in.Edit)
		if err != nil || o != "" {
			return PlanCommitResult{Outcome: o, Message: msg}, err
		}
		entries, _, err := objectEntries(objs)
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
			return end(outcome.Conflict, "plan version on %s: %v", head.Native, err)
		case err != nil:
			return PlanCommitResult{}, fmt.Errorf("plan version: %w", err)
		}
		if o, msg, err := a.pinAndRecord(ctx, in.Owner, in.Graph, keyPins(catalog.ObjectTableVersion, vp.Keys()...), nil); err != nil || o != "" {
			return PlanCommitResult{Outcome: o, Message: msg}, err
		}
		if chunkBytes(vp.Chunks) > maxPreChunkBytes {
			// Too large to carry in the publish's record (a staged append): write them now.
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
	author, message := cmp.Or(in.Author, "graft"), cmp.Or(in.Message, fmt.Sprintf("write table %s version %s", in.Table, version))
	var changes map[string]graph.Change
	if edited != nil {
		if c, ok := graph.ChangeOf(edited.Version); ok {
			// The pin records the edit's counts from the head's version, for merges.
			changes = map[string]graph.Change{in.Table: c}
		}
	}
	plan, err := g.PlanAppendOn(ctx, head, graph.CommitSpec{Branch: in.Branch, ExpectedHead: in.ExpectedHead,
		SetPins: map[string]ulid.ULID{in.Table: version}, Changes: changes, Author: author, Message: message, Time: in.Time.UTC(), Op: in.Owner.OpID})
	var stale *graph.StaleHeadError
	switch {
	case errors.As(err, &stale):
		return end(outcome.Conflict, "the head of %q is %s, not the expected %s", in.Branch, head.Commit.ID, in.ExpectedHead)
	case errors.Is(err, graph.ErrInvalid):
		return end(outcome.Invalid, "%v", err)
	case isUnreadableObject(err), errors.Is(err, graph.ErrCorrupt):
		return end(outcome.Conflict, "plan on %s: %v", head.Native, err)
	case err != nil:
		return PlanCommitResult{}, fmt.Errorf("plan commit: %w", err)
	}
	spec := publishSpec(in.Graph, plan, outcome.Done)
	res := PlanCommitResult{Commit: plan.Commit.ID.String(), Parent: head.Commit.ID.String()}
	if edited != nil {
		spec.Pre = append(append(spec.Pre, chunkPuts(edited.Chunks)...), ChunkPut{Key: edited.Key, Body: edited.Body})
		res.Version = version.String()
	}
	if o, msg, err := a.pinAndRecord(ctx, in.Owner, in.Graph, keyPins(catalog.ObjectCommit, plan.Keys()...), &spec); err != nil || o != "" {
		return PlanCommitResult{Outcome: o, Message: msg}, err
	}
	res.Spec, res.PendingRecorded = spec, true
	return res, nil
}

// ownCommit is an operation's own commit write found in the ledger.
type ownCommit struct {
	spec       WriteSpec
	id, parent string // the commit's and its first parent's ids
	landed     bool
	// ended: the run finished the operation already (its steps run again after its end
	// was recorded); out, msg and recorded are that end.
	ended    bool
	out      outcome.Outcome
	msg      string
	recorded json.RawMessage
}

// ownPendingCommit finds the commit write this operation recorded as pending, if any, and
// whether it landed, so a re-run plan never plans a second commit on a newer head. One that
// can no longer land (the head moved past it) is not returned: the caller plans anew.
func (a *Activities) ownPendingCommit(ctx context.Context, o Owner, graphName string) (ownCommit, bool, error) {
	op, err := a.Catalog.OperationGet(ctx, catalog.OperationGetParams{ID: o.OpID})
	if errors.Is(err, catalog.ErrNotFound) {
		return ownCommit{}, false, nil
	}
	if err != nil {
		return ownCommit{}, false, fmt.Errorf("read operation: %w", err)
	}
	if recordedBy(op, o.Run) {
		return ownCommit{ended: true, out: outcome.Outcome(op.Outcome), msg: op.Error, recorded: op.Result}, true, nil
	}
	spec, ok := pendingSpec(op)
	if !ok || op.OwnerRun != o.Run || spec.Graph != graphName || spec.Kind != WritePublish {
		return ownCommit{}, false, nil
	}
	p, err := publishOf(spec)
	if err != nil {
		return ownCommit{}, false, nil
	}
	v, err := a.readPublish(ctx, WriteInput{Spec: spec})
	if err != nil || (v.State != Landed && v.State != Ambiguous) {
		return ownCommit{}, false, err
	}
	own := ownCommit{spec: spec, id: p.Commit.ID.String(), landed: v.State == Landed}
	if len(p.Commit.Parents) > 0 {
		own.parent = p.Commit.Parents[0].String()
	}
	return own, true, nil
}

// maxPreChunkBytes bounds the manifest chunks an append's publish carries in its record
// (the ledger's pending write, and the steps' inputs); an append of more writes them in
// the plan.
const maxPreChunkBytes = 1 << 20

// TableImport is an object of the store registered in a table by reference (docs/format.md
// "Zero-copy import"), with the size and ETag a HEAD gave the client; graft never writes it.
type TableImport struct {
	Name   string `json:"name"`
	Key    string `json:"key"`
	Size   int64  `json:"size"`
	ETag   string `json:"etag"`
	SHA256 string `json:"sha256,omitempty"`
}

// TableEdit says how a table write changes the table: by default the new version is
// exactly the write's objects and imports; with Append, the head's version plus them;
// Remove drops entries by name from the head's version.
type TableEdit struct {
	Append  bool          `json:"append,omitempty"`
	Remove  []string      `json:"remove,omitempty"`
	Imports []TableImport `json:"imports,omitempty"`
	// Staged names a staged version listing the write's objects (docs/format.md, "Staged object lists").
	Staged string `json:"staged,omitempty"`
}

func (e TableEdit) empty() bool {
	return !e.Append && len(e.Remove) == 0 && len(e.Imports) == 0 && e.Staged == ""
}

// onHead reports whether the new version edits the head's.
func (e TableEdit) onHead() bool { return e.Append || len(e.Remove) > 0 }

func (e TableEdit) check() error {
	seen := map[string]bool{}
	for i, n := range e.Remove {
		if err := format.ValidateEntryName(n); err != nil {
			return fmt.Errorf("remove[%d]: %w", i, err)
		}
		if seen[n] {
			return fmt.Errorf("remove[%d]: %s listed twice", i, n)
		}
		seen[n] = true
	}
	for i, im := range e.Imports {
		if err := format.ManifestMap.ValidateEntry(im.entry()); err != nil {
			return fmt.Errorf("imports[%d]: %w", i, err)
		}
		if seen[im.Name] {
			return fmt.Errorf("imports[%d]: %s is also imported or removed", i, im.Name)
		}
		seen[im.Name] = true
	}
	return nil
}

func (im TableImport) entry() format.ManifestEntry {
	return format.ManifestEntry{Name: im.Name, External: im.Key, Size: im.Size, ETag: im.ETag, SHA256: im.SHA256}
}

func (e TableEdit) digest() string {
	h := sha256.New()
	fmt.Fprintf(h, "append %v\n", e.Append)
	if e.Staged != "" {
		fmt.Fprintf(h, "staged %s\n", e.Staged)
	}
	for _, n := range e.Remove {
		fmt.Fprintf(h, "remove %s\n", n)
	}
	for _, im := range e.Imports {
		fmt.Fprintf(h, "import %s %s %d %s %s\n", im.Name, im.Key, im.Size, im.ETag, im.SHA256)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// versionEntries are a write's objects (named by their ULIDs) and imports as manifest
// entries, sorted by name.
func versionEntries(entries []objectEntry, imports []TableImport) []format.ManifestEntry {
	out := make([]format.ManifestEntry, 0, len(entries)+len(imports))
	for _, e := range entries {
		out = append(out, format.ManifestEntry{Name: e.ID.String(), Object: e.ID, Size: e.Size, SHA256: e.SHA256})
	}
	for _, im := range imports {
		out = append(out, im.entry())
	}
	slices.SortFunc(out, func(a, b format.ManifestEntry) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// probeImports checks every imported object is still what the client imported.
func (a *Activities) probeImports(ctx context.Context, imports []TableImport) (outcome.Outcome, string, error) {
	for _, im := range imports {
		err := graph.CheckExternal(ctx, a.Store, im.entry())
		switch {
		case errors.Is(err, storage.ErrNotFound):
			return outcome.NotFound, fmt.Sprintf("imported object %s does not exist", im.Key), nil
		case errors.Is(err, graph.ErrExternalChanged):
			return outcome.Conflict, err.Error(), nil
		case err != nil:
			return "", "", fmt.Errorf("probe imported object %s: %w", im.Key, err)
		}
	}
	return "", "", nil
}

// resolveBranch finds the live incarnation of logical (docs/format.md, "Read costs"). The
// ledger's open incarnation of the name is the hint: its ref is read (one GET) and, when
// live, is the branch; any other answer falls back to reading every ref of the name, so
// "not found" and "several live" are storage's answers (graph.ResolveBranchHinted).
func (a *Activities) resolveBranch(ctx context.Context, graphName, logical string) (graph.Branch, error) {
	hint, _, err := a.openIncarnation(ctx, graphName, logical)
	if err != nil {
		return graph.Branch{}, err
	}
	return graph.ResolveBranchHinted(ctx, a.Store, graphName, logical, hint.Native)
}

func (a *Activities) openIncarnation(ctx context.Context, graphName, logical string) (catalog.Incarnation, bool, error) {
	inc, err := a.Catalog.IncarnationOpen(ctx, catalog.IncarnationOpenParams{Graph: graphName, Logical: logical})
	switch {
	case errors.Is(err, catalog.ErrNotFound):
		return catalog.Incarnation{}, false, nil
	case err != nil:
		return catalog.Incarnation{}, false, fmt.Errorf("read the ledger's open incarnation of %q: %w", logical, err)
	}
	return inc, true, nil
}

// A write of many objects names them through a staged version (docs/format.md, "Staged
// object lists"): a table version of exactly the uploaded objects, written by the client
// before the workflow starts, so no workflow history or ledger record holds the list.

// MaxInlineObjects is the most objects a write request lists inline (more: a staged
// version). At most this many entries of the longest names and sizes fit in one 64 KiB
// control object, so an inline list never makes a workflow input or ledger record larger.
const MaxInlineObjects = 469

// StagedPlan is a pin-first write's staged list before it is put (workflows.StagedPlan):
// its keys, its objects' count, ULIDs (FirstObject+i) and bytes, and ObjectsSHA256 of its
// objects in order.
type StagedPlan struct {
	FirstObject   string   `json:"first_object"`
	Objects       int      `json:"objects"`
	Bytes         int64    `json:"bytes"`
	Keys          []string `json:"keys"`
	ObjectsSHA256 string   `json:"objects_sha256"`
}

// MaxStagedPlanKeys bounds a StagedPlan's keys: a staged list of a million objects has
// about 8,000 manifest chunks.
const MaxStagedPlanKeys = 20000

// plannedStaged checks a staged plan against the write's staged version id and returns the
// staged version its pins cover: its keys, and its objects by ULID with no size yet.
func plannedStaged(graphName, table, id string, p StagedPlan) (staged, error) {
	vid, err := format.ParseULID(id)
	if err != nil {
		return staged{}, fmt.Errorf("staged: %w", err)
	}
	first, err := format.ParseULID(p.FirstObject)
	switch {
	case err != nil:
		return staged{}, fmt.Errorf("staged_plan.first_object: %w", err)
	case p.Objects < 1 || p.Bytes < 0:
		return staged{}, fmt.Errorf("staged_plan: %d objects of %d bytes; want at least one object", p.Objects, p.Bytes)
	case len(p.Keys) > MaxStagedPlanKeys:
		return staged{}, fmt.Errorf("staged_plan: %d keys, at most %d", len(p.Keys), MaxStagedPlanKeys)
	case len(p.ObjectsSHA256) != 64:
		return staged{}, fmt.Errorf("staged_plan: objects_sha256 %q is not a SHA-256", p.ObjectsSHA256)
	}
	s := staged{id: vid, keys: []string{format.TableVersionKey(graphName, table, vid)}}
	for i, k := range p.Keys {
		if k == s.keys[0] {
			continue
		}
		if _, err := format.ParseChunkKey(format.TableChunksPrefix(graphName, table), k); err != nil {
			return staged{}, fmt.Errorf("staged_plan.keys[%d]: %w", i, err)
		}
		s.keys = append(s.keys, k)
	}
	s.objects = make([]TableObject, p.Objects)
	for i := range s.objects {
		s.objects[i].ID = format.NthULID(first, uint64(i)).String()
	}
	return s, nil
}

// checkPlanned compares a staged version read from the store with the plan its write
// pinned: the same objects in the same order, of the declared digest and bytes, and no key
// the plan did not name (it would not be pinned). "" when they agree.
func checkPlanned(s staged, plan staged, p StagedPlan) string {
	if len(s.objects) != len(plan.objects) {
		return fmt.Sprintf("it lists %d objects, not the %d planned", len(s.objects), len(plan.objects))
	}
	var total int64
	for i, o := range s.objects {
		if o.ID != plan.objects[i].ID {
			return fmt.Sprintf("entry %d is object %s, not the planned %s", i, o.ID, plan.objects[i].ID)
		}
		total += o.Size
	}
	if got := ObjectsSHA256(s.objects); got != p.ObjectsSHA256 || total != p.Bytes {
		return fmt.Sprintf("its objects' digest %s of %d bytes is not the planned %s of %d", got, total, p.ObjectsSHA256, p.Bytes)
	}
	pinned := setOf(plan.keys)
	for _, k := range s.keys {
		if !pinned[k] {
			return fmt.Sprintf("%s is not among the keys the write pinned", k)
		}
	}
	return ""
}

// ObjectsSHA256 is the digest of a table write's objects as its request names them: each
// object's size and SHA-256, in order (an object's id is minted by its upload, so a
// repeated request uploads the same bytes under other ids). A client computes it from its
// files before uploading anything.
func ObjectsSHA256(objects []TableObject) string {
	h := sha256.New()
	for _, o := range objects {
		fmt.Fprintf(h, "%d %s\n", o.Size, o.SHA256)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// staged is a staged version as a write reads it.
type staged struct {
	id      ulid.ULID
	objects []TableObject
	keys    []string // the version's key and its manifest chunks'
}

// readStaged reads the staged version id of table: one this operation staged, listing only
// objects graft wrote under their ULID names (invalid otherwise; not_retained if missing).
func (a *Activities) readStaged(ctx context.Context, graphName, table, opID, id string) (staged, outcome.Outcome, string, error) {
	fail := func(o outcome.Outcome, f string, args ...any) (staged, outcome.Outcome, string, error) {
		return staged{}, o, fmt.Sprintf("staged version %s of table %q: ", id, table) + fmt.Sprintf(f, args...), nil
	}
	vid, err := format.ParseULID(id)
	if err != nil {
		return fail(outcome.Invalid, "%v", err)
	}
	g, err := a.openGraph(graphName)
	if err != nil {
		return fail(outcome.Invalid, "%v", err)
	}
	v, err := g.Version(ctx, table, vid)
	switch {
	case errors.Is(err, graph.ErrVersionNotFound):
		return fail(outcome.NotRetained, "missing: never written, or reclaimed by cleanup")
	case isUnreadableObject(err), errors.Is(err, graph.ErrCorrupt):
		return fail(outcome.Invalid, "%v", err)
	case err != nil:
		return staged{}, "", "", fmt.Errorf("read staged version %s: %w", id, err)
	}
	if v.Op != opID {
		return fail(outcome.Invalid, "staged by operation %q, not by %q", v.Op, opID)
	}
	s := staged{id: vid, keys: []string{format.TableVersionKey(graphName, table, vid)}}
	var bad string
	err = g.EachEntry(ctx, v, func(e format.ManifestEntry) error {
		if e.IsExternal() || e.Name != e.Object.String() {
			bad = e.Name
			return errNotStaged
		}
		s.objects = append(s.objects, TableObject{ID: e.Object.String(), Size: e.Size, SHA256: e.SHA256})
		return nil
	})
	if err == nil {
		err = g.NewMarker(func(m graph.Mark) error {
			if m.Kind == graph.MarkManifestChunk {
				s.keys = append(s.keys, m.Key)
			}
			return nil
		}).Version(ctx, table, vid)
	}
	switch {
	case errors.Is(err, errNotStaged):
		return fail(outcome.Invalid, "entry %q is not an object graft wrote under its id: a staged list names uploads only", bad)
	case errors.Is(err, graph.ErrChunkNotFound):
		return fail(outcome.NotRetained, "a manifest chunk is missing (reclaimed by cleanup?): %v", err)
	case isUnreadableObject(err), errors.Is(err, graph.ErrCorrupt):
		return fail(outcome.Invalid, "%v", err)
	case err != nil:
		return staged{}, "", "", fmt.Errorf("read staged version %s: %w", id, err)
	}
	return s, "", "", nil
}

var errNotStaged = errors.New("not a staged object")

// probeStaged HEADs a staged version's own keys once the write pinned them, so a key
// missing now was reclaimed before (its objects are probed with the write's).
func (a *Activities) probeStaged(ctx context.Context, s staged) (outcome.Outcome, string, error) {
	for _, k := range s.keys {
		if _, err := a.Store.Head(ctx, k); err != nil {
			if errors.Is(err, storage.ErrNotFound) {
				return outcome.NotRetained, fmt.Sprintf("%s of the staged version %s is missing: reclaimed by cleanup", k, s.id), nil
			}
			return "", "", fmt.Errorf("probe %s: %w", k, err)
		}
	}
	return "", "", nil
}

// writeObjects is a write's uploaded objects, listed inline or by its staged version, or
// the outcome that says why there are none.
func (a *Activities) writeObjects(ctx context.Context, graphName, table, opID string, inline []TableObject, e TableEdit) ([]TableObject, staged, outcome.Outcome, string, error) {
	switch {
	case e.Staged == "" && len(inline) > MaxInlineObjects:
		return nil, staged{}, outcome.Invalid, fmt.Sprintf("%d objects listed inline, at most %d: stage a longer list (docs/format.md, \"Staged object lists\")",
			len(inline), MaxInlineObjects), nil
	case e.Staged == "":
		return inline, staged{}, "", "", nil
	case len(inline) > 0:
		return nil, staged{}, outcome.Invalid, fmt.Sprintf("%d objects listed inline and a staged version %s: one or the other", len(inline), e.Staged), nil
	}
	s, o, msg, err := a.readStaged(ctx, graphName, table, opID, e.Staged)
	return s.objects, s, o, msg, err
}

// chunkBytes is the bytes of chunks.
func chunkBytes(chunks []graph.Chunk) (n int) {
	for _, c := range chunks {
		n += len(c.Body)
	}
	return n
}
