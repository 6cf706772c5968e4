package workflows_test

import (
	"errors"
	"testing"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage/faults"
	"github.com/graftworks/graft/workflows"
)

func TestCreateTag_RepeatIsIdempotent_OtherCommitConflicts_DeletedNameNeverReused(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.startWorker()
	first, err := r.gc.CreateTag(r.ctx, client.CreateTagRequest{Graph: r.graph, Name: "v1"})
	if err != nil || first.Outcome != outcome.Created || first.Existing || first.Commit != r.main.ID.String() {
		t.Fatalf("create: %+v, %v; want created on main's head", first, err)
	}
	again, err := r.gc.CreateTag(r.ctx, client.CreateTagRequest{Graph: r.graph, Name: "v1", Commit: r.main.ID.String()})
	if err != nil || again.Outcome != outcome.Created || !again.Existing {
		t.Fatalf("same create again: %+v, %v; want created, existing", again, err)
	}
	old := r.main
	r.write(&r.main, "t", "t2")
	other, err := r.gc.CreateTag(r.ctx, client.CreateTagRequest{Graph: r.graph, Name: "v1", Branch: "main"})
	if !errors.Is(err, outcome.ErrConflict) {
		t.Fatalf("create on another commit: %+v, %v; want conflict", other, err)
	}
	r.wantOperation(other.OpID, catalog.OpTag, outcome.Conflict)

	reader := client.NewReader(r.inner)
	if list, err := reader.ListTags(r.ctx, r.graph, false); err != nil || len(list) != 1 || list[0].Commit != old.ID.String() {
		t.Fatalf("list: %+v, %v", list, err)
	}
	if show, err := reader.ShowTag(r.ctx, r.graph, "v1"); err != nil || !show.Retained || len(show.Pins) != 1 || show.Branch != "main" {
		t.Fatalf("show: %+v, %v", show, err)
	}

	del, err := r.gc.DeleteTag(r.ctx, client.DeleteTagRequest{Graph: r.graph, Name: "v1"})
	if err != nil || del.Outcome != workflows.OutcomeDeleted {
		t.Fatalf("delete: %+v, %v; want deleted", del, err)
	}
	recordHistory(t, r, client.DeleteTagWorkflowID(r.graph, "v1"), "", "deletetag_deleted")
	if tag, _ := r.tag("v1"); tag.State != format.TagRetired || tag.RetiredOp != del.OpID {
		t.Fatalf("tag after delete %+v, want retired by %s", tag, del.OpID)
	}
	if _, err := r.gc.DeleteTag(r.ctx, client.DeleteTagRequest{Graph: r.graph, Name: "v1"}); !errors.Is(err, outcome.ErrNotFound) {
		t.Fatalf("second delete: %v, want not_found", err)
	}
	if _, err := r.gc.CreateTag(r.ctx, client.CreateTagRequest{Graph: r.graph, Name: "v1", Commit: old.ID.String()}); !errors.Is(err, outcome.ErrConflict) {
		t.Fatalf("create under a deleted name: %v, want conflict", err)
	}
	if list, err := reader.ListTags(r.ctx, r.graph, false); err != nil || len(list) != 0 {
		t.Fatalf("live tags after delete: %+v, %v", list, err)
	}
	checkInvariants(t, r)
}

func TestCreateTag_TagIsACleanupRoot_UntilDeleted(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.startWorker()
	tagged := r.main
	if _, err := r.gc.CreateTag(r.ctx, client.CreateTagRequest{Graph: r.graph, Name: "release/1", Commit: tagged.ID.String()}); err != nil {
		t.Fatal(err)
	}
	r.write(&r.main, "t", "t2")
	r.write(&r.main, "t", "t3")
	sweep := client.CleanupRequest{KeepNewest: 1, Mode: workflows.CleanupModeSweep, GuardWindow: noGuard()}
	r.cleanup(sweep)
	r.wantKept("tagged commit", tagged, "t")
	checkInvariants(t, r)
	if _, err := r.gc.DeleteTag(r.ctx, client.DeleteTagRequest{Graph: r.graph, Name: "release/1"}); err != nil {
		t.Fatal(err)
	}
	r.cleanup(sweep)
	r.wantGone("commit of a deleted tag", r.commitKey(tagged))
	checkInvariants(t, r)
}

func TestCreateTag_PutNeverAnswered_InDoubtThenSettled(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.startWorker()
	r.faultThenSettleSlowly(faults.Rule{Op: faults.OpPut, KeyPrefix: format.TagsPrefix(r.graph), Mode: faults.FailBeforeSend, Times: 3})
	res, err := r.gc.CreateTag(r.ctx, client.CreateTagRequest{Graph: r.graph, Name: "v1"})
	var oe *outcome.Error
	if !errors.Is(err, outcome.ErrInDoubt) || !errors.As(err, &oe) || oe.OpID == "" {
		t.Fatalf("create: %+v, %v; want in_doubt with an operation id", res, err)
	}
	op, err := r.ops(r.gc).Wait(r.ctx, oe.OpID)
	if err != nil || op.Outcome != outcome.Created {
		t.Fatalf("operation %+v, %v; want created once settled", op, err)
	}
	if tag, ok := r.tag("v1"); !ok || tag.Commit != r.main.ID {
		t.Fatalf("tag %+v (found %v), want one naming %s", tag, ok, r.main.ID)
	}
	r.wantOperation(oe.OpID, catalog.OpTag, outcome.Created)
	recordHistory(t, r, client.CreateTagWorkflowID(r.graph, "v1"), "", "createtag_in_doubt_settled")
}
