package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/workflows"
)

// CreateTagRequest asks for an immutable tag on a commit.
type CreateTagRequest struct {
	Graph, Name string
	// Commit or Branch (at most one) names what to tag: a commit id, or a branch's head.
	// Both empty means the head of main.
	Commit, Branch string
	IdempotencyKey string
}

// CreateTagWorkflowID is the workflow id of a create of tag name: one in flight per name.
func CreateTagWorkflowID(graph, name string) string { return "graft/create-tag/" + graph + "/" + name }

// DeleteTagWorkflowID is the workflow id of a delete of tag name.
func DeleteTagWorkflowID(graph, name string) string { return "graft/delete-tag/" + graph + "/" + name }

// CreateTag creates a tag through graft.CreateTag and waits for the outcome: created
// with a nil error (Existing when the tag already named that commit); conflict when the
// name names another commit or was deleted; in doubt as OperationHandle.Wait says.
func (c *Client) CreateTag(ctx context.Context, req CreateTagRequest) (workflows.CreateTagResult, error) {
	key := keyOrNew(req.IdempotencyKey)
	in := workflows.CreateTagInput{Graph: req.Graph, Name: req.Name, Commit: req.Commit, Branch: req.Branch, OpID: key}
	h, err := startOperation(ctx, c, operationStart{
		Check: req.Validate(), Kind: "tag",
		ID: CreateTagWorkflowID(req.Graph, req.Name), Workflow: workflows.CreateTagName, Input: in,
		Summary: fmt.Sprintf("create tag %s in %s", req.Name, req.Graph), Graph: req.Graph, Branch: req.Branch, OpID: key,
		ReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE, Finished: req.IdempotencyKey != "",
	}, workflows.CreateTagResult{Graph: req.Graph, Name: req.Name})
	return startWait(ctx, h, err, false)
}

// DeleteTagRequest asks to delete a tag.
type DeleteTagRequest struct {
	Graph, Name    string
	IdempotencyKey string
}

// DeleteTag retires a tag through graft.DeleteTag and waits for the outcome: deleted
// with a nil error; not_found for a tag that does not exist or was deleted already; in
// doubt as OperationHandle.Wait says. A deleted tag's name is never reused.
func (c *Client) DeleteTag(ctx context.Context, req DeleteTagRequest) (workflows.DeleteTagResult, error) {
	key := keyOrNew(req.IdempotencyKey)
	in := workflows.DeleteTagInput{Graph: req.Graph, Name: req.Name, OpID: key}
	h, err := startOperation(ctx, c, operationStart{
		Check: req.Validate(), Kind: "tag",
		ID: DeleteTagWorkflowID(req.Graph, req.Name), Workflow: workflows.DeleteTagName, Input: in,
		Summary: fmt.Sprintf("delete tag %s in %s", req.Name, req.Graph), Graph: req.Graph, OpID: key,
		ReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE, Finished: req.IdempotencyKey != "",
	}, workflows.DeleteTagResult{Graph: req.Graph, Name: req.Name})
	return startWait(ctx, h, err, false)
}

// TagInfo is one tag as storage holds it.
type TagInfo struct {
	Name      string    `json:"name"`
	State     string    `json:"state"` // live or retired
	Commit    string    `json:"commit"`
	Op        string    `json:"op"`
	CreatedAt time.Time `json:"created_at"`
	RetiredOp string    `json:"retired_op,omitempty"`
}

// TagDetail is one tag and what it names.
type TagDetail struct {
	TagInfo
	// Retained reports whether the tagged commit still exists.
	Retained bool `json:"retained"`
	// Branch, Time, Author and Message describe the tagged commit, when retained.
	Branch  string     `json:"branch,omitempty"`
	Time    time.Time  `json:"time,omitzero"`
	Author  string     `json:"author,omitempty"`
	Message string     `json:"message,omitempty"`
	Pins    []TablePin `json:"pins,omitempty"`
}

func tagInfo(t format.Tag) TagInfo {
	return TagInfo{Name: t.Name, State: string(t.State), Commit: t.Commit.String(), Op: t.Op, CreatedAt: t.CreatedAt, RetiredOp: t.RetiredOp}
}

// ListTags lists a graph's tags by name: the live ones, or with all set the retired ones
// too. One GET of the graph record, one LIST per thousand tags and one GET per tag.
func (r *Reader) ListTags(ctx context.Context, graphName string, all bool) ([]TagInfo, error) {
	if _, err := r.Graph(ctx, graphName); err != nil {
		return nil, err
	}
	tags, err := graph.ListTags(ctx, r.store, graphName)
	if err != nil {
		return nil, readError(err, graphName, "")
	}
	out := []TagInfo{}
	for _, t := range tags {
		if all || t.Tag.State == format.TagLive {
			out = append(out, tagInfo(t.Tag))
		}
	}
	return out, nil
}

// ShowTag reads one tag, live or retired, and the commit it names.
func (r *Reader) ShowTag(ctx context.Context, graphName, name string) (TagDetail, error) {
	if err := format.ValidateTagName(name); err != nil {
		return TagDetail{}, outcome.Errorf(outcome.Invalid, "", "%v", err)
	}
	if _, err := r.Graph(ctx, graphName); err != nil {
		return TagDetail{}, err
	}
	t, err := graph.ReadTag(ctx, r.store, graphName, name)
	if errors.Is(err, graph.ErrTagNotFound) {
		return TagDetail{}, outcome.Errorf(outcome.NotFound, "", "tag %q does not exist in graph %q", name, graphName)
	}
	if err != nil {
		return TagDetail{}, readError(err, graphName, "")
	}
	d := TagDetail{TagInfo: tagInfo(t.Tag)}
	c, err := graph.ReadCommitView(ctx, r.store, graphName, t.Tag.Commit.String())
	switch {
	case errors.Is(err, graph.ErrCommitNotFound):
		return d, nil
	case err != nil:
		return TagDetail{}, readError(err, graphName, "")
	}
	d.Retained, d.Branch, d.Time, d.Author, d.Message = true, c.Branch, c.Time, c.Author, c.Message
	d.Pins = tablePins(c.Pins)
	return d, nil
}
