package workflows_test

import (
	"reflect"
	"testing"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/internal/catalog/catalogtest"
	"github.com/graftworks/graft/workflows"
)

// TestWriteTableRequest_SameBytesUnderOtherObjectIds_IsTheSameRequest: a write's request
// names its objects by size and SHA-256, in order, never by the ids their uploads minted —
// and a staged list named by its objects' digest is the same request as the list inline.
func TestWriteTableRequest_SameBytesUnderOtherObjectIds_IsTheSameRequest(t *testing.T) {
	objs := func(ids ...string) []workflows.TableObject {
		out := make([]workflows.TableObject, len(ids))
		for i, id := range ids {
			out[i] = workflows.TableObject{ID: id, Size: int64(10 + i), SHA256: string(rune('a'+i)) + "0"}
		}
		return out
	}
	first := workflows.WriteTableInput{Graph: "g", Branch: "main", Table: "t", Objects: objs("01A", "01B"), OpID: "k"}
	again := first
	again.Objects, again.OpID = objs("01C", "01D"), "other"
	if !again.Request().Same(first.Request()) {
		t.Fatalf("the same bytes under other ids and another key differ: %v", again.Request().Differences(first.Request()))
	}
	staged := first
	staged.Objects, staged.Staged, staged.ObjectsSHA256 = nil, "01S", workflows.ObjectsSHA256(first.Objects)
	if !staged.Request().Same(first.Request()) {
		t.Fatalf("the staged list differs from the same list inline: %v", staged.Request().Differences(first.Request()))
	}
}

// TestRequest_Differences_NameEachFieldThatDiffers: every field that differs is named with
// both values, a list's digest by its name only.
func TestRequest_Differences_NameEachFieldThatDiffers(t *testing.T) {
	first := workflows.WriteTableInput{Graph: "g", Branch: "main", Table: "t",
		Objects: []workflows.TableObject{{ID: "01A", Size: 1, SHA256: "aa"}}}.Request()
	other := workflows.WriteTableInput{Graph: "g", Branch: "main", Table: "u", Message: "m",
		Objects: []workflows.TableObject{{ID: "01A", Size: 2, SHA256: "bb"}}}.Request()
	if other.Same(first) {
		t.Fatal("different requests have the same digest")
	}
	want := []string{`message is "m", the first request's ""`, "objects differ", `table is "u", the first request's "t"`}
	if got := other.Differences(first); !reflect.DeepEqual(got, want) {
		t.Fatalf("differences %q, want %q", got, want)
	}
	if got := (workflows.CreateTagInput{Graph: "g", Name: "v1"}).Request().Differences(first); len(got) != 1 {
		t.Fatalf("another workflow's request: %q, want the workflow named alone", got)
	}
}

// ops opens the public client's Ops on the rig's ledger, waiting through
// the rig's client (nil waits by polling the ledger).
func (r *rig) ops(c *client.Client) *client.Ops {
	r.t.Helper()
	ops, err := client.OpenOps(r.ctx, client.LedgerConfig{DatabaseURL: catalogtest.DatabaseURL(), Schema: r.cat.Schema()}, c)
	if err != nil {
		r.t.Fatalf("open ops: %v", err)
	}
	r.t.Cleanup(ops.Close)
	return ops
}
