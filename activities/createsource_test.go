package activities

import (
	"strings"
	"testing"
	"time"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/graph"
)

// A create starts from main's head, another branch's head, a commit id or a live tag, and
// ends before any pin with the outcome each missing or malformed source deserves.
func TestPrepareCreate_Sources_ResolveOrEndWithTheirOutcome(t *testing.T) {
	r := newResolveRig(t)
	g, err := graph.Open(r.store, r.graph)
	if err != nil {
		t.Fatal(err)
	}
	main, err := g.BranchHead(r.ctx, graph.DefaultBranch)
	if err != nil {
		t.Fatal(err)
	}
	head := main.Commit.ID.String()

	// A live tag of main's head, and a deleted one.
	tag := func(name string) {
		opID, wf, run := r.op("tag")
		prep, err := r.a.PrepareTag(r.ctx, PrepareTagInput{OpID: opID, Graph: r.graph, Name: name, WorkflowID: wf, RunID: run})
		if err != nil || prep.Outcome != "" {
			t.Fatalf("prepare tag %s: %+v, %v", name, prep, err)
		}
		o := Owner{OpID: opID, Run: run}
		if v, err := r.a.Write(r.ctx, WriteInput{Owner: o, Spec: prep.Spec}); err != nil || v.State != Landed {
			t.Fatalf("put tag %s: %+v, %v", name, v, err)
		}
		r.finish(o, catalog.OpTag, outcome.Created)
	}
	tag("v1")
	tag("gone")
	opID, wf, run := r.op("untag")
	del, err := r.a.PrepareDeleteTag(r.ctx, PrepareDeleteTagInput{OpID: opID, Graph: r.graph, Name: "gone", WorkflowID: wf, RunID: run})
	if err != nil || del.Outcome != "" {
		t.Fatalf("prepare delete tag: %+v, %v", del, err)
	}
	if v, err := r.a.Write(r.ctx, WriteInput{Owner: Owner{OpID: opID, Run: run}, Spec: del.Spec}); err != nil || v.State != Landed {
		t.Fatalf("retire tag: %+v, %v", v, err)
	}
	r.finish(Owner{OpID: opID, Run: run}, catalog.OpTag, outcome.Deleted)
	r.create("side")

	missingCommit := main.Commit.ID
	missingCommit.Seq += 7
	for _, tc := range []struct {
		name    string
		in      PrepareCreateInput
		out     outcome.Outcome
		message string
	}{
		{"main's head", PrepareCreateInput{}, "", ""},
		{"a branch's head", PrepareCreateInput{SourceBranch: "side"}, "", ""},
		{"a commit", PrepareCreateInput{SourceCommit: head}, "", ""},
		{"a live tag", PrepareCreateInput{SourceTag: "v1"}, "", ""},
		{"two sources", PrepareCreateInput{SourceBranch: "side", SourceTag: "v1"}, outcome.Invalid, "at most one source"},
		{"a malformed commit", PrepareCreateInput{SourceCommit: "nope"}, outcome.Invalid, "commit"},
		{"a missing commit", PrepareCreateInput{SourceCommit: missingCommit.String()}, outcome.NotFound, "does not exist"},
		{"a missing tag", PrepareCreateInput{SourceTag: "v9"}, outcome.NotFound, `tag "v9" does not exist`},
		{"a deleted tag", PrepareCreateInput{SourceTag: "gone"}, outcome.NotFound, `tag "gone" was deleted`},
		{"a missing branch", PrepareCreateInput{SourceBranch: "nobody"}, outcome.NotFound, `branch "nobody" does not exist`},
		{"a commit of a missing graph", PrepareCreateInput{Graph: "nograph", SourceCommit: head}, outcome.NotFound, `graph "nograph" does not exist`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opID, wf, run := r.op("create")
			in := tc.in
			in.OpID, in.Branch, in.Time, in.Attempt, in.WorkflowID, in.RunID = opID, "new/"+opID, time.Now().UTC(), 1, wf, run
			if in.Graph == "" {
				in.Graph = r.graph
			}
			prep, err := r.a.PrepareCreate(r.ctx, in)
			if err != nil || prep.Outcome != tc.out || !strings.Contains(prep.Message, tc.message) {
				t.Fatalf("prepare: %+v, %v; want outcome %q with %q", prep, err, tc.out, tc.message)
			}
			if tc.out == "" && (prep.SourceCommit == "" || !prep.Owned) {
				t.Fatalf("prepare: %+v; want a source commit, owned", prep)
			}
			if tc.out == "" && tc.in.SourceBranch == "" && prep.SourceCommit != head {
				t.Fatalf("source commit %s, want main's head %s", prep.SourceCommit, head)
			}
		})
	}
}
