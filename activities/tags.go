package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/storage"
)

// PrepareTagInput is the input of PrepareTag.
type PrepareTagInput struct {
	OpID, Graph, Name string
	// Commit or Branch (at most one) names what to tag: a commit id, or a
	// branch's head. Both empty means the head of main.
	Commit, Branch    string
	WorkflowID, RunID string
}

// PrepareTagResult is the tag to put, or the outcome that ends the create.
type PrepareTagResult struct {
	Outcome  outcome.Outcome
	Message  string
	Recorded bool
	Foreign  bool
	// Commit is the id of the commit to tag; Body the tag's exact bytes.
	Commit string
	Body   []byte
}

// PrepareTag validates a tag create, resolves the commit, records the
// operation and pins the commit and its versions (one ledger transaction),
// probes that the commit — and, when it was named by id, every version it
// pins — still exists, and computes the tag's bytes.
func (a *Activities) PrepareTag(ctx context.Context, in PrepareTagInput) (PrepareTagResult, error) {
	end := func(o outcome.Outcome, f string, args ...any) (PrepareTagResult, error) {
		return PrepareTagResult{Outcome: o, Message: fmt.Sprintf(f, args...)}, nil
	}
	for _, check := range []error{format.ValidateGraphName(in.Graph), format.ValidateTagName(in.Name), format.ValidateOp(in.OpID)} {
		if check != nil {
			return end(outcome.Invalid, "%v", check)
		}
	}
	if in.Commit != "" && in.Branch != "" {
		return end(outcome.Invalid, "give a commit id or a branch, not both")
	}
	inputs, _ := json.Marshal(map[string]string{"action": "create", "tag": in.Name, "commit": in.Commit, "branch": in.Branch})
	rec := catalog.OperationInsertParams{ID: in.OpID, Kind: catalog.OpTag, Graph: in.Graph, Inputs: inputs,
		WorkflowID: in.WorkflowID, RunID: in.RunID}

	var (
		c   format.Commit
		o   outcome.Outcome
		msg string
		err error
	)
	if in.Commit != "" {
		c, o, msg, err = a.resolveCommit(ctx, in.Graph, in.Commit, "")
	} else {
		branch := in.Branch
		if branch == "" {
			branch = graph.DefaultBranch
		}
		var bh branchHead
		bh, o, msg, err = a.readBranchHead(ctx, in.Graph, branch)
		c = bh.head
	}
	if err != nil {
		return PrepareTagResult{}, err
	}
	if o != "" {
		r, err := a.recordOnly(ctx, rec)
		if err != nil || r.outcome != "" {
			return PrepareTagResult{Outcome: r.outcome, Message: r.message, Recorded: !r.foreign, Foreign: r.foreign}, err
		}
		return PrepareTagResult{Outcome: o, Message: msg, Recorded: true}, nil
	}
	r, err := a.recordWithPins(ctx, rec, commitPins(in.Graph, c))
	if err != nil {
		return PrepareTagResult{}, err
	}
	res := PrepareTagResult{Recorded: !r.foreign, Foreign: r.foreign, Commit: c.ID.String()}
	if r.outcome != "" {
		res.Outcome, res.Message = r.outcome, r.message
		return res, nil
	}
	keys := []string{format.CommitIDKey(in.Graph, c.ID)}
	if in.Commit != "" { // a branch head is a retention root; an arbitrary commit may be old
		for table, v := range c.Pins {
			keys = append(keys, format.TableVersionKey(in.Graph, table, v))
		}
	}
	missing, err := a.probeKeys(ctx, keys...)
	if err != nil {
		return PrepareTagResult{}, err
	}
	if missing != "" {
		res.Outcome, res.Message = outcome.NotRetained, fmt.Sprintf("commit %s needs %s, which cleanup has reclaimed", c.ID, missing)
		return res, nil
	}
	res.Body, err = graph.TagBytes(graph.TagParams{Graph: in.Graph, Name: in.Name, Commit: res.Commit, Op: in.OpID, Time: r.op.CreatedAt})
	if err != nil {
		res.Outcome, res.Message = outcome.Invalid, err.Error()
	}
	return res, nil
}

// TagState is what PutTag proved about a tag put.
type TagState string

const (
	TagStored  TagState = "created"  // our bytes are at the tag's key
	TagFound   TagState = "exists"   // a live tag of the same commit was there already: success
	TagOther   TagState = "conflict" // the name holds another commit's tag, or a retired tag
	TagInDoubt TagState = "in_doubt" // still unknown; may land later
	TagRefused TagState = "refused"  // the store definitely refused the put
	TagInvalid TagState = "invalid"  // the bytes are not a valid tag
)

// PutTagInput is the input of PutTag.
type PutTagInput struct {
	OpID, Graph string
	// Kind is the operation's kind (tag, or restore for a backup tag), for metrics.
	Kind catalog.OperationKind
	// Body is the tag's exact bytes; every put sends exactly these.
	Body []byte
	// InDoubtSince is when the put first came back in doubt; zero on the first put.
	InDoubtSince time.Time
}

// PutTagResult is the output of PutTag.
type PutTagResult struct {
	State   TagState
	Message string
	// Commit is the commit the tag now at the key names (for TagOther, the other one).
	Commit string
}

// PutTag puts a live tag with put-if-absent, settled by reading back
// (graph.PutTag). An unknown outcome is in_doubt, settled by calling PutTag
// again with the same bytes.
func (a *Activities) PutTag(ctx context.Context, in PutTagInput) (PutTagResult, error) {
	put, err := graph.PutTag(ctx, a.Store, in.Graph, in.Body)
	var res PutTagResult
	switch {
	case errors.Is(err, storage.ErrAmbiguous):
		return PutTagResult{State: TagInDoubt, Message: err.Error()}, nil
	case errors.Is(err, storage.ErrRefused), errors.Is(err, storage.ErrInvalidKey):
		return PutTagResult{State: TagRefused, Message: err.Error()}, nil
	case errors.Is(err, graph.ErrInvalid):
		return PutTagResult{State: TagInvalid, Message: err.Error()}, nil
	case isUnreadableObject(err):
		res = PutTagResult{State: TagOther, Message: err.Error()}
	case err != nil:
		return PutTagResult{}, fmt.Errorf("put tag: %w", err)
	case put.Outcome == graph.TagCreated:
		res = PutTagResult{State: TagStored, Commit: put.Tag.Commit.String()}
	case put.Outcome == graph.TagExists:
		res = PutTagResult{State: TagFound, Commit: put.Tag.Commit.String(),
			Message: fmt.Sprintf("tag %q already names %s (operation %s)", put.Tag.Name, put.Tag.Commit, put.Tag.Op)}
	case put.Tag.State == format.TagRetired:
		res = PutTagResult{State: TagOther, Commit: put.Tag.Commit.String(),
			Message: fmt.Sprintf("tag %q was deleted by operation %s; a tag name is never reused", put.Tag.Name, put.Tag.RetiredOp)}
	default:
		res = PutTagResult{State: TagOther, Commit: put.Tag.Commit.String(),
			Message: fmt.Sprintf("tag %q already names another commit, %s (operation %s); tags are immutable", put.Tag.Name, put.Tag.Commit, put.Tag.Op)}
	}
	if !in.InDoubtSince.IsZero() {
		a.observeWriteSettled(string(in.Kind), in.InDoubtSince)
	}
	return res, nil
}

// PrepareDeleteTagInput is the input of PrepareDeleteTag.
type PrepareDeleteTagInput struct {
	OpID, Graph, Name string
	WorkflowID, RunID string
}

// PrepareDeleteTagResult is the tag to retire, or the outcome that ends the delete.
type PrepareDeleteTagResult struct {
	Outcome  outcome.Outcome
	Message  string
	Recorded bool
	Foreign  bool
	// ETag is the live tag's, for the compare-and-swap; Commit the commit it names.
	ETag, Commit string
	// Retired: this operation retired the tag already (a repeated request).
	Retired bool
}

// PrepareDeleteTag records a tag delete and reads the tag: one GET.
func (a *Activities) PrepareDeleteTag(ctx context.Context, in PrepareDeleteTagInput) (PrepareDeleteTagResult, error) {
	for _, check := range []error{format.ValidateGraphName(in.Graph), format.ValidateTagName(in.Name), format.ValidateOp(in.OpID)} {
		if check != nil {
			return PrepareDeleteTagResult{Outcome: outcome.Invalid, Message: check.Error()}, nil
		}
	}
	inputs, _ := json.Marshal(map[string]string{"action": "delete", "tag": in.Name})
	r, err := a.recordOnly(ctx, catalog.OperationInsertParams{ID: in.OpID, Kind: catalog.OpTag, Graph: in.Graph, Inputs: inputs,
		WorkflowID: in.WorkflowID, RunID: in.RunID})
	if err != nil {
		return PrepareDeleteTagResult{}, err
	}
	res := PrepareDeleteTagResult{Recorded: !r.foreign, Foreign: r.foreign}
	stop := func(o outcome.Outcome, f string, args ...any) (PrepareDeleteTagResult, error) {
		res.Outcome, res.Message = o, fmt.Sprintf(f, args...)
		return res, nil
	}
	if r.outcome != "" {
		return stop(r.outcome, "%s", r.message)
	}
	t, err := graph.ReadTag(ctx, a.Store, in.Graph, in.Name)
	switch {
	case errors.Is(err, graph.ErrTagNotFound):
		if _, gerr := graph.ReadGraph(ctx, a.Store, in.Graph); errors.Is(gerr, graph.ErrGraphNotFound) {
			return stop(outcome.NotFound, "graph %q does not exist", in.Graph)
		}
		return stop(outcome.NotFound, "tag %q does not exist in graph %q", in.Name, in.Graph)
	case isUnreadableObject(err):
		return stop(outcome.Conflict, "%v", err)
	case err != nil:
		return PrepareDeleteTagResult{}, fmt.Errorf("read tag: %w", err)
	}
	res.Commit = t.Tag.Commit.String()
	if t.Tag.State == format.TagRetired {
		if t.Tag.RetiredOp == in.OpID {
			res.Retired = true
			return res, nil
		}
		return stop(outcome.NotFound, "tag %q was already deleted (by operation %s)", in.Name, t.Tag.RetiredOp)
	}
	res.ETag = t.ETag
	return res, nil
}

// RetireState is what a retire step proved: RetireDone, RetireNotLive,
// RetireChanged (see RetireIncarnation), or one of these.
const (
	RetireInDoubt RetireState = "in_doubt" // the compare-and-swap's outcome is still unknown
	RetireRefused RetireState = "refused"  // the store definitely refused it
)

// RetireTagInput is the input of RetireTag.
type RetireTagInput struct {
	OpID, Graph, Name string
	// ETag is the live tag's (PrepareDeleteTagResult.ETag).
	ETag string
	// InDoubtSince is when the retire first came back in doubt; zero at first.
	InDoubtSince time.Time
}

// RetireTag replaces the live tag by a retired one with compare-and-swap
// (graph.RetireTag): done, changed (another operation retired it first),
// in_doubt (call again to settle: it reads back and re-issues the same
// bytes) or refused.
func (a *Activities) RetireTag(ctx context.Context, in RetireTagInput) (RetireIncarnationResult, error) {
	_, err := graph.RetireTag(ctx, a.Store, in.Graph, in.Name, in.ETag, in.OpID)
	var res RetireIncarnationResult
	switch {
	case err == nil:
		res.State = RetireDone
	case errors.Is(err, graph.ErrTagChanged), errors.Is(err, graph.ErrInvalid), isUnreadableObject(err):
		res = RetireIncarnationResult{State: RetireChanged, Message: err.Error()}
	case errors.Is(err, storage.ErrAmbiguous):
		return RetireIncarnationResult{State: RetireInDoubt, Message: err.Error()}, nil
	case errors.Is(err, storage.ErrRefused), errors.Is(err, storage.ErrInvalidKey):
		return RetireIncarnationResult{State: RetireRefused, Message: err.Error()}, nil
	default:
		return RetireIncarnationResult{}, fmt.Errorf("retire tag %s: %w", in.Name, err)
	}
	if !in.InDoubtSince.IsZero() {
		a.observeWriteSettled(string(catalog.OpTag), in.InDoubtSince)
	}
	return res, nil
}
