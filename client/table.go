package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/oklog/ulid/v2"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"

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

// WriteTable uploads req.Files to store, then publishes them as a new version of
// req.Table on req.Branch through graft.WriteTable, and waits for the outcome.
func (c *Client) WriteTable(ctx context.Context, store storage.Store, req WriteTableRequest) (workflows.WriteTableResult, error) {
	h, err := c.StartWriteTable(ctx, store, req)
	return startWait(ctx, h, err, false)
}

// StartWriteTable uploads the files, each put-if-absent straight to the store (the
// workflow's history carries only ids, sizes and checksums), and starts graft.WriteTable;
// under a key already used it uploads nothing (WriteTableRequest.IdempotencyKey).
func (c *Client) StartWriteTable(ctx context.Context, store storage.Store, req WriteTableRequest) (*WriteTableHandle, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	key := keyOrNew(req.IdempotencyKey)
	id := WriteTableWorkflowID(req.Graph, req.Branch, key)
	if req.IdempotencyKey != "" {
		desc, err := c.tc.DescribeWorkflowExecution(ctx, id, "")
		var nf *serviceerror.NotFound
		switch {
		case err == nil:
			ours, err := fileRequest(req)
			if err != nil {
				return nil, err
			}
			run, _, err := c.attachSame(ctx, id, desc.GetWorkflowExecutionInfo().GetExecution().GetRunId(), key, ours, false)
			if err != nil {
				return nil, err
			}
			return &WriteTableHandle{c: c, WorkflowID: id, RunID: run.GetRunID(), OpID: key, run: run,
				fromStatus: inDoubtResult(workflows.WriteTableResult{})}, nil
		case !errors.As(err, &nf):
			return nil, unanswered(ctx, "look up write "+id, id, key, err)
		}
	}

	// Fail before uploading anything when the graph or branch is missing.
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
	objects, err := uploadFiles(ctx, store, req.Graph, req.Table, req.Files, req.Upload)
	if err != nil {
		return nil, err
	}

	in := writeInput(req, objects, imports)
	in.OpID = key
	if len(objects) > workflows.MaxInlineObjects {
		if in.Staged, err = stageObjects(ctx, store, req.Graph, req.Table, key, objects); err != nil {
			return nil, err
		}
		in.Objects, in.ObjectsSHA256 = nil, workflows.ObjectsSHA256(objects)
	}
	return startOperation(ctx, c, operationStart{
		Wrap: fmt.Sprintf("start write of %s/%s", req.Graph, req.Table), Kind: "write_table",
		ID: id, Workflow: workflows.WriteTableName, Input: in,
		Summary: fmt.Sprintf("write table %s on %s in %s (%d objects)", req.Table, req.Branch, req.Graph, len(objects)),
		Graph:   req.Graph, Branch: req.Branch, OpID: key,
		ReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
	}, workflows.WriteTableResult{})
}

// fileRequest is a write's canonical request, from its files' sizes and SHA-256s.
func fileRequest(req WriteTableRequest) (workflows.Request, error) {
	objects := make([]workflows.TableObject, len(req.Files))
	err := bounded.EachErr(len(req.Files), uploadConcurrency, func(i int) (err error) {
		objects[i], err = fileSum(req.Files[i])
		return err
	})
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

// stageObjects writes the staged version of a write of more objects than a request lists
// inline (docs/format.md, "Staged object lists"): a table version of exactly the uploaded
// objects, its chunks then itself put-if-absent, that no commit pins; the workflow pins it
// and builds the new version on it. Its id is fresh and its operation is the write's.
func stageObjects(ctx context.Context, store storage.Store, graphName, table, opID string, objects []workflows.TableObject) (string, error) {
	g, err := graph.Open(store, graphName)
	if err != nil {
		return "", outcome.Errorf(outcome.Invalid, "", "%v", err)
	}
	entries := make([]format.ManifestEntry, 0, len(objects))
	for _, o := range objects {
		id, err := format.ParseULID(o.ID)
		if err != nil {
			return "", fmt.Errorf("stage object %s: %w", o.ID, err)
		}
		entries = append(entries, format.ManifestEntry{Name: o.ID, Object: id, Size: o.Size, SHA256: o.SHA256})
	}
	p, err := g.PutVersion(ctx, graph.VersionSpec{Table: table, VersionID: ulid.Make(), Put: entries,
		Time: time.Now().UTC().Truncate(time.Millisecond), Op: opID})
	switch {
	case errors.Is(err, graph.ErrInvalid):
		return "", outcome.Errorf(outcome.Invalid, "", "stage the object list: %v", err)
	case errors.Is(err, storage.ErrRefused):
		return "", outcome.Errorf(outcome.Refused, "", "stage the object list: %v", err)
	case err != nil:
		return "", fmt.Errorf("stage the object list of %d objects: %w", len(objects), err)
	}
	return p.Version.ID.String(), nil
}

// uploadFiles uploads each file under a fresh ULID (graph.UploadObject), a few at a time.
func uploadFiles(ctx context.Context, store storage.Store, graphName, table string, files []string, opts UploadOptions) ([]workflows.TableObject, error) {
	objects := make([]workflows.TableObject, len(files))
	ids := make([]ulid.ULID, len(files)) // minted in the files' order
	for i := range ids {
		ids[i] = ulid.Make()
	}
	err := bounded.EachErr(len(files), uploadConcurrency, func(i int) (err error) {
		objects[i], err = uploadFile(ctx, store, graphName, table, ids[i], files[i], opts)
		return err
	})
	if err != nil {
		return nil, err
	}
	return objects, nil
}

func uploadFile(ctx context.Context, store storage.Store, graphName, table string, id ulid.ULID, path string, opts UploadOptions) (workflows.TableObject, error) {
	f, err := os.Open(path)
	if err != nil {
		return workflows.TableObject{}, outcome.Errorf(outcome.Invalid, "", "file %s: %v", path, err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil || !info.Mode().IsRegular() {
		return workflows.TableObject{}, outcome.Errorf(outcome.Invalid, "", "file %s is not a readable regular file (%v)", path, err)
	}
	res, err := graph.UploadObject(ctx, store, graphName, table, id, f, info.Size(), graph.UploadOptions(opts))
	switch {
	case errors.Is(err, graph.ErrInvalid), errors.Is(err, graph.ErrObjectTooLarge), errors.Is(err, graph.ErrMultipartUnsupported):
		return workflows.TableObject{}, outcome.Errorf(outcome.Invalid, "", "upload %s: %v", path, err)
	case errors.Is(err, storage.ErrRefused):
		return workflows.TableObject{}, outcome.Errorf(outcome.Refused, "", "upload %s: %v", path, err)
	case err != nil:
		return workflows.TableObject{}, fmt.Errorf("upload %s: %w", path, err)
	}
	return workflows.TableObject{ID: id.String(), Size: res.Entry.Size, SHA256: res.Entry.SHA256}, nil
}
