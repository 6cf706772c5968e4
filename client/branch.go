package client

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/bounded"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/workflows"
)

// RepairBranchRequest asks to make Branch live through Keep alone.
type RepairBranchRequest struct {
	Graph, Branch string
	// Keep is the native name ({branch}.{ULID}) of the live incarnation to keep; the error
	// of a refused listing names the candidates.
	Keep           string
	IdempotencyKey string
}

// RepairBranchWorkflowID is the workflow id of a repair: one in flight per branch name.
func RepairBranchWorkflowID(graph, branch string) string {
	return "graft/repair-branch/" + graph + "/" + branch
}

// RepairBranch retires every live incarnation of req.Branch but req.Keep, by
// compare-and-swap, and waits for the outcome: done with a nil error and the retired
// natives; invalid when Keep is not live.
func (c *Client) RepairBranch(ctx context.Context, req RepairBranchRequest) (workflows.RepairBranchResult, error) {
	key := keyOrNew(req.IdempotencyKey)
	in := workflows.RepairBranchInput{Graph: req.Graph, Branch: req.Branch, Keep: req.Keep, OpID: key}
	h, err := startOperation(ctx, c, operationStart{
		Check: req.Validate(), Kind: "repair_branch", Wrap: "start repair of " + req.Graph + "/" + req.Branch,
		ID: RepairBranchWorkflowID(req.Graph, req.Branch), Workflow: workflows.RepairBranchName, Input: in,
		Summary: fmt.Sprintf("repair branch %s in %s, keeping %s", req.Branch, req.Graph, req.Keep), Graph: req.Graph, Branch: req.Branch, OpID: key,
		ReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE, Finished: req.IdempotencyKey != "",
	}, workflows.RepairBranchResult{})
	return startWait(ctx, h, err, true)
}

// Reader answers read-only questions straight from the store: no workflow, no ledger.
// Errors that are outcomes are *outcome.Error (not_found for a missing graph or branch,
// conflict for a branch with several live incarnations — its message names the repair
// step — invalid for bad names).
type Reader struct {
	store storage.Store
	// Locator, when set, turns a store key into the URI an engine reads it at
	// (s3://bucket/prefix/key, file:///dir/key), for TableObject.URI.
	Locator func(key string) string
}

// NewReader returns a Reader over the store graft's workers use.
func NewReader(store storage.Store) *Reader { return &Reader{store: store} }

// BranchInfo is one live branch in a listing.
type BranchInfo struct {
	Branch string `json:"branch"`
	// Native is the branch's live incarnation; Tables counts the tables its head pins.
	Native   string    `json:"native"`
	Head     string    `json:"head"`
	HeadTime time.Time `json:"head_time"`
	Tables   int       `json:"tables"`
}

// GraphInfo is a graph's record.
type GraphInfo struct {
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
	// Op is the operation that created the graph; DefaultBranch is main.
	Op            string `json:"op"`
	DefaultBranch string `json:"default_branch"`
}

// Graph reads a graph's record.
func (r *Reader) Graph(ctx context.Context, graphName string) (GraphInfo, error) {
	if err := checkGraph(graphName); err != nil {
		return GraphInfo{}, err
	}
	g, err := graph.ReadGraph(ctx, r.store, graphName)
	if err != nil {
		return GraphInfo{}, readError(err, graphName, "")
	}
	return GraphInfo{Name: g.Name, CreatedAt: g.CreatedAt, Op: g.Op, DefaultBranch: g.DefaultBranch}, nil
}

// ListBranches lists the live branches of a graph, by name, with their heads: a GET of
// the graph record, a listing of the refs, then per branch a GET of the ref and a head
// read (LIST + GET), 8 at a time.
func (r *Reader) ListBranches(ctx context.Context, graphName string) ([]BranchInfo, error) {
	if _, err := r.Graph(ctx, graphName); err != nil {
		return nil, err
	}
	bs, err := graph.ListBranches(ctx, r.store, graphName)
	if err != nil {
		return nil, readError(err, graphName, "")
	}
	out := make([]BranchInfo, len(bs))
	err = bounded.EachErr(len(bs), 8, func(i int) error {
		b := bs[i]
		head, err := graph.BranchHeadView(ctx, r.store, graphName, b)
		if err != nil {
			return fmt.Errorf("branch %s: %w", b.Logical, err)
		}
		out[i] = BranchInfo{Branch: b.Logical, Native: b.Native, Head: head.ID.String(), HeadTime: head.Time, Tables: len(head.Pins)}
		return nil
	})
	if err != nil {
		return nil, readError(err, graphName, "")
	}
	return out, nil
}

// RefInfo describes a branch's live ref and the operation that wrote it.
type RefInfo struct {
	Key   string `json:"key"`
	State string `json:"state"`
	Op    string `json:"op"`
	ETag  string `json:"etag"`
}

// TablePin is one table a commit pins.
type TablePin struct {
	Table   string `json:"table"`
	Version string `json:"version"`
}

// BranchDetail is one branch: its live incarnation, ref and head commit.
type BranchDetail struct {
	Graph        string     `json:"graph"`
	Branch       string     `json:"branch"`
	Native       string     `json:"native"`
	Head         string     `json:"head"`
	HeadTime     time.Time  `json:"head_time"`
	Author       string     `json:"author"`
	Message      string     `json:"message"`
	Op           string     `json:"op"`   // the operation that wrote the head
	Pins         []TablePin `json:"pins"` // by table name
	Parents      []string   `json:"parents"`
	RestoredFrom string     `json:"restored_from,omitempty"`
	Ref          RefInfo    `json:"ref"`
}

// ShowBranch reads one branch: its live ref and its head commit.
func (r *Reader) ShowBranch(ctx context.Context, graphName, branch string) (BranchDetail, error) {
	b, head, err := r.branchHead(ctx, graphName, branch)
	if err != nil {
		return BranchDetail{}, err
	}
	e := logEntry(head)
	return BranchDetail{
		Graph: graphName, Branch: branch, Native: b.Native,
		Head: e.Commit, HeadTime: head.Time, Author: head.Author, Message: head.Message, Op: head.Op,
		Pins: tablePins(head.Pins), Parents: e.Parents, RestoredFrom: e.RestoredFrom,
		Ref: RefInfo{Key: format.BranchRefKey(graphName, b.Native), State: string(b.Ref.State), Op: b.Ref.Op, ETag: b.ETag},
	}, nil
}

// branchHead reads the graph's record, then branch's live incarnation and its head.
func (r *Reader) branchHead(ctx context.Context, graphName, branch string) (graph.Branch, graph.CommitView, error) {
	if _, err := r.Graph(ctx, graphName); err != nil {
		return graph.Branch{}, graph.CommitView{}, err
	}
	b, err := graph.ResolveBranch(ctx, r.store, graphName, branch)
	if err != nil {
		return b, graph.CommitView{}, readError(err, graphName, branch)
	}
	head, err := graph.BranchHeadView(ctx, r.store, graphName, b)
	if err != nil {
		return b, head, readError(err, graphName, branch)
	}
	return b, head, nil
}

// readError turns a read's error into an *outcome.Error when it is an outcome, and
// returns anything else (an unreachable store, a malformed object) as is.
func readError(err error, graphName, branch string) error {
	var ml *graph.MultipleLiveError
	switch {
	case errors.Is(err, graph.ErrGraphNotFound):
		return outcome.Errorf(outcome.NotFound, "", "graph %q does not exist; create it with `graft graph init %s`", graphName, graphName)
	case errors.Is(err, graph.ErrBranchNotFound):
		return outcome.Errorf(outcome.NotFound, "", "branch %q does not exist in graph %q", branch, graphName)
	case errors.Is(err, graph.ErrCommitNotFound):
		return outcome.Errorf(outcome.NotFound, "", "%v", err)
	case errors.As(err, &ml):
		msg := err.Error()
		if !strings.Contains(msg, ml.RepairCommand()) {
			msg += "; " + ml.RepairHint()
		}
		return outcome.Errorf(outcome.Conflict, "", "%s", msg)
	case errors.Is(err, graph.ErrInvalid), errors.Is(err, format.ErrInvalidName):
		return outcome.Errorf(outcome.Invalid, "", "%v", err)
	}
	return err
}

func tablePins(pins map[string]ulid.ULID) []TablePin {
	out := make([]TablePin, 0, len(pins))
	for _, table := range slices.Sorted(maps.Keys(pins)) {
		out = append(out, TablePin{Table: table, Version: pins[table].String()})
	}
	return out
}
