package workflows

import (
	"fmt"
	"time"

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
	// Commit or Branch (at most one) names what to tag: a commit id, or a
	// branch's head. Both empty means the head of main.
	Commit string `json:"commit,omitempty"`
	Branch string `json:"branch,omitempty"`
	// OpID identifies the operation in the ledger. Defaults to the workflow id.
	OpID string `json:"op_id,omitempty"`
}

// CreateTagResult is the result of graft.CreateTag. Outcome created means
// the tag names Commit; Existing says it did already (the same create
// repeated, or another create of the same name on the same commit).
type CreateTagResult struct {
	Outcome  outcome.Outcome `json:"outcome"`
	OpID     string          `json:"op_id"`
	Graph    string          `json:"graph"`
	Name     string          `json:"name"`
	Commit   string          `json:"commit,omitempty"`
	Existing bool            `json:"existing,omitempty"`
	Message  string          `json:"message,omitempty"`
	// SettleAttempts counts re-issues of an in-doubt tag put.
	SettleAttempts int `json:"settle_attempts,omitempty"`
}

// CreateTag creates an immutable tag: prepare (resolve the commit, pin it,
// probe it), then put the tag with put-if-absent, settling an in-doubt put
// by re-issuing the same bytes. A name that already names another commit,
// or was deleted, is a conflict.
func CreateTag(ctx workflow.Context, in CreateTagInput) (CreateTagResult, error) {
	var a *activities.Activities
	info := workflow.GetInfo(ctx)
	r, err := newOpRun(ctx, in.OpID, catalog.OpTag, in.Graph, in.Branch, "tag "+in.Name)
	if err != nil {
		return CreateTagResult{}, err
	}
	res := CreateTagResult{OpID: r.opID, Graph: in.Graph, Name: in.Name}
	end := func(out outcome.Outcome, message string, recorded bool) (CreateTagResult, error) {
		res.Outcome, res.Message = out, message
		r.finish(ctx, out, message, recorded)
		return res, nil
	}

	r.setPhase(ctx, "prepare", "resolving and pinning the commit to tag")
	var prep activities.PrepareTagResult
	if err := workflow.ExecuteLocalActivity(localStep(ctx, opPrepareOptions, "prepare: resolve, pin and probe the commit"),
		a.PrepareTag, activities.PrepareTagInput{
			OpID: r.opID, Graph: in.Graph, Name: in.Name, Commit: in.Commit, Branch: in.Branch,
			WorkflowID: info.WorkflowExecution.ID, RunID: info.WorkflowExecution.RunID,
		}).Get(ctx, &prep); err != nil {
		res.Message = err.Error()
		r.finish(ctx, "", res.Message, true)
		return res, fmt.Errorf("prepare: %w", err)
	}
	res.Commit = prep.Commit
	if prep.Outcome != "" {
		return end(prep.Outcome, prep.Message, prep.Recorded)
	}
	put, err := r.putTag(ctx, in.Graph, in.Name, prep.Body)
	res.SettleAttempts = r.status.SettleAttempts
	if err != nil {
		res.Message = err.Error()
		r.finish(ctx, "", res.Message, true)
		return res, err
	}
	switch put.State {
	case activities.TagStored:
		return end(outcome.Created, "", true)
	case activities.TagFound:
		res.Existing = true
		return end(outcome.Created, put.Message, true)
	case activities.TagRefused:
		return end(outcome.Refused, put.Message, true)
	case activities.TagInvalid:
		return end(outcome.Invalid, put.Message, true)
	}
	return end(outcome.Conflict, put.Message, true)
}

// putTag puts a tag (a create's, or a restore's backup) and, if its put is
// in doubt, settles it by re-issuing the same bytes.
func (r *opRun) putTag(ctx workflow.Context, graph, name string, body []byte) (activities.PutTagResult, error) {
	var a *activities.Activities
	var put activities.PutTagResult
	do := func(since time.Time) (bool, string, error) {
		r.setPhase(ctx, "tag", "put-if-absent of tag "+name)
		err := workflow.ExecuteLocalActivity(localStep(ctx, opEffectOptions, "tag: put-if-absent "+name),
			a.PutTag, activities.PutTagInput{OpID: r.opID, Graph: graph, Kind: r.kind, Body: body, InDoubtSince: since}).Get(ctx, &put)
		if err != nil {
			return false, "", fmt.Errorf("put tag: %w", err)
		}
		return put.State == activities.TagInDoubt, put.Message, nil
	}
	return put, r.write(ctx, "tag "+name, do)
}

// DeleteTagInput is the input of graft.DeleteTag.
type DeleteTagInput struct {
	Graph string `json:"graph"`
	Name  string `json:"name"`
	// OpID identifies the operation in the ledger. Defaults to the workflow id.
	OpID string `json:"op_id,omitempty"`
}

// DeleteTagResult is the result of graft.DeleteTag. Outcome deleted means
// a retired tag now holds the name for good: the commit is no longer kept
// by it, and the name is never reused.
type DeleteTagResult struct {
	Outcome outcome.Outcome `json:"outcome"`
	OpID    string          `json:"op_id"`
	Graph   string          `json:"graph"`
	Name    string          `json:"name"`
	// Commit is the commit the tag named.
	Commit         string `json:"commit,omitempty"`
	Message        string `json:"message,omitempty"`
	SettleAttempts int    `json:"settle_attempts,omitempty"`
}

// DeleteTag retires a tag by compare-and-swap into a retired tag that keeps
// the key, settling an in-doubt swap by reading back and re-issuing it.
func DeleteTag(ctx workflow.Context, in DeleteTagInput) (DeleteTagResult, error) {
	var a *activities.Activities
	info := workflow.GetInfo(ctx)
	r, err := newOpRun(ctx, in.OpID, catalog.OpTag, in.Graph, "", "tag "+in.Name)
	if err != nil {
		return DeleteTagResult{}, err
	}
	res := DeleteTagResult{OpID: r.opID, Graph: in.Graph, Name: in.Name}
	end := func(out outcome.Outcome, message string, recorded bool) (DeleteTagResult, error) {
		res.Outcome, res.Message = out, message
		r.finish(ctx, out, message, recorded)
		return res, nil
	}
	fail := func(err error) (DeleteTagResult, error) {
		res.Message = err.Error()
		r.finish(ctx, "", res.Message, true)
		return res, err
	}

	r.setPhase(ctx, "prepare", "reading tag "+in.Name)
	var prep activities.PrepareDeleteTagResult
	if err := workflow.ExecuteLocalActivity(localStep(ctx, opPrepareOptions, "prepare: read the tag"),
		a.PrepareDeleteTag, activities.PrepareDeleteTagInput{
			OpID: r.opID, Graph: in.Graph, Name: in.Name, WorkflowID: info.WorkflowExecution.ID, RunID: info.WorkflowExecution.RunID,
		}).Get(ctx, &prep); err != nil {
		return fail(fmt.Errorf("prepare: %w", err))
	}
	res.Commit = prep.Commit
	switch {
	case prep.Outcome != "":
		return end(prep.Outcome, prep.Message, prep.Recorded)
	case prep.Retired:
		return end(OutcomeDeleted, "", true)
	}
	var ret activities.RetireIncarnationResult
	do := func(since time.Time) (bool, string, error) {
		r.setPhase(ctx, "retire", "compare-and-swap of tag "+in.Name)
		err := workflow.ExecuteLocalActivity(localStep(ctx, opEffectOptions, "retire: compare-and-swap tag "+in.Name),
			a.RetireTag, activities.RetireTagInput{OpID: r.opID, Graph: in.Graph, Name: in.Name, ETag: prep.ETag, InDoubtSince: since}).Get(ctx, &ret)
		if err != nil {
			return false, "", fmt.Errorf("retire tag: %w", err)
		}
		return ret.State == activities.RetireInDoubt, ret.Message, nil
	}
	err = r.write(ctx, "retire of tag "+in.Name, do)
	res.SettleAttempts = r.status.SettleAttempts
	if err != nil {
		return fail(err)
	}
	switch ret.State {
	case activities.RetireDone:
		return end(OutcomeDeleted, "", true)
	case activities.RetireRefused:
		return end(outcome.Refused, ret.Message, true)
	}
	return end(outcome.Conflict, "the tag changed while deleting it: "+ret.Message, true)
}
