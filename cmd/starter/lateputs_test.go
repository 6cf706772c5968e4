package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage/faults"
	"github.com/graftworks/graft/workflows"
)

// TestOpLatePuts_CommitPutAnswerLost_ListedAfterTheWriteUntilReleased is the operator's
// story of a late-put pin: a table write whose commit put was applied but whose answer was
// lost settles done, yet the commit stays listed by `op late-puts` (a put of it may still
// be delivered) and `op show` of the write names it; `op release-late-puts` releases it
// once, then nothing, and an unknown operation is not_found.
func TestOpLatePuts_CommitPutAnswerLost_ListedAfterTheWriteUntilReleased(t *testing.T) {
	p := newInProcess(t)
	wantCode(t, p.run(t, "graph", "init", "g"), 0)
	p.store.Add(faults.Rule{Name: "commit-answer-lost", Op: faults.OpPut, KeyPrefix: "g/trees/", Mode: faults.ApplyLoseAnswer, Times: 1,
		Body: func(b []byte) bool { _, err := format.DecodeCommit(b); return err == nil }})
	file := filepath.Join(t.TempDir(), "part-0.csv")
	if err := os.WriteFile(file, []byte("id\n1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := p.run(t, "table", "write", "g", "main", "events", file, "-o", "json")
	wantCode(t, r, 0)
	w := jsonOut[workflows.WriteTableResult](t, r)
	id, err := format.ParseCommitID(w.Commit)
	if err != nil {
		t.Fatalf("write result %+v: %v", w, err)
	}

	r = p.run(t, "op", "late-puts", "--graph", "g", "-o", "json")
	wantCode(t, r, 0)
	list := jsonOut[latePutList](t, r)
	if len(list.LatePuts) != 1 || list.LatePuts[0].OpID != w.OpID || list.LatePuts[0].Key != format.CommitIDKey("g", id) ||
		list.LatePuts[0].Kind != "commit" {
		t.Fatalf("late puts %+v, want the write's commit %s", list.LatePuts, w.Commit)
	}
	wantCode(t, p.run(t, "op", "late-puts", "--graph", "g"), 0)
	// op show of the finished write names its pin and how to release it.
	r = p.run(t, "op", "show", w.OpID, "-o", "json")
	wantCode(t, r, 0)
	if v := jsonOut[opView](t, r); len(v.LatePuts) != 1 || v.LatePuts[0].Key != list.LatePuts[0].Key {
		t.Fatalf("op show late puts %+v, want %s", v.LatePuts, list.LatePuts[0].Key)
	}
	r = p.run(t, "op", "show", w.OpID)
	wantCode(t, r, 0)
	for _, f := range []string{"late-put pin", list.LatePuts[0].Key, "graft op release-late-puts " + w.OpID} {
		if !strings.Contains(r.stdout, f) {
			t.Fatalf("op show lacks %q:\n%s", f, r)
		}
	}

	r = p.run(t, "op", "release-late-puts", w.OpID, "-o", "json")
	wantCode(t, r, 0)
	if rel := jsonOut[latePutRelease](t, r); rel.Released != 1 {
		t.Fatalf("release %+v, want 1", rel)
	}
	r = p.run(t, "op", "release-late-puts", w.OpID, "-o", "json")
	wantCode(t, r, 0)
	if rel := jsonOut[latePutRelease](t, r); rel.Released != 0 {
		t.Fatalf("second release %+v, want 0", rel)
	}
	if list := jsonOut[latePutList](t, p.run(t, "op", "late-puts", "-o", "json", "--op", w.OpID)); len(list.LatePuts) != 0 {
		t.Fatalf("late puts after the release: %+v", list.LatePuts)
	}
	if v := jsonOut[opView](t, p.run(t, "op", "show", w.OpID, "-o", "json")); len(v.LatePuts) != 0 {
		t.Fatalf("op show late puts after the release: %+v", v.LatePuts)
	}
	wantText(t, p.run(t, "op", "release-late-puts", catalog.NewID()), 6, "not_found", "graft op list")
}
