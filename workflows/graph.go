package workflows

import (
	"fmt"

	"go.temporal.io/sdk/workflow"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
)

// InitGraphName is the registered name of InitGraph. Stable.
const InitGraphName = "graft.InitGraph"

// InitGraphInput is the input of graft.InitGraph.
type InitGraphInput struct {
	Graph string `json:"graph"`
	OpID  string `json:"op_id,omitempty"`
	// Author of main's root commit. Defaults to "graft".
	Author string `json:"author,omitempty"`
}

// InitGraphResult is the result of graft.InitGraph. Outcome done means the graph exists
// with this operation's bytes; Created says whether this run wrote it or found it
// already written by an earlier run of the operation.
type InitGraphResult struct {
	Outcome outcome.Outcome `json:"outcome"`
	OpID    string          `json:"op_id"`
	Graph   string          `json:"graph"`
	// Main is the native name of main's first incarnation; Root its root commit.
	Main    string `json:"main,omitempty"`
	Root    string `json:"root,omitempty"`
	Created bool   `json:"created"`
	Message string `json:"message,omitempty"`
	// ForeignKey, with outcome conflict, names a key under the graph's prefix that graft
	// did not write for this graph (docs/format.md, *Ownership*); nothing was written.
	ForeignKey string `json:"foreign_key,omitempty"`
}

func (r *InitGraphResult) setEnd(out outcome.Outcome, msg string) { r.Outcome, r.Message = out, msg }

// InitGraph creates a graph: main's root commit, main's live ref and the graph record,
// witnessed in the ledger before they are written. Every byte it writes is fixed by the
// operation id, so its one step runs until the store and the ledger answer; a store that
// definitely refuses ends it as refused.
func InitGraph(ctx workflow.Context, in InitGraphInput) (InitGraphResult, error) {
	r := startOp(ctx, runSpec{opID: in.OpID, kind: catalog.OpInitGraph, graph: in.Graph, branch: "main", subject: in.Graph})
	res := InitGraphResult{OpID: r.owner.OpID, Graph: in.Graph}
	initOnce := func(ctx workflow.Context) (ending, error) {
		r.setPhase(ctx, "init", "writing the root commit, main's ref and the graph record")
		var init activities.InitGraphResult
		if err := r.step(ctx, "init: root commit, main ref, graph record", acts.InitGraph, activities.InitGraphInput{
			OpID: r.owner.OpID, Graph: in.Graph, Author: in.Author, WorkflowID: r.wfID, RunID: r.owner.Run,
		}, &init); err != nil {
			return ending{}, fmt.Errorf("init graph: %w", err)
		}
		r.claimed(init.Owned, init.Recorded)
		res.Main, res.Root, res.Created, res.ForeignKey = init.Main, init.Root, init.Created, init.ForeignKey
		return end(init.Outcome, init.Message)
	}
	err := r.run(ctx, &res, func(ctx workflow.Context) (ending, error) {
		// The init's puts may land whatever ends the workflow: a cancellation runs it to its
		// end rather than leave a half-written graph.
		r.drive = initOnce
		e, err := initOnce(ctx)
		if err == nil {
			r.drive = nil
		}
		return e, err
	})
	return res, err
}
