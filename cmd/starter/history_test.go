package main

import (
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/workflows"
)

// TestLogDiffObjects_ReadWhatHappened_InProcess builds a small history —
// writes on main and on a branch, a merge, a restore — and reads it back:
// log marks the merge, the restore and the fork; diff names the tables
// added, changed and removed between commits, branches and tags; table
// objects lists file:// URIs an engine can open, holding the bytes written.
func TestLogDiffObjects_ReadWhatHappened_InProcess(t *testing.T) {
	p := newInProcess(t)
	const g = "hist"
	file := tempFiles(t)
	write := func(branch, table, body string) workflows.WriteTableResult {
		t.Helper()
		r := p.run(t, "table", "write", g, branch, table, file(strings.ReplaceAll(branch, "/", "_")+table+".csv", body), "-o", "json")
		wantCode(t, r, 0)
		return jsonOut[workflows.WriteTableResult](t, r)
	}
	wantCode(t, p.run(t, "graph", "init", g), 0)
	v1 := write("main", "people", "id,name\n1,ada\n")
	wantCode(t, p.run(t, "tag", "create", g, "v1"), 0)
	wantCode(t, p.run(t, "branch", "create", g, "feature/scores"), 0)
	scores := write("feature/scores", "scores", "id,score\n1,9\n")
	v2 := write("main", "people", "id,name\n1,ada\n2,grace\n")
	r := p.run(t, "merge", g, "feature/scores", "-o", "json")
	wantCode(t, r, 0)
	merge := jsonOut[workflows.MergeResult](t, r)
	r = p.run(t, "restore", g, "main", "--tag", "v1", "-o", "json")
	wantCode(t, r, 0)
	restore := jsonOut[workflows.RestoreResult](t, r)

	r = p.run(t, "log", g, "main", "-o", "json")
	wantCode(t, r, 0)
	log := jsonOut[client.Log](t, r)
	var got []string
	for _, e := range log.Entries {
		got = append(got, e.Commit)
	}
	if len(log.Entries) != 5 || got[0] != restore.Commit || got[1] != merge.Commit || got[2] != v2.Commit || got[3] != v1.Commit ||
		log.Entries[0].RestoredFrom != v1.Commit || log.Entries[1].Merged != scores.Commit || len(log.Entries[4].Parents) != 0 || log.Truncated != "" {
		t.Fatalf("log of main %+v; want restore, merge, v2, v1, root", log)
	}
	r = p.run(t, "log", g, "main", "-n", "2")
	wantCode(t, r, 0)
	for _, want := range []string{"restore of " + v1.Commit, "merge of " + scores.Commit, "(history stops here: limit of 2 commits)"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("log text lacks %q:\n%s", want, r.stdout)
		}
	}
	r = p.run(t, "log", g, "feature/scores")
	wantStdout(t, r, "fork of main", "on main")

	r = p.run(t, "diff", g, "v1", "branch:feature/scores", "-o", "json")
	wantCode(t, r, 0)
	d := jsonOut[client.Diff](t, r)
	if d.From.Kind != "tag" || d.From.Commit != v1.Commit || d.To.Kind != "branch" || len(d.Tables) != 1 ||
		d.Tables[0] != (client.TableChange{Table: "scores", Change: "added", To: scores.Version}) || d.Unchanged != 1 {
		t.Fatalf("diff v1..feature/scores %+v", d)
	}
	r = p.run(t, "diff", g, merge.Commit, "main", "-o", "json")
	wantCode(t, r, 0)
	d = jsonOut[client.Diff](t, r)
	if len(d.Tables) != 2 || d.Tables[0].Table != "people" || d.Tables[0].Change != "changed" || d.Tables[0].From != v2.Version ||
		d.Tables[1].Table != "scores" || d.Tables[1].Change != "removed" {
		t.Fatalf("diff merge..main (the restore) %+v", d)
	}
	wantText(t, p.run(t, "diff", g, "v1", "no-such-thing"), 6, "not_found", `"no-such-thing" is no commit id, branch or tag`)

	r = p.run(t, "table", "objects", g, "v1", "people", "-o", "json")
	wantCode(t, r, 0)
	l := jsonOut[client.TableListing](t, r)
	if l.Version != v1.Version || len(l.Objects) != 1 || !strings.HasPrefix(l.Objects[0].URI, "file:///") {
		t.Fatalf("objects of people at v1 %+v", l)
	}
	u, err := url.Parse(l.Objects[0].URI)
	if err != nil {
		t.Fatal(err)
	}
	if body, err := os.ReadFile(u.Path); err != nil || string(body) != "id,name\n1,ada\n" {
		t.Fatalf("read %s: %q, %v; want the bytes written at v1", u.Path, body, err)
	}
	r = p.run(t, "table", "objects", g, "main", "people")
	wantCode(t, r, 0)
	if strings.TrimSpace(r.stdout) != l.Objects[0].URI { // main was restored to v1
		t.Fatalf("text objects of people on main: %q, want %s", r.stdout, l.Objects[0].URI)
	}
	wantText(t, p.run(t, "table", "objects", g, "main", "scores"), 6, "not_found", `does not pin table "scores"`)
}
