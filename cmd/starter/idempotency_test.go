package main

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/workflows"
)

// TestTableWrite_KeyReusedForAnotherFile_ConflictExit5NothingUploadedOrRecorded: a table
// write repeated with its --idempotency-key reports the first write's commit; the key
// given with another file exits 5 (conflict) naming the key and the objects, says what to
// do next, and uploads and records nothing — the store and `graft op list` are as they
// were. A branch create under a key used for another create is the same conflict.
func TestTableWrite_KeyReusedForAnotherFile_ConflictExit5NothingUploadedOrRecorded(t *testing.T) {
	p := newInProcess(t)
	ctx := context.Background()
	p.initGraph(t, "g")
	file := tempFiles(t)
	a, b := file("a.csv", "id\n1\n"), file("b.csv", "id\n2\n")

	first := jsonOut[workflows.WriteTableResult](t, p.run(t, "table", "write", "g", "main", "t", a, "--idempotency-key", "K", "-o", "json"))
	r := p.run(t, "table", "write", "g", "main", "t", a, "--idempotency-key", "K", "-o", "json")
	wantCode(t, r, 0)
	if again := jsonOut[workflows.WriteTableResult](t, r); again != first {
		t.Fatalf("the same write again reported %+v; want the first's %+v", again, first)
	}
	wantCode(t, p.run(t, "branch", "create", "g", "b1", "--idempotency-key", "K2"), 0)

	keys := func() []string {
		var out []string
		if err := storage.ListAll(ctx, p.store.Inner(), "", func(o storage.ObjectInfo) error {
			out = append(out, o.Key+" "+o.ETag)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	ops := func() string { r := p.run(t, "op", "list", "-o", "json"); wantCode(t, r, 0); return r.stdout }
	storeBefore, opsBefore := keys(), ops()

	rep := jsonErr(t, p.run(t, "table", "write", "g", "main", "t", b, "--idempotency-key", "K", "-o", "json"))
	if rep.Outcome != "conflict" || rep.ExitCode != 5 || rep.OpID != "K" || !strings.Contains(rep.Message, `idempotency key "K"`) ||
		!strings.Contains(rep.Message, "objects differ") || !strings.Contains(rep.Next, "fresh --idempotency-key") {
		t.Fatalf("write of another file under K: %+v; want conflict (exit 5) naming K and the objects, and a fresh key next", rep)
	}
	r = p.run(t, "branch", "create", "g", "b2", "--idempotency-key", "K2")
	wantText(t, r, 5, "conflict", `operation id "K2" was already used for a different request`, `branch is "b2"`, "fresh --idempotency-key")

	if now := keys(); !reflect.DeepEqual(now, storeBefore) {
		t.Fatalf("the store changed:\n%v\nwant\n%v", now, storeBefore)
	}
	if now := ops(); now != opsBefore {
		t.Fatalf("the ledger changed:\n%s\nwant\n%s", now, opsBefore)
	}
}
