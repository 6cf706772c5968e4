package workflows

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/graftworks/graft/activities"
)

// Request is an operation's request in canonical form: its workflow type and every field
// of its input that decides what the operation does, by name, with a list folded into one
// SHA-256. The operation id is not part of it: it names a request, it does not shape it.
// A request under an operation id that names an operation already attaches to it only
// when the two digests are equal; any other is a conflict, and nothing is uploaded,
// started or written for it (docs/outcomes.md). The ledger refuses an operation id
// recorded for other inputs (docs/workflows.md).
type Request struct {
	// Workflow is the workflow type (graft.WriteTable, …).
	Workflow string `json:"workflow"`
	// Fields are the request's fields by their input's JSON name; a digest field's value
	// starts with "sha256:".
	Fields map[string]string `json:"fields"`
}

// Digest is the SHA-256 (lower-case hex) of the workflow type and the fields sorted by
// name, each value quoted.
func (r Request) Digest() string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n", r.Workflow)
	for _, k := range slices.Sorted(maps.Keys(r.Fields)) {
		fmt.Fprintf(h, "%s=%s\n", k, strconv.Quote(r.Fields[k]))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Same reports whether r and other are the same request.
func (r Request) Same(other Request) bool { return r.Digest() == other.Digest() }

// Differences names, for people, each field in which r differs from first (the request
// already recorded), sorted by field: `table is "u", the first request's "t"`.
func (r Request) Differences(first Request) []string {
	if r.Workflow != first.Workflow {
		return []string{fmt.Sprintf("the operation is %s, the first request's %s", r.Workflow, first.Workflow)}
	}
	var out []string
	keys := append(slices.Collect(maps.Keys(r.Fields)), slices.Collect(maps.Keys(first.Fields))...)
	slices.Sort(keys)
	for _, k := range slices.Compact(keys) {
		a, b := r.Fields[k], first.Fields[k]
		switch {
		case a == b:
		case strings.HasPrefix(a, digestPrefix) || strings.HasPrefix(b, digestPrefix):
			out = append(out, k+" differ")
		default:
			out = append(out, fmt.Sprintf("%s is %s, the first request's %s", k, shorten(a), shorten(b)))
		}
	}
	return out
}

// digestPrefix marks a field whose value is the digest of a list.
const digestPrefix = "sha256:"

// shorten quotes a field's value for a message, cut to a readable length.
func shorten(v string) string {
	const max = 80
	if len(v) > max {
		return strconv.Quote(v[:max]) + "…"
	}
	return strconv.Quote(v)
}

// listDigest folds a list into one field value: "" for an empty list.
func listDigest(items []string) string {
	if len(items) == 0 {
		return ""
	}
	h := sha256.New()
	for _, it := range items {
		fmt.Fprintf(h, "%s\n", strconv.Quote(it))
	}
	return digestPrefix + hex.EncodeToString(h.Sum(nil))
}

// ObjectsSHA256 is activities.ObjectsSHA256 of a write's objects: what names them in its
// request.
func ObjectsSHA256(objects []TableObject) string {
	objs := make([]activities.TableObject, len(objects))
	for i, o := range objects {
		objs[i] = activities.TableObject(o)
	}
	return activities.ObjectsSHA256(objs)
}

func boolField(b bool) string { return strconv.FormatBool(b) }

// durationField is d as a request field; "" for none.
func durationField(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

// Request is the write's canonical request.
func (in WriteTableInput) Request() Request {
	imports := make([]string, len(in.Imports))
	for i, im := range in.Imports {
		imports[i] = im.Key
	}
	objects := digestPrefix + ObjectsSHA256(in.Objects)
	switch {
	case in.Staged != "" && in.ObjectsSHA256 != "":
		objects = digestPrefix + in.ObjectsSHA256
	case in.Staged != "":
		// A staged list's objects are not in the input: its id names them.
		objects = "staged " + in.Staged
	}
	return Request{Workflow: WriteTableName, Fields: map[string]string{
		"graph": in.Graph, "branch": in.Branch, "table": in.Table, "objects": objects,
		"append": boolField(in.Append), "remove": listDigest(in.Remove), "imports": listDigest(imports),
		"expected_head": in.ExpectedHead, "author": in.Author, "message": in.Message,
	}}
}

// Request is the init's canonical request.
func (in InitGraphInput) Request() Request {
	return Request{Workflow: InitGraphName, Fields: map[string]string{"graph": in.Graph, "author": in.Author}}
}

// Request is the create's canonical request.
func (in CreateBranchInput) Request() Request {
	return Request{Workflow: CreateBranchName, Fields: map[string]string{
		"graph": in.Graph, "branch": in.Branch, "source.branch": in.Source.Branch, "source.commit": in.Source.Commit,
		"source.tag": in.Source.Tag, "author": in.Author, "message": in.Message,
	}}
}

// Request is the merge's canonical request.
func (in MergeInput) Request() Request {
	return Request{Workflow: MergeName, Fields: map[string]string{
		"graph": in.Graph, "source": in.Source, "target": in.Target, "preview": boolField(in.Preview),
		"expected_head": in.ExpectedHead, "author": in.Author, "message": in.Message, "wait_timeout": durationField(in.WaitTimeout),
	}}
}

// Request is the restore's canonical request.
func (in RestoreInput) Request() Request {
	return Request{Workflow: RestoreName, Fields: map[string]string{
		"graph": in.Graph, "branch": in.Branch, "to.commit": in.To.Commit, "to.tag": in.To.Tag,
		"expected_head": in.ExpectedHead, "no_backup": boolField(in.NoBackup), "backup_tag": in.BackupTag,
		"author": in.Author, "message": in.Message,
	}}
}

// Request is the tag create's canonical request.
func (in CreateTagInput) Request() Request {
	return Request{Workflow: CreateTagName, Fields: map[string]string{
		"graph": in.Graph, "name": in.Name, "commit": in.Commit, "branch": in.Branch,
	}}
}

// Request is the tag delete's canonical request.
func (in DeleteTagInput) Request() Request {
	return Request{Workflow: DeleteTagName, Fields: map[string]string{"graph": in.Graph, "name": in.Name}}
}

// Request is the branch delete's canonical request.
func (in DeleteBranchInput) Request() Request {
	return Request{Workflow: DeleteBranchName, Fields: map[string]string{
		"graph": in.Graph, "branch": in.Branch, "force": boolField(in.Force),
	}}
}

// Request is the repair's canonical request.
func (in RepairBranchInput) Request() Request {
	return Request{Workflow: RepairBranchName, Fields: map[string]string{
		"graph": in.Graph, "branch": in.Branch, "keep": in.Keep,
	}}
}

// Request is the cleanup's canonical request; a run's continuation state is not part of it.
func (in CleanupInput) Request() Request {
	guard := "default"
	if in.GuardWindow != nil {
		guard = in.GuardWindow.String()
	}
	tuning := ""
	if in.Tuning != nil {
		b, _ := json.Marshal(in.Tuning)
		tuning = string(b)
	}
	return Request{Workflow: CleanupName, Fields: map[string]string{
		"graph": in.Graph, "mode": string(in.mode()), "sweep_run_id": in.SweepRunID,
		"keep_newest": strconv.Itoa(in.KeepNewest), "keep_newer_than": in.KeepNewerThan.String(),
		"guard_window": guard, "tuning": tuning,
	}}
}
