package activities

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
)

// PrepareTagInput is the input of PrepareTag.
type PrepareTagInput struct {
	OpID, Graph, Name string
	Commit, Branch    string // at most one names what to tag; neither: the head of main
	WorkflowID, RunID string // the workflow's; RunID claims the ledger row
}

// PrepareTagResult is the tag to put, or the outcome that ends the create.
type PrepareTagResult struct {
	Outcome outcome.Outcome
	Message string
	Owned   bool // the ledger row is this run's: the kernel finishes it
	// Commit is the id of the commit to tag; Spec the write of the tag's exact bytes.
	Commit string
	Spec   WriteSpec
	// Recorded is the result this run recorded when it finished the operation, found
	// when the step runs again after that end (docs/operations.md).
	Recorded json.RawMessage `json:",omitempty"`
}

// PrepareTag validates a tag create, resolves the commit, records the operation with the
// commit pinned, probes it, and computes the tag's bytes.
func (a *Activities) PrepareTag(ctx context.Context, in PrepareTagInput) (PrepareTagResult, error) {
	if err := firstError(format.ValidateGraphName(in.Graph), format.ValidateTagName(in.Name), format.ValidateOp(in.OpID)); err != nil {
		return PrepareTagResult{Outcome: outcome.Invalid, Message: err.Error()}, nil
	}
	if in.Commit != "" && in.Branch != "" {
		return PrepareTagResult{Outcome: outcome.Invalid, Message: "give a commit id or a branch, not both"}, nil
	}
	rec := opRecord(catalog.OpTag, in.OpID, in.Graph, in.WorkflowID, in.RunID, map[string]string{"action": "create", "tag": in.Name, "commit": in.Commit, "branch": in.Branch})

	var h graph.Head
	var o outcome.Outcome
	var msg string
	var err error
	if in.Commit != "" {
		h.Commit, o, msg, err = a.resolveCommit(ctx, in.Graph, in.Commit, "")
	} else {
		h, o, msg, err = a.readBranchHead(ctx, in.Graph, cmp.Or(in.Branch, graph.DefaultBranch))
	}
	c := h.Commit
	if err != nil {
		return PrepareTagResult{}, err
	}
	if o == "" {
		if _, err := graph.TagBytes(graph.TagParams{Graph: in.Graph, Name: in.Name, Commit: c.ID.String(), Op: in.OpID, Time: c.Time}); err != nil {
			o, msg = outcome.Invalid, err.Error()
		}
	}
	r, err := a.claimCommit(ctx, rec, c.ID, o, msg, "")
	if err != nil {
		return PrepareTagResult{}, err
	}
	res := PrepareTagResult{Outcome: r.outcome, Message: r.message, Owned: r.owned, Recorded: r.recorded}
	if o != "" {
		return res, nil
	}
	res.Commit = c.ID.String()
	if r.outcome != "" {
		return res, nil
	}
	body, err := graph.TagBytes(graph.TagParams{Graph: in.Graph, Name: in.Name, Commit: res.Commit, Op: in.OpID, Time: r.op.CreatedAt})
	if err != nil {
		res.Outcome, res.Message = outcome.Invalid, err.Error()
		return res, nil
	}
	res.Spec = WriteSpec{Kind: WriteTag, Graph: in.Graph, Body: body, Landed: outcome.Created, Subject: in.Name}
	return res, nil
}

// PrepareDeleteTagInput is the input of PrepareDeleteTag.
type PrepareDeleteTagInput struct {
	OpID, Graph, Name string
	WorkflowID, RunID string // the workflow's; RunID claims the ledger row
}

// PrepareDeleteTagResult is the tag to retire, or the outcome that ends the delete.
type PrepareDeleteTagResult struct {
	Outcome outcome.Outcome
	Message string
	Owned   bool // the ledger row is this run's: the kernel finishes it
	// Commit is the commit the tag names; Spec the compare-and-swap that retires it.
	Commit  string
	Spec    WriteSpec
	Retired bool // this operation retired the tag already (a repeated request)
	// Recorded is the result this run recorded when it finished the operation, found
	// when the step runs again after that end (docs/operations.md).
	Recorded json.RawMessage `json:",omitempty"`
}

// PrepareDeleteTag records a tag delete and reads the tag: one GET.
func (a *Activities) PrepareDeleteTag(ctx context.Context, in PrepareDeleteTagInput) (PrepareDeleteTagResult, error) {
	if err := firstError(format.ValidateGraphName(in.Graph), format.ValidateTagName(in.Name), format.ValidateOp(in.OpID)); err != nil {
		return PrepareDeleteTagResult{Outcome: outcome.Invalid, Message: err.Error()}, nil
	}
	r, err := a.claim(ctx, nil, opRecord(catalog.OpTag, in.OpID, in.Graph, in.WorkflowID, in.RunID, map[string]string{"action": "delete", "tag": in.Name}))
	if err != nil || !r.owned {
		return PrepareDeleteTagResult{Outcome: r.outcome, Message: r.message, Recorded: r.recorded}, err
	}
	res := PrepareDeleteTagResult{Owned: true}
	stop := func(o outcome.Outcome, f string, args ...any) (PrepareDeleteTagResult, error) {
		res.Outcome, res.Message = o, fmt.Sprintf(f, args...)
		return res, nil
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
	res.Spec = WriteSpec{Kind: WriteRetireTag, Graph: in.Graph, Name: in.Name, ETag: t.ETag, Landed: outcome.Deleted}
	return res, nil
}
