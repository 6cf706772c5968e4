package workflows_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/oklog/ulid/v2"
	sdkclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/workflows"
)

// A write of more objects than a request lists inline: the client stages the list
// as a version no commit pins, the workflow's history carries only its id, and the new
// version shares the staged chunks (docs/format.md, "Staged object lists").

// manyFiles writes n small distinct files.
func manyFiles(t *testing.T, n int, tag string) []string {
	t.Helper()
	bodies := make([]string, n)
	for i := range bodies {
		bodies[i] = fmt.Sprintf("%s-%d", tag, i)
	}
	return writeFiles(t, bodies...)
}

// startInput is the input graft.WriteTable's workflow was started with.
func (r *rig2) startInput(id string) workflows.WriteTableInput {
	r.t.Helper()
	it := r.tc.GetWorkflowHistory(r.ctx, id, "", false, 0)
	ev, err := it.Next()
	if err != nil {
		r.t.Fatalf("history of %s: %v", id, err)
	}
	var in workflows.WriteTableInput
	if err := sdkclient.NewValue(ev.GetWorkflowExecutionStartedEventAttributes().GetInput()).Get(&in); err != nil {
		r.t.Fatalf("decode the input of %s: %v", id, err)
	}
	return in
}

func (r *rig2) countEntries(c graph.Commit, table string) int { return len(r.entryNames(c, table)) }

func TestWriteMoreObjectsThanARequestListsInline_StagedThenAppended_AllListedAndReadable(t *testing.T) {
	t.Parallel()
	r := newRig2(t)
	r.startWorker()
	n := 2*workflows.MaxInlineObjects + 7
	w, err := r.gc.WriteTable(r.ctx, r.inner, client.WriteTableRequest{Graph: r.graph, Branch: "main", Table: "big",
		Files: manyFiles(t, n, "a"), IdempotencyKey: "big-1"})
	if err != nil || w.Outcome != outcome.Done || w.Objects != n {
		t.Fatalf("write of %d files: %+v, %v; want done with %d objects", n, w, err, n)
	}
	in := r.startInput(client.WriteTableWorkflowID(r.graph, "main", "big-1"))
	if in.Staged == "" || len(in.Objects) != 0 {
		t.Fatalf("the workflow's input lists %d objects inline, staged %q; want none inline and a staged version", len(in.Objects), in.Staged)
	}
	head := r.branchHead("main").Commit
	if got := r.countEntries(head, "big"); got != n {
		t.Fatalf("version lists %d entries; want %d", got, n)
	}
	// The published version is built on the staged one, not a copy of its list.
	staged, err := r.g.Version(r.ctx, "big", ulid.MustParse(in.Staged))
	if err != nil {
		t.Fatalf("staged version: %v", err)
	}
	v, _ := r.g.TableAt(r.ctx, head, "big")
	if v.ID.String() == in.Staged || v.Entries.Root != staged.Entries.Root {
		t.Fatalf("version %s (root %s); want a version of its own sharing the staged root %s", v.ID, v.Entries.Root, staged.Entries.Root)
	}

	// An append of as many again: the plan writes the edited chunks itself.
	a, err := r.gc.WriteTable(r.ctx, r.inner, client.WriteTableRequest{Graph: r.graph, Branch: "main", Table: "big",
		Files: manyFiles(t, n, "b"), Append: true, IdempotencyKey: "big-2"})
	if err != nil || a.Outcome != outcome.Done || a.Objects != n {
		t.Fatalf("append of %d files: %+v, %v; want done", n, a, err)
	}
	r.report("main", a.Commit) // the head; the sweep below may reclaim the first write's commit
	if got := r.countEntries(r.branchHead("main").Commit, "big"); got != 2*n {
		t.Fatalf("after the append the version lists %d entries; want %d", got, 2*n)
	}

	// The staged versions are garbage once the writes ended: a sweep reclaims them and
	// keeps everything the head names (the oracle reads every object back at the end).
	res := r.cleanup(client.CleanupRequest{KeepNewest: 1, Mode: workflows.CleanupModeSweep, GuardWindow: noGuard()})
	if res.Outcome != outcome.Done {
		t.Fatalf("sweep: %+v", res)
	}
	if _, err := r.g.Version(r.ctx, "big", ulid.MustParse(in.Staged)); !errors.Is(err, graph.ErrVersionNotFound) {
		t.Fatalf("staged version after the sweep: %v; want reclaimed", err)
	}
	if got := r.countEntries(r.branchHead("main").Commit, "big"); got != 2*n {
		t.Fatalf("after the sweep the head's version lists %d entries; want %d", got, 2*n)
	}
}

// A request that names a staged list wrongly ends before anything is written: too many
// objects inline, a list both inline and staged, a staged version of another operation
// (invalid), and one that does not exist (not_retained).
func TestWriteStagedWrongly_InvalidOrNotRetained_NothingPublished(t *testing.T) {
	t.Parallel()
	r := newRig2(t)
	r.startWorker()
	before := r.branchHead("main")
	obj := func(i int) workflows.TableObject {
		return workflows.TableObject{ID: ulid.Make().String(), Size: int64(i), SHA256: strings.Repeat("0", 64)}
	}
	var tooMany []workflows.TableObject
	for i := 0; i <= workflows.MaxInlineObjects; i++ {
		tooMany = append(tooMany, obj(i))
	}
	other, err := r.g.PutVersion(r.ctx, graph.VersionSpec{Table: "big", VersionID: ulid.Make(), Op: "someone-else", Time: r.head.Time,
		Put: []format.ManifestEntry{{Name: "x", Object: ulid.Make(), Size: 1, SHA256: strings.Repeat("0", 64)}}})
	if err != nil {
		t.Fatal(err)
	}
	digest := workflows.ObjectsSHA256(tooMany[:1])
	for name, c := range map[string]struct {
		in   workflows.WriteTableInput
		want outcome.Outcome
	}{
		"too many inline":      {workflows.WriteTableInput{Objects: tooMany}, outcome.Invalid},
		"inline and staged":    {workflows.WriteTableInput{Objects: tooMany[:1], Staged: ulid.Make().String()}, outcome.Invalid},
		"another op's staged":  {workflows.WriteTableInput{Staged: other.Version.ID.String()}, outcome.Invalid},
		"staged never written": {workflows.WriteTableInput{Staged: ulid.Make().String()}, outcome.NotRetained},
		"a staged plan without await_upload": {workflows.WriteTableInput{Staged: ulid.Make().String(), ObjectsSHA256: digest,
			StagedPlan: &workflows.StagedPlan{FirstObject: ulid.Make().String(), Objects: 1, Bytes: 1}}, outcome.Invalid},
		"a staged plan pinning a key outside its table": {workflows.WriteTableInput{AwaitUpload: true, Staged: ulid.Make().String(),
			ObjectsSHA256: digest, StagedPlan: &workflows.StagedPlan{FirstObject: ulid.Make().String(), Objects: 1, Bytes: 1,
				Keys: []string{format.BranchRefsPrefix(r.graph) + "main.json"}}}, outcome.Invalid},
	} {
		in := c.in
		in.Graph, in.Branch, in.Table, in.OpID = r.graph, "main", "big", "staged-"+ulid.Make().String()
		run, err := r.tc.ExecuteWorkflow(r.ctx, sdkclient.StartWorkflowOptions{ID: in.OpID, TaskQueue: r.taskQueue}, workflows.WriteTableName, in)
		if err != nil {
			t.Fatal(err)
		}
		var res workflows.WriteTableResult
		err = run.Get(r.ctx, &res)
		var app *temporal.ApplicationError
		if !errors.As(err, &app) || app.Type() != string(c.want) {
			t.Errorf("%s: %v (%+v); want %s", name, err, res, c.want)
		}
	}
	// A planned staged list whose client puts another list under its id: the probe after
	// the upload finds it is not what was pinned.
	first := ulid.Make()
	planned := []format.ManifestEntry{{Name: first.String(), Object: first, Size: 1, SHA256: strings.Repeat("0", 64)}}
	spec := graph.VersionSpec{Table: "big", VersionID: ulid.Make(), Op: "staged-planned-" + ulid.Make().String(), Time: r.head.Time, Put: planned}
	plan, err := r.g.PlanVersion(r.ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	in := workflows.WriteTableInput{Graph: r.graph, Branch: "main", Table: "big", OpID: spec.Op, AwaitUpload: true,
		Staged: spec.VersionID.String(), ObjectsSHA256: workflows.ObjectsSHA256([]workflows.TableObject{{Size: 1, SHA256: planned[0].SHA256}}),
		StagedPlan: &workflows.StagedPlan{FirstObject: first.String(), Objects: 1, Bytes: 1, Keys: plan.Keys()}}
	run, err := r.tc.ExecuteWorkflow(r.ctx, sdkclient.StartWorkflowOptions{ID: in.OpID, TaskQueue: r.taskQueue}, workflows.WriteTableName, in)
	if err != nil {
		t.Fatal(err)
	}
	spec.Put = []format.ManifestEntry{{Name: first.String(), Object: first, Size: 2, SHA256: strings.Repeat("0", 64)}}
	if _, err := r.g.PutVersion(r.ctx, spec); err != nil {
		t.Fatal(err)
	}
	if err := r.tc.SignalWorkflow(r.ctx, run.GetID(), run.GetRunID(), workflows.UploadedSignalName, workflows.UploadedRequest{}); err != nil {
		t.Fatal(err)
	}
	var app *temporal.ApplicationError
	if err := run.Get(r.ctx, nil); !errors.As(err, &app) || app.Type() != string(outcome.Invalid) || !strings.Contains(err.Error(), "not the list the write planned") {
		t.Errorf("a staged list other than its plan: %v; want invalid", err)
	}
	if now := r.branchHead("main"); now.ETag != before.ETag {
		t.Fatalf("main moved to %s", now.Commit.ID)
	}
}
