package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/faults"
	"github.com/graftworks/graft/workflows"
)

// TestMergeTagRestoreDelete_EndToEnd_InProcess drives merge, tag, restore
// and branch delete through Execute against a worker on the real stack
// (Temporal dev server, Postgres ledger, local store): a preview writes
// nothing, a merge lands, tags are idempotent but never re-pointed, a
// restore backs up the head it replaces, a deleted branch leaves the
// listing and main cannot be deleted — JSON and exit codes checked at each
// step.
func TestMergeTagRestoreDelete_EndToEnd_InProcess(t *testing.T) {
	p := newInProcess(t)
	const g = "mg"
	file := tempFiles(t)
	write := func(branch, table, body string) workflows.WriteTableResult {
		t.Helper()
		r := p.run(t, "table", "write", g, branch, table, file(branch[:1]+table+".csv", body), "-o", "json")
		wantCode(t, r, 0)
		return jsonOut[workflows.WriteTableResult](t, r)
	}
	show := func(branch string) client.BranchDetail {
		t.Helper()
		r := p.run(t, "branch", "show", g, branch, "-o", "json")
		wantCode(t, r, 0)
		return jsonOut[client.BranchDetail](t, r)
	}
	tables := func(d client.BranchDetail) []string {
		var out []string
		for _, pin := range d.Pins {
			out = append(out, pin.Table)
		}
		return out
	}

	wantCode(t, p.run(t, "graph", "init", g), 0)
	mainWrite := write("main", "events", "id\n1\n")
	r := p.run(t, "branch", "create", g, "feature/x", "-o", "json")
	wantCode(t, r, 0)
	created := jsonOut[workflows.CreateBranchResult](t, r)
	branchWrite := write("feature/x", "orders", "id\n2\n")

	// A preview plans and writes nothing: no put, main's head unchanged, no
	// operation in the ledger.
	p.store.ResetCounts()
	r = p.run(t, "merge", g, "feature/x", "--preview", "-o", "json")
	wantCode(t, r, 0)
	preview := jsonOut[workflows.MergeResult](t, r)
	if !preview.Preview || !preview.Outcome.Success() || preview.Commit != "" || preview.OpID != "" ||
		preview.TargetHead != mainWrite.Commit || preview.SourceHead != branchWrite.Commit ||
		len(preview.Tables) != 1 || preview.Tables[0].Table != "orders" || preview.Tables[0].Action != workflows.MergeAdopt {
		t.Fatalf("preview result %+v", preview)
	}
	if puts := p.store.Count(faults.OpPut).Attempted; puts != 0 {
		t.Fatalf("the preview put %d objects", puts)
	}
	if head := show("main").Head; head != mainWrite.Commit {
		t.Fatalf("main's head moved to %s after a preview", head)
	}
	r = p.run(t, "op", "list", "--kind", "merge", "-o", "json")
	wantCode(t, r, 0)
	if ops := jsonOut[opList](t, r); len(ops.Operations) != 0 {
		t.Fatalf("a preview recorded operations: %+v", ops)
	}

	r = p.run(t, "merge", g, "feature/x", "-m", "ship orders", "-o", "json")
	wantCode(t, r, 0)
	merged := jsonOut[workflows.MergeResult](t, r)
	if (merged.Outcome != outcome.Merged && merged.Outcome != outcome.Adopted) || merged.Outcome != preview.Outcome ||
		merged.Commit == "" || merged.OpID == "" || merged.Target != "main" {
		t.Fatalf("merge result %+v (preview said %s)", merged, preview.Outcome)
	}
	mainAfterMerge := show("main")
	if mainAfterMerge.Head != merged.Commit || !slices.Equal(tables(mainAfterMerge), []string{"events", "orders"}) ||
		mainAfterMerge.Message != "ship orders" {
		t.Fatalf("main after the merge: %+v; want head %s with events and orders", mainAfterMerge, merged.Commit)
	}
	// The same merge again has nothing to adopt; the text names the outcome.
	r = p.run(t, "merge", g, "feature/x")
	wantStdout(t, r, "main is already up to date with feature/x", "nothing was written")

	// Tags: a create is idempotent on the same commit and never re-pointed.
	r = p.run(t, "tag", "create", g, "v1", "--commit", mainWrite.Commit, "-o", "json")
	wantCode(t, r, 0)
	if tag := jsonOut[workflows.CreateTagResult](t, r); tag.Outcome != outcome.Created || tag.Existing || tag.Commit != mainWrite.Commit {
		t.Fatalf("first tag create %+v", tag)
	}
	r = p.run(t, "tag", "create", g, "v1", "--commit", mainWrite.Commit, "-o", "json")
	wantCode(t, r, 0)
	if tag := jsonOut[workflows.CreateTagResult](t, r); tag.Outcome != outcome.Created || !tag.Existing || tag.Commit != mainWrite.Commit {
		t.Fatalf("repeated tag create %+v", tag)
	}
	rep := jsonErr(t, p.run(t, "tag", "create", g, "v1", "--branch", "feature/x", "-o", "json"))
	if rep.Outcome != "conflict" || rep.ExitCode != 5 || !strings.Contains(rep.Next, "graft tag show "+g+" v1") {
		t.Fatalf("tag on another commit: %+v", rep)
	}

	// Restore main to the tag: a new head with the tag's pins, and a backup
	// tag of the head it replaced, which tag list shows.
	r = p.run(t, "restore", g, "main", "--tag", "v1", "-o", "json")
	wantCode(t, r, 0)
	restored := jsonOut[workflows.RestoreResult](t, r)
	wantBackup := "backup/main/" + merged.Commit
	if restored.Outcome != outcome.Done || restored.RestoredFrom != mainWrite.Commit || restored.PreviousHead != merged.Commit ||
		restored.BackupTag != wantBackup || restored.Commit == "" {
		t.Fatalf("restore result %+v", restored)
	}
	mainAfterRestore := show("main")
	if mainAfterRestore.Head != restored.Commit || mainAfterRestore.RestoredFrom != mainWrite.Commit ||
		!slices.Equal(tables(mainAfterRestore), []string{"events"}) {
		t.Fatalf("main after the restore: %+v", mainAfterRestore)
	}
	r = p.run(t, "tag", "list", g, "-o", "json")
	wantCode(t, r, 0)
	tags := map[string]string{}
	for _, tg := range jsonOut[tagList](t, r).Tags {
		tags[tg.Name] = tg.Commit
	}
	if len(tags) != 2 || tags["v1"] != mainWrite.Commit || tags[wantBackup] != merged.Commit {
		t.Fatalf("tag list %v; want v1 at %s and %s at %s", tags, mainWrite.Commit, wantBackup, merged.Commit)
	}
	r = p.run(t, "tag", "show", g, wantBackup, "-o", "json")
	wantCode(t, r, 0)
	if d := jsonOut[client.TagDetail](t, r); !d.Retained || d.Branch != "main" || len(d.Pins) != 2 {
		t.Fatalf("tag show %s: %+v", wantBackup, d)
	}

	// Branch delete: the branch leaves the listing; main cannot be deleted.
	r = p.run(t, "branch", "delete", g, "feature/x", "-o", "json")
	wantCode(t, r, 0)
	if del := jsonOut[workflows.DeleteBranchResult](t, r); del.Outcome != outcome.Deleted || del.Native != created.Native ||
		del.Head != branchWrite.Commit {
		t.Fatalf("branch delete result %+v", del)
	}
	r = p.run(t, "branch", "list", g, "-o", "json")
	wantCode(t, r, 0)
	if list := jsonOut[branchList](t, r); len(list.Branches) != 1 || list.Branches[0].Branch != "main" {
		t.Fatalf("branch list after the delete: %+v", list)
	}
	wantText(t, p.run(t, "branch", "delete", g, "feature/x"), 6, "not_found", "graft branch list "+g)
	wantText(t, p.run(t, "branch", "delete", g, "main"), 2, "invalid", "main cannot be deleted", "graft restore "+g+" main")

	// Tag delete: the tag is retired for good, and shown as such.
	r = p.run(t, "tag", "delete", g, "v1", "-o", "json")
	wantCode(t, r, 0)
	if del := jsonOut[workflows.DeleteTagResult](t, r); del.Outcome != outcome.Deleted || del.Commit != mainWrite.Commit {
		t.Fatalf("tag delete result %+v", del)
	}
	wantText(t, p.run(t, "tag", "delete", g, "v1"), 6, "not_found", "already deleted", "graft tag list "+g+" --all")
	r = p.run(t, "tag", "list", g, "--all", "-o", "json")
	wantCode(t, r, 0)
	states := map[string]string{}
	for _, tg := range jsonOut[tagList](t, r).Tags {
		states[tg.Name] = tg.State
	}
	if states["v1"] != string(format.TagRetired) || states[wantBackup] != string(format.TagLive) {
		t.Fatalf("tag list --all states %v", states)
	}
}

// TestMerge_TableChangedOnBothSides_ExitsConflictListingTheTables_PreviewToo
// writes the same table on a branch and on main: a preview and a merge
// both exit 5, name the table (text) and list it under "conflicts" (JSON),
// and neither writes anything. The conflict is an object both sides changed
// differently: the branch removes an imported object, main imports it again
// after it changed (a replacement).
func TestMerge_TableChangedOnBothSides_ExitsConflictListingTheTables_PreviewToo(t *testing.T) {
	p := newInProcess(t)
	ctx := context.Background()
	const g = "mc"
	dir := t.TempDir()
	f := filepath.Join(dir, "part.csv")
	if err := os.WriteFile(f, []byte("id\n1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const landing = "landing/events.parquet"
	if _, err := p.store.Inner().Put(ctx, landing, []byte("v1"), storage.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	wantCode(t, p.run(t, "graph", "init", g), 0)
	wantCode(t, p.run(t, "table", "write", g, "main", "keep", f), 0)
	wantCode(t, p.run(t, "table", "write", g, "main", "events", "--import", landing), 0)
	wantCode(t, p.run(t, "branch", "create", g, "feature/y"), 0)
	wantCode(t, p.run(t, "table", "write", g, "feature/y", "events", "--remove", landing), 0)
	if _, err := p.store.Inner().Put(ctx, landing, []byte("v2, longer"), storage.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	wantCode(t, p.run(t, "table", "write", g, "main", "events", "--append", "--import", landing), 0)
	wantCode(t, p.run(t, "table", "write", g, "feature/y", "only_branch", f), 0)

	p.store.ResetCounts()
	for _, preview := range []bool{true, false} {
		args := []string{"merge", g, "feature/y", "--into", "main", "-o", "json"}
		if preview {
			args = append(args, "--preview")
		}
		r := p.run(t, args...)
		rep := jsonErr(t, r)
		if rep.Outcome != "conflict" || rep.ExitCode != 5 || len(rep.Conflicts) != 1 || rep.Conflicts[0].Table != "events" ||
			rep.Conflicts[0].Action != workflows.MergeConflict || rep.Conflicts[0].Source == "" || rep.Conflicts[0].Target == "" ||
			!strings.Contains(rep.Message, "conflicting tables: events") || !strings.Contains(rep.Next, "`graft merge "+g+" feature/y --into main --preview`") {
			t.Fatalf("preview=%v: report %+v\n%s", preview, rep, r)
		}
		if (rep.OpID == "") != preview {
			t.Fatalf("preview=%v: op id %q", preview, rep.OpID)
		}
	}
	wantText(t, p.run(t, "merge", g, "feature/y"), 5, "conflict", "conflicting tables: events", "\nnext: write the version")
	if puts := p.store.Count(faults.OpPut).Attempted; puts != 0 {
		t.Fatalf("conflicting merges put %d objects", puts)
	}
}
