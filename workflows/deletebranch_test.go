package workflows_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
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
	t.Parallel()
	r := newRig(t)
	r.startWorker()
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
	t.Parallel()
	r := newRig(t)
	r.startWorker()
	res, err := r.gc.DeleteBranch(r.ctx, client.DeleteBranchRequest{Graph: r.graph, Branch: "main", Force: true})
	if !errors.Is(err, outcome.ErrInvalid) || len(r.liveNatives("main")) != 1 {
		t.Fatalf("delete main: %+v, %v; want invalid with main still live", res, err)
	}
}

func TestDeleteBranch_TagPinned_ConflictUnlessForced_TagKeepsTheCommit(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.startWorker()
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
