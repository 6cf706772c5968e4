package workflows_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/faults"
	"github.com/graftworks/graft/workflows"
)

// createBranch creates logical from main through the CreateBranch workflow.
func (r *rig) createBranch(logical string) string {
	r.t.Helper()
	res, err := r.gc.CreateBranch(r.ctx, client.CreateBranchRequest{Graph: r.graph, Branch: logical})
	if err != nil {
		r.t.Fatalf("create %s: %v", logical, err)
	}
	return res.Native
}

func TestDeleteBranch_RetiredRefFencesLatePutAndNameCanBeCreatedAgain(t *testing.T) {
	r := runningRig(t)
	native := r.createBranch("feat")
	// The swap's answer is lost: read-back settles it as ours.
	r.store.Add(faults.Rule{Op: faults.OpPut, KeyPrefix: r.refPrefix("feat"), Mode: faults.ApplyLoseAnswer, Times: 1})
	res, err := r.gc.DeleteBranch(r.ctx, client.DeleteBranchRequest{Graph: r.graph, Branch: "feat"})
	if err != nil || res.Outcome != workflows.OutcomeDeleted || res.Native != native {
		t.Fatalf("delete: %+v, %v; want deleted %s", res, err, native)
	}
	ref := r.refs("feat")[native]
	if ref.State != format.RefRetired || ref.RetiredOp != res.OpID {
		t.Fatalf("ref %+v, want retired by %s", ref, res.OpID)
	}
	if inc := r.incarnation(native); inc.State != catalog.IncarnationRetired {
		t.Fatalf("witness %s, want retired", inc.State)
	}
	r.wantOperation(res.OpID, catalog.OpDeleteBranch, workflows.OutcomeDeleted)
	recordHistory(t, r, client.DeleteBranchWorkflowID(r.graph, "feat"), "", "deletebranch_deleted")

	if _, err := r.inner.Put(r.ctx, format.BranchRefKey(r.graph, native), liveRefBytes(t, "feat", ref.Head), storage.PutOptions{IfNoneMatch: true}); !errors.Is(err, storage.ErrPreconditionFailed) {
		t.Fatalf("late put of the live ref: %v, want precondition failed", err)
	}
	again := r.createBranch("feat")
	if again == native || len(r.liveNatives("feat")) != 1 {
		t.Fatalf("re-created as %s (live: %v), want one fresh incarnation", again, r.liveNatives("feat"))
	}
	if _, err := r.gc.DeleteBranch(r.ctx, client.DeleteBranchRequest{Graph: r.graph, Branch: "nope"}); !errors.Is(err, outcome.ErrNotFound) {
		t.Fatalf("delete of an unknown branch: %v, want not_found", err)
	}
	checkInvariants(t, r)
}

func TestDeleteBranch_Main_IsInvalid(t *testing.T) {
	r := runningRig(t)
	res, err := r.gc.DeleteBranch(r.ctx, client.DeleteBranchRequest{Graph: r.graph, Branch: "main", Force: true})
	if !errors.Is(err, outcome.ErrInvalid) || len(r.liveNatives("main")) != 1 {
		t.Fatalf("delete main: %+v, %v; want invalid with main still live", res, err)
	}
}

func TestDeleteBranch_TagPinned_ConflictUnlessForced_TagKeepsTheCommit(t *testing.T) {
	r := runningRig(t)
	r.createBranch("feat")
	feat := r.headOf("feat")
	tagged := r.write(&feat, "t", "t-feat")
	r.write(&feat, "t", "t-later")
	if _, err := r.gc.CreateTag(r.ctx, client.CreateTagRequest{Graph: r.graph, Name: "keep/me", Commit: tagged.ID.String()}); err != nil {
		t.Fatalf("tag: %v", err)
	}
	res, err := r.gc.DeleteBranch(r.ctx, client.DeleteBranchRequest{Graph: r.graph, Branch: "feat"})
	if !errors.Is(err, outcome.ErrConflict) || !strings.Contains(res.Message, "keep/me") || len(r.liveNatives("feat")) != 1 {
		t.Fatalf("delete: %+v, %v; want conflict naming the tag, branch still live", res, err)
	}
	res, err = r.gc.DeleteBranch(r.ctx, client.DeleteBranchRequest{Graph: r.graph, Branch: "feat", Force: true})
	if err != nil || res.Outcome != workflows.OutcomeDeleted || len(res.Tags) != 1 || len(r.liveNatives("feat")) != 0 {
		t.Fatalf("forced delete: %+v, %v; want deleted", res, err)
	}
	// Cleanup reclaims the deleted branch's tree but the tagged commit.
	r.cleanup(client.CleanupRequest{KeepNewest: 1, Mode: workflows.CleanupModeSweep, GuardWindow: noGuard()})
	r.wantKept("tagged commit of a deleted branch", tagged, "t")
	r.wantGone("untagged head of a deleted branch", r.commitKey(feat))
	checkInvariants(t, r)
}

// handWrittenIncarnation writes, as an older tool would, a live incarnation
// of branch forked from main's head: a fork commit and a live ref, with no
// ledger witness. It returns the native name and the ref's bytes.
func (r *rig) handWrittenIncarnation(branch string) (string, []byte) {
	r.t.Helper()
	tree := ulid.Make()
	g := r.graphAPI()
	plan, err := g.PlanFork(r.ctx, graph.ForkSpec{Branch: branch, Tree: tree, Source: r.main.ID.String(),
		Author: "old-tool", Message: "fork", Time: time.Now().UTC(), Op: "old-tool-" + tree.String()})
	if err != nil {
		r.t.Fatalf("plan fork: %v", err)
	}
	if err := g.WriteFork(r.ctx, plan); err != nil {
		r.t.Fatalf("fork commit: %v", err)
	}
	if _, err := r.inner.Put(r.ctx, format.BranchRefKey(r.graph, plan.Ref.Native), plan.RefBody, storage.PutOptions{IfNoneMatch: true}); err != nil {
		r.t.Fatalf("put ref: %v", err)
	}
	return plan.Ref.Native, plan.RefBody
}

func TestRepairBranch_TwoLiveIncarnations_ListRefusesThenRepairKeepsOne(t *testing.T) {
	r := runningRig(t)
	reader := client.NewReader(r.inner)
	keep, _ := r.handWrittenIncarnation("dup")
	retire, retireBytes := r.handWrittenIncarnation("dup")

	_, err := reader.ListBranches(r.ctx, r.graph)
	if !errors.Is(err, outcome.ErrConflict) {
		t.Fatalf("list with two live incarnations: %v, want conflict", err)
	}
	for _, want := range []string{"graft branch repair " + r.graph + " dup --keep", keep, retire} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("refusal %q does not name %q", err, want)
		}
	}
	if _, err := reader.ShowBranch(r.ctx, r.graph, "dup"); !errors.Is(err, outcome.ErrConflict) || !strings.Contains(err.Error(), "graft branch repair") {
		t.Fatalf("show with two live incarnations: %v, want conflict naming the repair", err)
	}

	res, err := r.gc.RepairBranch(r.ctx, client.RepairBranchRequest{Graph: r.graph, Branch: "dup", Keep: keep})
	if err != nil {
		t.Fatalf("repair: %v", err)
	}
	if res.Outcome != outcome.Done || res.Kept != keep || !slices.Equal(res.Retired, []string{retire}) {
		t.Fatalf("repair %+v, want done keeping %s and retiring %s", res, keep, retire)
	}

	recordHistory(t, r, client.RepairBranchWorkflowID(r.graph, "dup"), "", "repairbranch_done")
	branches, err := reader.ListBranches(r.ctx, r.graph)
	if err != nil {
		t.Fatalf("list after repair: %v", err)
	}
	var got []string
	for _, b := range branches {
		got = append(got, b.Branch+"="+b.Native)
		if b.Head == "" || b.Tables != 1 || b.HeadTime.IsZero() {
			t.Fatalf("branch info %+v lacks its head", b)
		}
	}
	if want := []string{"dup=" + keep, "main=" + r.headNative("main")}; !slices.Equal(got, want) {
		t.Fatalf("branches %v, want %v", got, want)
	}
	ref := r.refs("dup")[retire]
	if ref.State != format.RefRetired || ref.RetiredOp != res.OpID {
		t.Fatalf("ref of %s is %+v, want retired by %s", retire, ref, res.OpID)
	}
	// The retired ref is a fence: a late put of the live ref cannot land.
	if _, err := r.inner.Put(r.ctx, format.BranchRefKey(r.graph, retire), retireBytes, storage.PutOptions{IfNoneMatch: true}); !errors.Is(err, storage.ErrPreconditionFailed) {
		t.Fatalf("late put of the retired key: %v, want precondition failed", err)
	}
	// The ledger now names the kept incarnation live; the repair is recorded.
	if inc := r.incarnation(keep); inc.State != catalog.IncarnationLive || inc.OpID != res.OpID {
		t.Fatalf("witness of %s is %+v, want live under the repair", keep, inc)
	}
	if op := r.operation(res.OpID); op.Kind != catalog.OpDeleteBranch || op.State != catalog.OperationDone || op.Outcome != catalog.OutcomeDone {
		t.Fatalf("operation %+v, want delete_branch done/done", op)
	}
}

func TestRepairBranch_KeepNotLive_IsInvalidAndRetiresNothing(t *testing.T) {
	r := runningRig(t)
	a, _ := r.handWrittenIncarnation("dup")
	b, _ := r.handWrittenIncarnation("dup")
	_, err := r.gc.RepairBranch(r.ctx, client.RepairBranchRequest{Graph: r.graph, Branch: "dup", Keep: format.NativeName("dup", ulid.Make())})
	if !errors.Is(err, outcome.ErrInvalid) || !strings.Contains(err.Error(), a) || !strings.Contains(err.Error(), b) {
		t.Fatalf("repair keeping an unknown native: %v, want invalid naming the live ones", err)
	}
	if live := r.liveNatives("dup"); len(live) != 2 {
		t.Fatalf("live refs %v, want both untouched", live)
	}
	// Leave the graph as a repair would: the oracle holds every test to one live ref per name.
	if _, err := r.gc.RepairBranch(r.ctx, client.RepairBranchRequest{Graph: r.graph, Branch: "dup", Keep: a}); err != nil {
		t.Fatalf("repair: %v", err)
	}
}

func TestReader_ShowBranchAndGraph(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	reader := client.NewReader(r.inner)
	d, err := reader.ShowBranch(r.ctx, r.graph, "main")
	if err != nil {
		t.Fatal(err)
	}
	if d.Head != r.main.ID.String() || d.Native != r.headNative("main") || d.Ref.State != "live" || d.Ref.ETag == "" ||
		len(d.Pins) != 1 || d.Pins[0].Table != "t" || d.Pins[0].Version != r.main.Pins["t"].String() ||
		!slices.Equal(d.Parents, []string{r.main.Parents[0].String()}) {
		t.Fatalf("show main: %+v", d)
	}
	if _, err := reader.ShowBranch(r.ctx, r.graph, "nope"); !errors.Is(err, outcome.ErrNotFound) {
		t.Fatalf("show unknown branch: %v, want not_found", err)
	}
	if g, err := reader.Graph(r.ctx, r.graph); err != nil || g.Name != r.graph || g.DefaultBranch != "main" {
		t.Fatalf("graph: %+v, %v", g, err)
	}
	if _, err := reader.Graph(r.ctx, "no-such-graph"); !errors.Is(err, outcome.ErrNotFound) {
		t.Fatalf("unknown graph: %v, want not_found", err)
	}
	if _, err := reader.ListBranches(r.ctx, "no-such-graph"); !errors.Is(err, outcome.ErrNotFound) {
		t.Fatalf("list unknown graph: %v, want not_found", err)
	}
}

func TestCreateTag_RepeatIsIdempotent_OtherCommitConflicts_DeletedNameNeverReused(t *testing.T) {
	r := runningRig(t)
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
	r := runningRig(t)
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
	r := runningRig(t)
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
