package main

import (
	"context"
	"strings"
	"testing"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/workflows"
)

// The CLI on a graph: table write --append and --import, branch create, merge
// --preview with per-table object counts matching the merge, and table objects listing the
// union with the imported object under its own key.
func TestTableWrite_AppendImportMergePreview_ObjectCountsMatch(t *testing.T) {
	p := newInProcess(t)
	ctx := context.Background()
	p.initGraph(t, "g")
	file := tempFiles(t)
	wantCode(t, p.run(t, "table", "write", "g", "main", "ev", file("a", "a")), 0)
	wantCode(t, p.run(t, "branch", "create", "g", "side"), 0)
	wantCode(t, p.run(t, "table", "write", "g", "side", "ev", "--append", file("b", "bb")), 0)
	if _, err := p.store.Inner().Put(ctx, "landing/c.parquet", []byte("ccc"), storage.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	wantCode(t, p.run(t, "table", "write", "g", "main", "ev", "--append", "--import", "landing/c.parquet"), 0)

	pre := p.run(t, "merge", "g", "side", "--into", "main", "--preview")
	wantCode(t, pre, 0)
	if !strings.Contains(pre.stdout, "OBJECTS") || !strings.Contains(pre.stdout, "+1 -0 ~0") || !strings.Contains(pre.stdout, "merged") {
		t.Fatalf("preview text lacks the object counts:\n%s", pre)
	}
	r := p.run(t, "merge", "g", "side", "--into", "main", "-o", "json")
	wantCode(t, r, 0)
	res := jsonOut[workflows.MergeResult](t, r)
	if len(res.Tables) != 1 || res.Tables[0].Action != workflows.MergeMerged || res.Tables[0].Added != 1 {
		t.Fatalf("merge %+v; want ev merged with 1 object added, as previewed", res)
	}
	r = p.run(t, "table", "objects", "g", "main", "ev", "-o", "json")
	wantCode(t, r, 0)
	objs := jsonOut[client.TableListing](t, r)
	if len(objs.Objects) != 3 || objs.Bytes != 6 {
		t.Fatalf("objects %+v; want a, bb and the imported ccc", objs)
	}
	if !strings.Contains(r.stdout, "landing/c.parquet") {
		t.Fatalf("the imported object is not listed under its own key:\n%s", r)
	}
	// An edit on a name the version lacks is invalid (exit 2).
	wantCode(t, p.run(t, "table", "write", "g", "main", "ev", "--remove", "no-such-entry"), 2)
}
