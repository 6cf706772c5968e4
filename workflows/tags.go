package workflows

import (
	"go.temporal.io/sdk/workflow"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
)

// Registered names of the tag workflows. Stable.
const (
	CreateTagName = "graft.CreateTag"
	DeleteTagName = "graft.DeleteTag"
)

// CreateTagInput is the input of graft.CreateTag.
type CreateTagInput struct {
	Graph string `json:"graph"`
	// Name is the tag's name: '/'-separated segments, like a branch name.
	Name string `json:"name"`
	// Commit or Branch (at most one) names what to tag: a commit id, or a branch's head.
	// Both empty means the head of main.
	Commit string `json:"commit,omitempty"`
	Branch string `json:"branch,omitempty"`
	OpID   string `json:"op_id,omitempty"`
}

// CreateTagResult is the result of graft.CreateTag. Outcome created means the tag names
// Commit; Existing says it did already (the same create repeated, or another create of
// the same name on the same commit).
type CreateTagResult struct {
	Outcome        outcome.Outcome `json:"outcome"`
	OpID           string          `json:"op_id"`
	Graph          string          `json:"graph"`
	Name           string          `json:"name"`
	Commit         string          `json:"commit,omitempty"`
	Existing       bool            `json:"existing,omitempty"`
	Message        string          `json:"message,omitempty"`
	SettleAttempts int             `json:"settle_attempts,omitempty"`
}

func (r *CreateTagResult) setEnd(out outcome.Outcome, msg string) { r.Outcome, r.Message = out, msg }

// CreateTag creates an immutable tag: prepare (resolve the commit, claim, pin it, probe
// it), then put the tag with put-if-absent through the kernel. A name that already names
// another commit, or was deleted, is a conflict.
func CreateTag(ctx workflow.Context, in CreateTagInput) (CreateTagResult, error) {
	r := startOp(ctx, runSpec{opID: in.OpID, kind: catalog.OpTag, graph: in.Graph, branch: in.Branch, subject: "tag " + in.Name})
	res := CreateTagResult{OpID: r.owner.OpID, Graph: in.Graph, Name: in.Name}
	err := r.run(ctx, &res, func(ctx workflow.Context) (ending, error) {
		var prep activities.PrepareTagResult
		if err := r.prepare(ctx, "resolving and pinning the commit to tag", "resolve, claim, pin and probe the commit", acts.PrepareTag,
			activities.PrepareTagInput{OpID: r.owner.OpID, Graph: in.Graph, Name: in.Name, Commit: in.Commit, Branch: in.Branch,
				WorkflowID: r.wfID, RunID: r.owner.Run}, &prep); err != nil {
			return ending{}, err
		}
		r.claimed(prep.Owned, prep.Recorded)
		res.Commit = prep.Commit
		if prep.Outcome != "" {
			return end(prep.Outcome, prep.Message)
		}
		v, err := r.writeIn(ctx, "tag", "put-if-absent of tag "+in.Name, prep.Spec, nil, &res.SettleAttempts)
		if err != nil {
			return ending{}, err
		}
		switch v.State {
		case activities.Landed:
			res.Existing = v.Equivalent
			return end(outcome.Created, v.Message)
		case activities.Refused:
			return end(outcome.Refused, v.Message)
		case activities.Invalid:
			return end(outcome.Invalid, v.Message)
		case activities.Fenced:
			return end(outcome.Unpublished, "the tag put was fenced and never lands: "+v.Message)
		}
		return end(outcome.Conflict, v.Message)
	})
	return res, err
}

// DeleteTagInput is the input of graft.DeleteTag.
type DeleteTagInput struct {
	Graph string `json:"graph"`
	Name  string `json:"name"`
	OpID  string `json:"op_id,omitempty"`
}

// DeleteTagResult is the result of graft.DeleteTag. Outcome deleted means a retired tag
// now holds the name for good: the commit is no longer kept by it, and the name is never
// reused.
type DeleteTagResult struct {
	Outcome        outcome.Outcome `json:"outcome"`
	OpID           string          `json:"op_id"`
	Graph          string          `json:"graph"`
	Name           string          `json:"name"`
	Commit         string          `json:"commit,omitempty"` // the commit the tag named
	Message        string          `json:"message,omitempty"`
	SettleAttempts int             `json:"settle_attempts,omitempty"`
}

func (r *DeleteTagResult) setEnd(out outcome.Outcome, msg string) { r.Outcome, r.Message = out, msg }
func (r *DeleteTagResult) setSettleAttempts(n int)                { r.SettleAttempts = n }

// DeleteTag retires a tag by compare-and-swap into a retired tag that keeps the key.
func DeleteTag(ctx workflow.Context, in DeleteTagInput) (DeleteTagResult, error) {
	r := startOp(ctx, runSpec{opID: in.OpID, kind: catalog.OpTag, graph: in.Graph, subject: "tag " + in.Name})
	res := DeleteTagResult{OpID: r.owner.OpID, Graph: in.Graph, Name: in.Name}
	err := r.run(ctx, &res, func(ctx workflow.Context) (ending, error) {
		var prep activities.PrepareDeleteTagResult
		if err := r.prepare(ctx, "reading tag "+in.Name, "read the tag", acts.PrepareDeleteTag, activities.PrepareDeleteTagInput{
			OpID: r.owner.OpID, Graph: in.Graph, Name: in.Name, WorkflowID: r.wfID, RunID: r.owner.Run}, &prep); err != nil {
			return ending{}, err
		}
		r.claimed(prep.Owned, prep.Recorded)
		res.Commit = prep.Commit
		switch {
		case prep.Outcome != "":
			return end(prep.Outcome, prep.Message)
		case prep.Retired:
			return end(OutcomeDeleted, "")
		}
		v, err := r.writeIn(ctx, "retire", "compare-and-swap of tag "+in.Name, prep.Spec, landedAs(r, &res, OutcomeDeleted), &res.SettleAttempts)
		if err != nil {
			return ending{}, err
		}
		return retired(v, "the tag changed while deleting it: ")
	})
	return res, err
}
