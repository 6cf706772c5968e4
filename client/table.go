package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	sdkclient "go.temporal.io/sdk/client"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/bounded"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/workflows"
)

// uploadConcurrency bounds the files read and uploaded at once (each is held in memory, up
// to graph.MaxDataObjectSize).
const uploadConcurrency = 4

// WriteTableRequest asks for a new version of a table on a branch, made of local files.
type WriteTableRequest struct {
	Graph, Branch, Table string
	// Files are local paths, one data object each: at least one (or an import or a
	// remove); past workflows.MaxInlineObjects the list is staged in the store
	// (docs/format.md, "Staged object lists").
	Files        []string
	ExpectedHead string
	// Author and Message of the commit. Default to "graft" and
	// "write table {table} version {ULID}".
	Author, Message string
	// IdempotencyKey identifies the operation: the same request under it
	// (workflows.WriteTableInput.Request: the files' sizes and SHA-256s, read first, and
	// every other field) attaches to the first, running or finished, and uploads
	// nothing; another is a *RequestConflictError. Defaults to a fresh ULID.
	IdempotencyKey string
	Upload         UploadOptions
	// UploadDeadline is how long the write waits for its upload once its objects are
	// pinned: past it the write ends abandoned and releases them (a client killed
	// mid-upload). Rounded to seconds; defaults to 0: workflows.DefaultUploadDeadline.
	UploadDeadline time.Duration
	// Append makes the new version the one the head pins plus the files and imports;
	// Remove drops entries by name from it; Import registers objects already in the store
	// by key, zero copy, with the size and ETag a HEAD gives now (graft never writes or
	// deletes them). Defaults: a version of exactly the files.
	Append bool
	Remove []string
	Import []string
}

// UploadOptions tune the upload of a table write's files: a file above Threshold bytes is
// a multipart upload of PartSize parts, at most Concurrency in flight (each held in
// memory), completed put-if-absent and aborted on failure.
type UploadOptions struct {
	// Threshold is the largest file sent as one put. Defaults to 0: 64 MiB.
	Threshold int64
	// PartSize is the size of every part but the last. Defaults to 0: 64 MiB, raised to
	// the store's minimum and so an object needs at most the store's part count.
	PartSize int64
	// Concurrency is the parts in flight. Defaults to 0: 4.
	Concurrency int
}

// WriteTableWorkflowID is the workflow id of a table write.
func WriteTableWorkflowID(graph, branch, key string) string {
	return "graft/write-table/" + graph + "/" + branch + "/" + key
}

// WriteTableHandle is a started table write.
type WriteTableHandle = OperationHandle[workflows.WriteTableResult]

// WriteTable publishes req.Files as a new version of req.Table on req.Branch through
// graft.WriteTable, pinning them before uploading them to store, and waits for the outcome.
func (c *Client) WriteTable(ctx context.Context, store storage.Store, req WriteTableRequest) (workflows.WriteTableResult, error) {
	h, err := c.StartWriteTable(ctx, store, req)
	return startWait(ctx, h, err, false)
}

// StartWriteTable hashes the files, plans a fresh ULID for each, starts graft.WriteTable,
// which pins the planned keys, and waits for the pins (graft.pinned); once they are durable
// it uploads each file put-if-absent straight to the store (the workflow's history carries
// only ids, sizes and checksums) and tells the workflow so. No cleanup can reclaim an object
// of the write before it is published or the write ends (docs/workflows.md, "Pin first, then
// upload"). A failed upload ends the write abandoned (graft.uploaded with Failed). Under
// a key already used it uploads nothing (WriteTableRequest.IdempotencyKey).
func (c *Client) StartWriteTable(ctx context.Context, store storage.Store, req WriteTableRequest) (*WriteTableHandle, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	key := keyOrNew(req.IdempotencyKey)
	id := WriteTableWorkflowID(req.Graph, req.Branch, key)
	if req.IdempotencyKey != "" {
		// A run under the caller's key is attached to when it is the same request, and
		// nothing is uploaded: a write whose client died before "uploaded" ends at its
		// deadline (docs/workflows.md, "Pin first, then upload").
		run, err := c.lookupSame(ctx, id, key, false, func() (workflows.Request, error) { return fileRequest(req) })
		switch {
		case err != nil:
			return nil, err
		case run != nil:
			return c.writeHandle(id, key, run), nil
		}
	}

	// Fail before starting anything when the graph or branch is missing.
	if _, err := graph.ReadGraph(ctx, store, req.Graph); err != nil {
		return nil, readError(err, req.Graph, "")
	}
	if _, err := graph.ResolveBranch(ctx, store, req.Graph, req.Branch); err != nil {
		return nil, readError(err, req.Graph, req.Branch)
	}
	var imports []workflows.TableImport
	if len(req.Import) > 0 {
		refs := make([]graph.ImportRef, len(req.Import))
		for i, k := range req.Import {
			refs[i] = graph.ImportRef{Key: k}
		}
		entries, err := graph.ImportEntries(ctx, store, req.Graph, refs)
		switch {
		case errors.Is(err, graph.ErrInvalid):
			return nil, outcome.Errorf(outcome.Invalid, "", "import: %v", err)
		case errors.Is(err, storage.ErrNotFound):
			return nil, outcome.Errorf(outcome.NotFound, "", "import: %v", err)
		case err != nil:
			return nil, fmt.Errorf("import: %w", err)
		}
		for _, e := range entries {
			imports = append(imports, workflows.TableImport{Name: e.Name, Key: e.External, Size: e.Size, ETag: e.ETag, SHA256: e.SHA256})
		}
	}
	objects, err := planFiles(req.Files)
	if err != nil {
		return nil, err
	}

	in := writeInput(req, objects, imports)
	in.OpID, in.AwaitUpload = key, true
	if req.UploadDeadline > 0 {
		in.UploadDeadlineSeconds = int64(max(time.Second, req.UploadDeadline.Round(time.Second)) / time.Second)
	}
	var staged *stagedList
	if len(objects) > workflows.MaxInlineObjects {
		// The staged list is planned, not put: the workflow pins its keys and its objects'
		// (FirstObject+i) before the client puts a byte of either.
		if staged, err = planStaged(ctx, store, req.Graph, req.Table, key, objects); err != nil {
			return nil, err
		}
		in.Objects, in.Staged, in.ObjectsSHA256, in.StagedPlan = nil, staged.plan.Version.ID.String(), workflows.ObjectsSHA256(objects), &staged.pins
	}
	h, pinned, err := c.startPinned(ctx, in, id, key, fmt.Sprintf("write table %s on %s in %s (%d objects)", req.Table, req.Branch, req.Graph, len(objects)))
	if err != nil || !pinned {
		return h, err
	}
	err = staged.put(ctx)
	if err == nil {
		err = uploadPlanned(ctx, store, req.Graph, req.Table, req.Files, objects, req.Upload)
	}
	if err != nil {
		// End the write now rather than at its deadline: it ends abandoned, its pins released.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = c.tc.SignalWorkflow(fctx, h.WorkflowID, "", workflows.UploadedSignalName, workflows.UploadedRequest{Failed: err.Error()})
		return nil, err
	}
	// To the workflow's current run, and as a signal: an operator's reset reapplies it, so a
	// reset run learns of the upload too. A write that already closed (its deadline passed,
	// or it was terminated) refuses it as not found: its result says how the write ended.
	err = c.tc.SignalWorkflow(ctx, h.WorkflowID, "", workflows.UploadedSignalName, workflows.UploadedRequest{})
	if nf := (*serviceerror.NotFound)(nil); err == nil || errors.As(err, &nf) {
		return h, nil
	}
	return nil, unanswered(ctx, "tell write "+id+" its upload is done", id, key, err)
}

// startPinned starts graft.WriteTable and waits for its pins through graft.pinned: pinned
// reports that the client may upload now. A run of the id already there is attached to
// when it is the same request (a *RequestConflictError otherwise), and uploads nothing;
// so is a write that ended before pinning. Without Options.EagerStart the start carries
// the update (Update-with-Start, one request). With it, the start is eager (Update-with-
// Start cannot be) and the client watches the run's history for the memo the pins set
// (workflows.PinnedMemo): an update would cost a workflow task of its own
// (docs/benchmarks.md, "Table writes"). The workflow pins whether or not anyone asks.
func (c *Client) startPinned(ctx context.Context, in workflows.WriteTableInput, id, key, summary string) (*WriteTableHandle, bool, error) {
	opts := c.startOptions(operationStart{ID: id, Summary: summary, Graph: in.Graph, Branch: in.Branch, Kind: "write_table",
		ReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE}, true)
	pin := sdkclient.UpdateWorkflowOptions{UpdateName: workflows.PinnedUpdateName, WaitForStage: sdkclient.WorkflowUpdateStageCompleted}
	var (
		run sdkclient.WorkflowRun
		uh  sdkclient.WorkflowUpdateHandle
		err error
	)
	if c.opts.EagerStart {
		run, err = c.tc.ExecuteWorkflow(ctx, opts, workflows.WriteTableName, in)
	} else {
		opts.EnableEagerStart = false
		start := c.tc.NewWithStartWorkflowOperation(opts, workflows.WriteTableName, in)
		uh, err = c.tc.UpdateWithStartWorkflow(ctx, sdkclient.UpdateWithStartWorkflowOptions{StartWorkflowOperation: start, UpdateOptions: pin})
		switch {
		case err == nil:
			run = c.tc.GetWorkflow(ctx, id, uh.RunID())
		case answered(ctx, err):
			// Started, then closed before it answered (terminated, reset): its result says
			// how. A start that succeeded is known by now; one that did not never is.
			gctx, cancel := context.WithTimeout(ctx, time.Second)
			started, serr := start.Get(gctx)
			cancel()
			if serr == nil {
				return c.writeHandle(id, key, started), false, nil
			}
			// A run closed before it accepted the update in this first call leaves the
			// start unresolved. Temporal's answer (not found: "aborted by closing
			// workflow") still proves the start created the run: under REJECT_DUPLICATE
			// a run of the id already there fails the start instead. Its end says how.
			if nf := (*serviceerror.NotFound)(nil); errors.As(err, &nf) && strings.Contains(nf.Message, "closing workflow") {
				return c.writeHandle(id, key, c.tc.GetWorkflow(ctx, id, "")), false, nil
			}
		}
	}
	if exists := (*serviceerror.WorkflowExecutionAlreadyStarted)(nil); errors.As(err, &exists) {
		run, _, err := c.attachSame(ctx, id, exists.RunId, key, in.Request(), false)
		if err != nil {
			return nil, false, err
		}
		return c.writeHandle(id, key, run), false, nil
	}
	if err != nil {
		return nil, false, unanswered(ctx, "start "+summary, id, key, err)
	}
	h := c.writeHandle(id, key, run)
	if uh == nil {
		pinned, err := c.watchPinned(ctx, id, run.GetRunID())
		if err != nil {
			return nil, false, unanswered(ctx, "pin the objects of "+summary, id, key, err)
		}
		return h, pinned, nil
	}
	var pr workflows.PinnedResult
	if err == nil {
		err = uh.Get(ctx, &pr)
	}
	if answered(ctx, err) {
		// An error here is the workflow's: it closed before answering; its result says how.
		return h, err == nil && pr.Outcome == "", nil
	}
	return nil, false, unanswered(ctx, "pin the objects of "+summary, id, key, err)
}

// watchPinned follows a write run's history until the memo its pins set (true) or its end
// (false: it ended before pinning; its result says how).
func (c *Client) watchPinned(ctx context.Context, id, runID string) (bool, error) {
	it := c.tc.GetWorkflowHistory(ctx, id, runID, true, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return false, err
		}
		if _, ok := ev.GetWorkflowPropertiesModifiedEventAttributes().GetUpsertedMemo().GetFields()[workflows.PinnedMemo]; ok {
			return true, nil
		}
	}
	return false, nil
}

func (c *Client) writeHandle(id, key string, run sdkclient.WorkflowRun) *WriteTableHandle {
	return &WriteTableHandle{c: c, WorkflowID: id, RunID: run.GetRunID(), OpID: key, run: run,
		fromStatus: inDoubtResult(workflows.WriteTableResult{})}
}

// answered reports an update's err as the workflow's answer (nil, a refusal, or a run
// closed before it answered) rather than a request that got none.
func answered(ctx context.Context, err error) bool {
	var timeout *sdkclient.WorkflowUpdateServiceTimeoutOrCanceledError
	var ue *UnansweredError
	return err == nil || !errors.As(err, &timeout) && !errors.As(unanswered(ctx, "", "", "", err), &ue)
}

// fileRequest is a write's canonical request, from its files' sizes and SHA-256s (the
// ids planFiles mints are not part of it).
func fileRequest(req WriteTableRequest) (workflows.Request, error) {
	objects, err := planFiles(req.Files)
	if err != nil {
		return workflows.Request{}, err
	}
	imports := make([]workflows.TableImport, len(req.Import))
	for i, k := range req.Import {
		imports[i] = workflows.TableImport{Key: k}
	}
	return writeInput(req, objects, imports).Request(), nil
}

// writeInput is the write's input but for its operation id.
func writeInput(req WriteTableRequest, objects []workflows.TableObject, imports []workflows.TableImport) workflows.WriteTableInput {
	return workflows.WriteTableInput{
		Graph: req.Graph, Branch: req.Branch, Table: req.Table, Objects: objects,
		ExpectedHead: req.ExpectedHead, Author: req.Author, Message: req.Message,
		Append: req.Append, Remove: req.Remove, Imports: imports,
	}
}

func fileSum(path string) (workflows.TableObject, error) {
	f, err := os.Open(path)
	if err != nil {
		return workflows.TableObject{}, outcome.Errorf(outcome.Invalid, "", "file %s: %v", path, err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return workflows.TableObject{}, fmt.Errorf("read %s: %w", path, err)
	}
	return workflows.TableObject{Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// Validate checks the request as graft.WriteTable would, and that every file can be read
// as a data object, without contacting anything.
func (req WriteTableRequest) Validate() error {
	if err := firstInvalid(checkGraph(req.Graph), checkBranch(req.Branch), invalid("", format.ValidateTableName(req.Table)),
		checkCommit("expected head", req.ExpectedHead), checkKey(req.IdempotencyKey), checkCommitText(req.Author, req.Message)); err != nil {
		return err
	}
	invalid := func(f string, args ...any) error { return outcome.Errorf(outcome.Invalid, "", f, args...) }
	if len(req.Files) == 0 && len(req.Import) == 0 && len(req.Remove) == 0 {
		return invalid("no files to write: give at least one (or objects to import, or names to remove)")
	}
	for _, n := range req.Remove {
		if err := format.ValidateEntryName(n); err != nil {
			return invalid("remove %q: %v", n, err)
		}
	}
	for _, k := range req.Import {
		if err := storage.ValidateKey(k); err != nil {
			return invalid("import %q: %v", k, err)
		}
		if why := graph.ImportKeyOwned(req.Graph, k); why != "" {
			return invalid("import %q: the key is %s; import only objects outside every graph's prefix (docs/format.md, Ownership)", k, why)
		}
	}
	for _, f := range req.Files {
		info, err := os.Stat(f)
		if err != nil {
			return invalid("file %s: %v", f, err)
		}
		if !info.Mode().IsRegular() {
			return invalid("file %s is not a regular file", f)
		}
		if info.Size() > storage.MaxObjectSize {
			return invalid("file %s is %d bytes, more than the %d a data object may hold", f, info.Size(), int64(storage.MaxObjectSize))
		}
	}
	u := req.Upload
	if u.Threshold < 0 || u.PartSize < 0 || u.Concurrency < 0 {
		return invalid("upload options: threshold %d, part size %d and concurrency %d must not be negative", u.Threshold, u.PartSize, u.Concurrency)
	}
	if u.Threshold > graph.MaxDataObjectSize {
		return invalid("upload threshold %d is above the %d one put may hold", u.Threshold, graph.MaxDataObjectSize)
	}
	return nil
}

// stagedList is the staged version of a write of more objects than a request lists inline
// (docs/format.md, "Staged object lists"), planned but not put: a table version of exactly
// the write's objects, that no commit pins, its id fresh and its operation the write's.
// Its objects' ULIDs are consecutive from the first, so the workflow can pin them, and
// the list's keys, before either is put.
type stagedList struct {
	g    *graph.Graph
	plan graph.VersionPlan
	pins workflows.StagedPlan
}

// planStaged renames objects to consecutive ULIDs from a fresh one and plans their staged
// version.
func planStaged(ctx context.Context, store storage.Store, graphName, table, opID string, objects []workflows.TableObject) (*stagedList, error) {
	g, err := graph.Open(store, graphName)
	if err != nil {
		return nil, outcome.Errorf(outcome.Invalid, "", "%v", err)
	}
	first := ulid.Make()
	s := &stagedList{g: g, pins: workflows.StagedPlan{FirstObject: first.String(), Objects: len(objects)}}
	entries := make([]format.ManifestEntry, len(objects))
	for i := range objects {
		id := format.NthULID(first, uint64(i))
		objects[i].ID = id.String()
		entries[i] = format.ManifestEntry{Name: id.String(), Object: id, Size: objects[i].Size, SHA256: objects[i].SHA256}
		s.pins.Bytes += objects[i].Size
	}
	s.plan, err = g.PlanVersion(ctx, graph.VersionSpec{Table: table, VersionID: ulid.Make(), Put: entries,
		Time: time.Now().UTC().Truncate(time.Millisecond), Op: opID})
	if err != nil {
		return nil, outcome.Errorf(outcome.Invalid, "", "stage the object list: %v", err)
	}
	s.pins.Keys = s.plan.Keys()
	return s, nil
}

// put writes the planned staged version, its chunks then itself put-if-absent, once the
// workflow pinned them; nil puts nothing.
func (s *stagedList) put(ctx context.Context) error {
	if s == nil {
		return nil
	}
	err := s.g.WriteVersion(ctx, s.plan)
	switch {
	case errors.Is(err, storage.ErrRefused):
		return outcome.Errorf(outcome.Refused, "", "stage the object list: %v", err)
	case err != nil:
		return fmt.Errorf("stage the object list of %d objects: %w", s.pins.Objects, err)
	}
	return nil
}

// planFiles hashes each file and plans it under a fresh ULID, minted in the files' order.
func planFiles(files []string) ([]workflows.TableObject, error) {
	objects := make([]workflows.TableObject, len(files))
	for i := range objects {
		objects[i].ID = ulid.Make().String()
	}
	err := bounded.EachErr(len(files), uploadConcurrency, func(i int) error {
		o, err := fileSum(files[i])
		objects[i].Size, objects[i].SHA256 = o.Size, o.SHA256
		return err
	})
	if err != nil {
		return nil, err
	}
	return objects, nil
}

// uploadPlanned uploads each file under its planned ULID (graph.UploadObject), a few at a
// time; a file whose bytes no longer hash to its plan is invalid, and none of it is put.
func uploadPlanned(ctx context.Context, store storage.Store, graphName, table string, files []string, plan []workflows.TableObject, opts UploadOptions) error {
	return bounded.EachErr(len(files), uploadConcurrency, func(i int) error {
		return uploadFile(ctx, store, graphName, table, files[i], plan[i], opts)
	})
}

func uploadFile(ctx context.Context, store storage.Store, graphName, table, path string, plan workflows.TableObject, opts UploadOptions) error {
	id, err := format.ParseULID(plan.ID)
	if err != nil {
		return fmt.Errorf("upload %s: %w", path, err)
	}
	f, err := os.Open(path)
	if err != nil {
		return outcome.Errorf(outcome.Invalid, "", "file %s: %v", path, err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil || !info.Mode().IsRegular() {
		return outcome.Errorf(outcome.Invalid, "", "file %s is not a readable regular file (%v)", path, err)
	}
	if info.Size() != plan.Size {
		return outcome.Errorf(outcome.Invalid, "", "file %s changed since it was hashed: %d bytes, not %d", path, info.Size(), plan.Size)
	}
	r := &verifying{r: f, want: plan, h: sha256.New(), path: path}
	_, err = graph.UploadObject(ctx, store, graphName, table, id, r, plan.Size, graph.UploadOptions(opts))
	switch {
	case r.err != nil:
		return r.err
	case errors.Is(err, graph.ErrInvalid), errors.Is(err, graph.ErrObjectTooLarge), errors.Is(err, graph.ErrMultipartUnsupported):
		return outcome.Errorf(outcome.Invalid, "", "upload %s: %v", path, err)
	case errors.Is(err, storage.ErrRefused):
		return outcome.Errorf(outcome.Refused, "", "upload %s: %v", path, err)
	case err != nil:
		return fmt.Errorf("upload %s: %w", path, err)
	}
	return nil
}

// verifying reads a file as it was hashed: the read that completes its planned size fails,
// delivering none of its bytes, unless they hash to the plan, so a changed file is never
// put (a put or the last part needs every byte).
type verifying struct {
	r    io.Reader
	want workflows.TableObject
	h    hash.Hash
	n    int64
	path string
	err  error
}

func (v *verifying) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	n, err := v.r.Read(p)
	v.h.Write(p[:n])
	v.n += int64(n)
	switch {
	case v.n > v.want.Size:
		v.err = outcome.Errorf(outcome.Invalid, "", "file %s changed since it was hashed: more than %d bytes", v.path, v.want.Size)
	case v.n == v.want.Size && hex.EncodeToString(v.h.Sum(nil)) != v.want.SHA256:
		v.err = outcome.Errorf(outcome.Invalid, "", "file %s changed since it was hashed: its SHA-256 is not %s", v.path, v.want.SHA256)
	}
	if v.err != nil {
		return 0, v.err
	}
	return n, err
}
