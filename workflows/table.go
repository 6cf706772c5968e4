package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
)

// WriteTableName is the registered name of WriteTable. Stable.
const WriteTableName = "graft.WriteTable"

// MaxHeadRetries bounds how many times a write without an expected head re-reads a branch
// head that moved under it before giving up with conflict.
var MaxHeadRetries = 5

// TableObject is one uploaded data object of a new table version.
type TableObject struct {
	// ID is the object's ULID; its key is {graph}/tables/{table}/objects/{ID}.
	ID     string `json:"id"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"` // lower-case hex
}

// WriteTableInput is the input of graft.WriteTable. It carries only the data objects' ids,
// sizes and checksums: with AwaitUpload the client uploads them once the workflow pinned
// them (docs/workflows.md, "Pin first, then upload"); without, they are in the store
// already (the client uploaded them put-if-absent) and only their age protects them from
// a cleanup until the workflow's first step pins them.
type WriteTableInput struct {
	Graph        string        `json:"graph"`
	Branch       string        `json:"branch"`
	Table        string        `json:"table"`
	Objects      []TableObject `json:"objects"`
	ExpectedHead string        `json:"expected_head,omitempty"`
	OpID         string        `json:"op_id,omitempty"`
	Author       string        `json:"author,omitempty"`
	Message      string        `json:"message,omitempty"`
	// Append makes the new version the one the branch's head pins plus Objects and
	// Imports; Remove drops entries by name from it (and so also edits the head's
	// version); Imports registers objects that already exist in the store by reference,
	// without copying (docs/format.md, "Zero-copy import"). Defaults: exactly Objects.
	Append  bool          `json:"append,omitempty"`
	Remove  []string      `json:"remove,omitempty"`
	Imports []TableImport `json:"imports,omitempty"`
	// Staged is the ULID of a staged version of Table listing the uploaded objects, in
	// place of Objects: a write of more than MaxInlineObjects objects names them this way,
	// so its history never holds the list (docs/format.md, "Staged object lists").
	Staged string `json:"staged,omitempty"`
	// ObjectsSHA256, with Staged, is ObjectsSHA256 of the staged objects: what names them
	// in the write's Request, since the input does not list them ("": the staged id does).
	ObjectsSHA256 string `json:"objects_sha256,omitempty"`
	// AwaitUpload: the objects are planned, not uploaded. The workflow pins their keys
	// first and answers the graft.pinned update once the pins are durable; the client then
	// uploads them and sends graft.uploaded, and the write goes on. With no graft.uploaded
	// within UploadDeadlineSeconds (0: DefaultUploadDeadline) the write ends abandoned.
	AwaitUpload           bool  `json:"await_upload,omitempty"`
	UploadDeadlineSeconds int64 `json:"upload_deadline_seconds,omitempty"`
	// StagedPlan, with AwaitUpload and Staged, describes a staged list that is not put yet,
	// so that the first step can pin every key of it and of its objects before their first
	// byte (docs/workflows.md, "Pin first, then upload").
	StagedPlan *StagedPlan `json:"staged_plan,omitempty"`
}

// StagedPlan is a pin-first write's staged list before it is put: the keys of the staged
// version (its record and its manifest chunks, as the client built it), and its objects,
// whose ULIDs are FirstObject, FirstObject+1, … (as 128-bit big-endian integers) in the
// list's order.
type StagedPlan struct {
	FirstObject string   `json:"first_object"`
	Objects     int      `json:"objects"`
	Bytes       int64    `json:"bytes"`
	Keys        []string `json:"keys"`
}

// The messages of a pin-first write (WriteTableInput.AwaitUpload).
const (
	// PinnedUpdateName returns a PinnedResult once the write's pins are durable, or once
	// it ended before pinning: what the client waits for before its first byte (with
	// Update-with-Start, in the same call that starts the workflow).
	PinnedUpdateName = "graft.pinned"
	// UploadedSignalName tells the write its objects are uploaded (an UploadedRequest). It
	// is a signal, not an update, because an operator's reset reapplies signals: a reset
	// run that pins again still learns that the client finished, however early the reset
	// point lies. The first one counts; a write that waits for no upload ignores it.
	UploadedSignalName = "graft.uploaded"
	// PinnedMemo is the memo field a pin-first write sets to true in the workflow task that
	// made its pins durable: a client that started the write eagerly watches the run's
	// history for it instead of asking graft.pinned, which would cost a workflow task.
	PinnedMemo = "graft.pinned"
)

// DefaultUploadDeadline is how long a pin-first write waits for graft.uploaded when its
// input names no deadline.
const DefaultUploadDeadline = 24 * time.Hour

// PinnedResult answers graft.pinned. An Outcome means the write ended without pinning
// (its message says why): upload nothing.
type PinnedResult struct {
	Outcome outcome.Outcome `json:"outcome,omitempty"`
	Message string          `json:"message,omitempty"`
}

// uploadWait is the pin-first state of a write: what its update handler reads.
type uploadWait struct {
	pinned   *PinnedResult
	uploaded bool
	failed   string // the client's upload failed: why
}

// UploadedRequest is the argument of graft.uploaded: {} once every object is uploaded,
// or Failed saying why the client gave up its upload (the write ends abandoned at once).
type UploadedRequest struct {
	Failed string `json:"failed,omitempty"`
}

// handle registers graft.pinned, which a write without AwaitUpload refuses, and, with
// AwaitUpload, receives graft.uploaded.
func (u *uploadWait) handle(ctx workflow.Context, await bool) {
	_ = workflow.SetUpdateHandlerWithOptions(ctx, PinnedUpdateName, func(ctx workflow.Context) (PinnedResult, error) {
		if err := workflow.Await(ctx, func() bool { return u.pinned != nil }); err != nil {
			return PinnedResult{}, err
		}
		return *u.pinned, nil
	}, workflow.UpdateHandlerOptions{Validator: func() error {
		if !await {
			return errors.New("the write was started with its objects uploaded: there is nothing to pin first")
		}
		return nil
	}})
	if !await {
		return
	}
	ch := workflow.GetSignalChannel(ctx, UploadedSignalName)
	// Disconnected: a cancelled write still takes the first graft.uploaded, whatever came.
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	workflow.Go(dctx, func(ctx workflow.Context) {
		for {
			var req UploadedRequest
			ch.Receive(ctx, &req)
			if !u.uploaded {
				u.uploaded, u.failed = true, req.Failed
			}
		}
	})
}

// ended answers a graft.pinned still waiting when the write ends before its pins.
func (u *uploadWait) ended(e ending, err error) {
	if u.pinned != nil {
		return
	}
	if err != nil {
		u.pinned = &PinnedResult{Message: err.Error()}
		return
	}
	u.pinned = &PinnedResult{Outcome: e.out, Message: e.msg}
}

// MaxInlineObjects is the most objects WriteTableInput.Objects lists; a write of more
// stages them (WriteTableInput.Staged).
const MaxInlineObjects = activities.MaxInlineObjects

// TableImport is an existing object of the store registered in a table by reference: its
// key, its entry name, and the size and ETag a HEAD gave at import.
type TableImport = activities.TableImport

// WriteTableResult is the result of graft.WriteTable. Outcome done means Commit is on the
// branch and pins Version of Table.
type WriteTableResult struct {
	Outcome        outcome.Outcome `json:"outcome"`
	OpID           string          `json:"op_id"`
	Graph          string          `json:"graph"`
	Branch         string          `json:"branch"`
	Table          string          `json:"table"`
	Version        string          `json:"version,omitempty"`
	Commit         string          `json:"commit,omitempty"`
	Objects        int             `json:"objects"`
	Bytes          int64           `json:"bytes"`
	Message        string          `json:"message,omitempty"`
	HeadRetries    int             `json:"head_retries,omitempty"`
	SettleAttempts int             `json:"settle_attempts,omitempty"`
}

func (r *WriteTableResult) setSettleAttempts(n int) { r.SettleAttempts = n }

func (r *WriteTableResult) setEnd(out outcome.Outcome, msg string) {
	r.Outcome, r.Message = out, msg
	if out != outcome.Done {
		r.Commit = ""
	}
}

// WriteTable publishes a new table version on a branch: prepare (validate, claim, pin,
// probe the uploaded objects), write the manifest, then plan and append a commit that
// pins it on the branch's real head, with expected-head semantics — the kernel settling
// an in-doubt commit put rather than guessing.
func WriteTable(ctx workflow.Context, in WriteTableInput) (WriteTableResult, error) {
	r := startOp(ctx, runSpec{opID: in.OpID, kind: catalog.OpWriteTable, graph: in.Graph, branch: in.Branch, subject: in.Table + "@" + in.Branch})
	res := WriteTableResult{OpID: r.owner.OpID, Graph: in.Graph, Branch: in.Branch, Table: in.Table, Objects: len(in.Objects)}
	var objs []activities.TableObject
	for _, o := range in.Objects {
		objs = append(objs, activities.TableObject{ID: o.ID, Size: o.Size, SHA256: o.SHA256})
		res.Bytes += o.Size
	}
	edit := activities.TableEdit{Append: in.Append, Remove: in.Remove, Imports: in.Imports, Staged: in.Staged}
	var up uploadWait
	up.handle(ctx, in.AwaitUpload)
	err := r.run(ctx, &res, func(ctx workflow.Context) (e ending, err error) {
		defer func() { up.ended(e, err) }()
		var prep activities.PrepareWriteResult
		prepare := prepareInput(r, in, objs, edit)
		if in.AwaitUpload {
			if e, err := awaitUpload(ctx, r, in, prepare, &up, &prep); err != nil || e.out != "" {
				return e, err
			}
		} else if err := r.prepare(ctx, fmt.Sprintf("recording the write, pinning and probing %d objects", len(in.Objects)),
			"validate, claim, pin and probe the uploaded objects", acts.PrepareWrite, prepare, &prep); err != nil {
			return ending{}, err
		}
		r.claimed(prep.Owned, prep.Recorded)
		if in.Staged != "" {
			res.Objects, res.Bytes = prep.Objects, prep.Bytes
		}
		if prep.Outcome != "" {
			return end(prep.Outcome, prep.Message)
		}
		res.Version, r.status.Version = prep.Version, prep.Version

		r.setPhase(ctx, "manifest", "put-if-absent of version "+prep.Version)
		var man activities.WriteManifestResult
		if err := r.step(ctx, "manifest: put-if-absent version "+prep.Version, acts.WriteManifest, activities.WriteManifestInput{
			OpID: r.owner.OpID, Graph: in.Graph, Table: in.Table, Version: prep.Version, Objects: objs, Time: prep.Time, Edit: edit,
		}, &man); err != nil {
			return ending{}, fmt.Errorf("manifest: %w", err)
		}
		if man.Outcome != "" {
			return end(man.Outcome, man.Message)
		}
		return appendCommit(ctx, r, &res, in.ExpectedHead, in.Branch, &res.HeadRetries, func(ctx workflow.Context) (plannedCommit, error) {
			r.setPhase(ctx, PhasePlan, "reading the head of "+in.Branch)
			var plan activities.PlanCommitResult
			err := r.step(ctx, "plan: read the head, compute the commit", acts.PlanCommit, activities.PlanCommitInput{
				Owner: r.owner, Graph: in.Graph, Branch: in.Branch, Table: in.Table, Version: prep.Version,
				ExpectedHead: in.ExpectedHead, Author: in.Author, Message: in.Message, Time: prep.Time,
				Objects: objs, Edit: edit,
			}, &plan)
			if plan.Recorded != nil {
				r.claimed(false, plan.Recorded)
			}
			res.Commit, r.status.Commit = plan.Commit, plan.Commit
			if plan.Version != "" {
				res.Version, r.status.Version = plan.Version, plan.Version
			}
			return plannedCommit{out: plan.Outcome, msg: plan.Message, committed: plan.Committed, spec: plan.Spec, recorded: plan.PendingRecorded, success: outcome.Done}, err
		})
	})
	if in.AwaitUpload {
		// graft.pinned answers before the workflow closes, whatever ended the write.
		_ = workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) })
	}
	return res, err
}

// prepareInput is the input of a write's prepare steps.
func prepareInput(r *opRun, in WriteTableInput, objs []activities.TableObject, edit activities.TableEdit) activities.PrepareWriteInput {
	prepare := activities.PrepareWriteInput{
		OpID: r.owner.OpID, Graph: in.Graph, Branch: in.Branch, Table: in.Table, Objects: objs, Edit: edit,
		ExpectedHead: in.ExpectedHead, Author: in.Author, Message: in.Message, WorkflowID: r.wfID, RunID: r.owner.Run,
	}
	if p := in.StagedPlan; p != nil {
		prepare.StagedPlan = &activities.StagedPlan{FirstObject: p.FirstObject, Objects: p.Objects, Bytes: p.Bytes,
			Keys: p.Keys, ObjectsSHA256: in.ObjectsSHA256}
	}
	return prepare
}

// awaitUpload pins a pin-first write's planned objects (PrepareWrite, Planned) into pin,
// answers graft.pinned, then waits for graft.uploaded up to the write's deadline: past it
// the write ends abandoned, and a cancellation meanwhile ends it the same way. Waiting for
// a client follows no storage effect of the workflow's own, so a timer may end it. The
// write then only probes (ProbeWrite), whose outcome goes into pin: its claim and pins hold.
func awaitUpload(ctx workflow.Context, r *opRun, in WriteTableInput, prepare activities.PrepareWriteInput, up *uploadWait, pin *activities.PrepareWriteResult) (ending, error) {
	probe := prepare
	prepare.Planned = true
	if err := r.prepare(ctx, fmt.Sprintf("recording the write and pinning %d planned objects", len(in.Objects)),
		"validate, claim and pin the planned objects", acts.PrepareWrite, prepare, pin); err != nil {
		return ending{}, err
	}
	r.claimed(pin.Owned, pin.Recorded)
	if pin.Outcome != "" {
		return end(pin.Outcome, pin.Message)
	}
	up.pinned = &PinnedResult{}
	if err := workflow.UpsertMemo(ctx, map[string]any{PinnedMemo: true}); err != nil {
		return ending{}, err
	}
	deadline := DefaultUploadDeadline
	if in.UploadDeadlineSeconds > 0 {
		deadline = time.Duration(in.UploadDeadlineSeconds) * time.Second
	}
	r.cancelEnding = &ending{out: outcome.Abandoned,
		msg: "cancelled while waiting for its upload; nothing was published and its objects are released to cleanup"}
	r.setPhase(ctx, "upload", fmt.Sprintf("waiting up to %s for the client to upload the objects and send %s", deadline, UploadedSignalName))
	ok, err := workflow.AwaitWithOptions(ctx, workflow.AwaitOptions{Timeout: deadline,
		TimerOptions: workflow.TimerOptions{Summary: "upload deadline"}}, func() bool { return up.uploaded })
	if err != nil {
		return ending{}, err
	}
	r.cancelEnding = nil
	if !ok {
		return end(outcome.Abandoned, fmt.Sprintf("the upload did not finish within %s; nothing was published and its objects are released to cleanup", deadline))
	}
	if up.failed != "" {
		return end(outcome.Abandoned, "the client's upload failed ("+up.failed+"); nothing was published and its objects are released to cleanup")
	}
	var probed activities.PrepareWriteResult
	if err := r.prepare(ctx, fmt.Sprintf("probing %d uploaded objects", pin.Objects),
		"probe the uploaded objects", acts.ProbeWrite, probe, &probed); err != nil {
		return ending{}, err
	}
	pin.Outcome, pin.Message = probed.Outcome, probed.Message
	return ending{}, nil
}

// plannedCommit is what an operation's plan step decided about the commit it appends.
type plannedCommit struct {
	// out, when set, ends the operation without a write.
	out outcome.Outcome
	msg string
	// committed: the operation's commit is stored already.
	committed bool
	// moved: plan again (the head read moved on before its pin held).
	moved bool
	spec  activities.WriteSpec
	// recorded: the plan recorded spec as the operation's pending write.
	recorded bool
	// success is the outcome once the commit is stored.
	success outcome.Outcome
}

// appendCommit is the append loop WriteTable, Merge and Restore share: plan on the real
// head, write the commit through the kernel, and on a stale head plan again (at most
// MaxHeadRetries times) unless the caller named an expected head — then it is a conflict.
// The commit's landing ends the operation: the write records res as its end.
func appendCommit[R any, P interface {
	*R
	settledResult
}](ctx workflow.Context, r *opRun, res P, expectedHead, branch string, headRetries *int,
	plan func(ctx workflow.Context) (plannedCommit, error)) (ending, error) {
	for attempt := 0; ; attempt++ {
		p, err := plan(ctx)
		if err != nil {
			return ending{}, fmt.Errorf("plan: %w", err)
		}
		switch {
		case p.out != "":
			return end(p.out, p.msg)
		case p.committed:
			return end(p.success, "")
		case p.moved:
			if attempt >= MaxHeadRetries {
				return end(outcome.Conflict, fmt.Sprintf("the head of %q moved %d times; retry", branch, attempt+1))
			}
			*headRetries = attempt + 1
			continue
		}
		r.pendingRecorded = p.recorded
		v, err := r.writeLanding(ctx, p.spec, landedAs(r, res, p.success))
		res.setSettleAttempts(r.status.SettleAttempts)
		if err != nil {
			return ending{}, err
		}
		switch v.State {
		case activities.Landed:
			return ending{out: p.success, recorded: v.Recorded}, nil
		case activities.Refused:
			return end(outcome.Refused, v.Message)
		case activities.Invalid:
			return end(outcome.Invalid, v.Message)
		case activities.Fenced:
			return end(outcome.Unpublished, "the commit was fenced and never lands: "+v.Message)
		case activities.NotOwner:
			return ending{}, fmt.Errorf("the ledger row of %s is no longer this run's: %s", r.owner.OpID, v.Message)
		}
		// Other: another commit took the seq, or the head moved past it: ours never lands.
		if expectedHead != "" {
			return end(outcome.Conflict, fmt.Sprintf("the head of %q is no longer %s: %s", branch, expectedHead, v.Message))
		}
		if attempt >= MaxHeadRetries {
			return end(outcome.Conflict, fmt.Sprintf("the head of %q moved %d times while appending; retry", branch, attempt+1))
		}
		*headRetries = attempt + 1
	}
}
