package workflows_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/mock"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/workflows"
)

// Unit tier: DeleteBranch's decisions with every activity mocked. The
// real-stack tier is deletebranch_test.go.

var deleteBranchInput = workflows.DeleteBranchInput{Graph: "g", Branch: "feature", OpID: "op-delete"}

// deletePrepared is a prepare that found feature's live ref.
var deletePrepared = activities.PrepareDeleteBranchResult{Owned: true, Native: "feature.01JAAAAAAAAAAAAAAAAAAAAAAA", Head: "F-3",
	Spec: activities.WriteSpec{Kind: activities.WriteRetireRef, Graph: "g", Native: "feature.01JAAAAAAAAAAAAAAAAAAAAAAA", ETag: `"e1"`, Landed: outcome.Deleted}}

func runDeleteBranch(t *testing.T, in workflows.DeleteBranchInput, prep activities.PrepareDeleteBranchResult, retires ...activities.WriteState) (workflows.DeleteBranchResult, *decisionEnv) {
	t.Helper()
	d := newDecisionEnv(t, workflows.DeleteBranchName, workflows.DeleteBranch)
	answer(d, a.PrepareDeleteBranch, prep)
	for _, st := range retires {
		d.env.OnActivity(a.Write, mock.Anything, mock.Anything).Return(verdict(st, "retire "+string(st)), nil).Once()
	}
	d.env.OnActivity(a.ReadBack, mock.Anything, mock.Anything).Return(verdict(activities.Ambiguous, "still live"), nil).Maybe()
	var res workflows.DeleteBranchResult
	d.mustRun(in, &res)
	return res, d
}

func TestDeleteBranchDecision_PrepareEndsEarly_OutcomePassedThroughNothingRetired(t *testing.T) {
	for _, tc := range []struct {
		name string
		prep activities.PrepareDeleteBranchResult
	}{
		{"main", activities.PrepareDeleteBranchResult{Outcome: outcome.Invalid, Message: "main is never deleted", Owned: true}},
		{"tag-pinned", activities.PrepareDeleteBranchResult{Outcome: outcome.Conflict, Message: "tags name its commits", Owned: true,
			Native: deletePrepared.Native, Head: "F-3", Tags: []string{"v1", "v2"}}},
		{"unknown", activities.PrepareDeleteBranchResult{Outcome: outcome.NotFound, Message: "no such branch", Owned: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, d := runDeleteBranch(t, deleteBranchInput, tc.prep)
			if res.Outcome != tc.prep.Outcome || res.Message != tc.prep.Message || !reflect.DeepEqual(res.Tags, tc.prep.Tags) || res.Head != tc.prep.Head {
				t.Fatalf("result %+v, want the prepare's %s", res, tc.prep.Outcome)
			}
			d.never("Write")
			d.finishedOnce("op-delete", catalog.OpDeleteBranch, tc.prep.Outcome)
		})
	}
}

func TestDeleteBranchDecision_OpIDOfAnotherRequest_LeavesItsOperationUnfinished(t *testing.T) {
	res, d := runDeleteBranch(t, deleteBranchInput, activities.PrepareDeleteBranchResult{Outcome: outcome.Conflict, Owned: false})
	if res.Outcome != outcome.Conflict {
		t.Fatalf("result %+v, want conflict", res)
	}
	d.never("Write", "Finish")
}

func TestDeleteBranchDecision_ForcePassedToPrepare(t *testing.T) {
	in := deleteBranchInput
	in.Force = true
	_, d := runDeleteBranch(t, in, deletePrepared, activities.Landed)
	p := inputsOf[activities.PrepareDeleteBranchInput](d, "PrepareDeleteBranch")[0]
	if !p.Force || p.Branch != "feature" || p.OpID != "op-delete" || p.WorkflowID != decisionWorkflowID {
		t.Fatalf("prepare input %+v, want a forced delete of feature", p)
	}
}

func TestDeleteBranchDecision_RetiredByThisOperationBefore_DeletedWithoutASwap(t *testing.T) {
	prep := deletePrepared
	prep.Retired = true
	res, d := runDeleteBranch(t, deleteBranchInput, prep)
	if res.Outcome != workflows.OutcomeDeleted || res.Native != prep.Native {
		t.Fatalf("result %+v, want deleted", res)
	}
	d.never("Write")
	d.finishedOnce("op-delete", catalog.OpDeleteBranch, outcome.Deleted)
}

func TestDeleteBranchDecision_RetireDone_DeletedBySwappingTheReadRef(t *testing.T) {
	res, d := runDeleteBranch(t, deleteBranchInput, deletePrepared, activities.Landed)
	if res.Outcome != workflows.OutcomeDeleted || res.Native != deletePrepared.Native || res.Head != "F-3" || res.SettleAttempts != 0 {
		t.Fatalf("result %+v, want deleted", res)
	}
	got := d.written()
	if len(got) != 1 || !reflect.DeepEqual(got[0], deletePrepared.Spec) {
		t.Fatalf("retires %+v, want one %+v", got, deletePrepared.Spec)
	}
	if d.inDoubtMarks() != 0 {
		t.Fatalf("recorded in doubt although the swap answered")
	}
	d.finishedOnce("op-delete", catalog.OpDeleteBranch, outcome.Deleted)
}

func TestDeleteBranchDecision_RetireInDoubt_MarkedAndSettledByReissue(t *testing.T) {
	res, d := runDeleteBranch(t, deleteBranchInput, deletePrepared, activities.Ambiguous, activities.Ambiguous, activities.Landed)
	if res.Outcome != workflows.OutcomeDeleted || res.SettleAttempts != 2 {
		t.Fatalf("result %+v, want deleted after 2 re-issues", res)
	}
	if d.inDoubtMarks() != 1 {
		t.Fatalf("marked in doubt %d times, want once", d.inDoubtMarks())
	}
	if n := d.count("ReadBack"); n != len(workflows.RereadPauses) {
		t.Fatalf("%d read-backs before settling, want %d", n, len(workflows.RereadPauses))
	}
	for i, in := range inputsOf[activities.WriteInput](d, "Write") {
		if !reflect.DeepEqual(in.Spec, deletePrepared.Spec) || in.Attempt != i {
			t.Fatalf("retire %d %+v: want the same swap, attempt %d", i, in, i)
		}
	}
	d.finishedOnce("op-delete", catalog.OpDeleteBranch, outcome.Deleted)
}

func TestDeleteBranchDecision_RefChangedUnderneath_Conflict(t *testing.T) {
	for _, st := range []activities.WriteState{activities.Other} {
		t.Run(string(st), func(t *testing.T) {
			res, d := runDeleteBranch(t, deleteBranchInput, deletePrepared, st)
			if res.Outcome != outcome.Conflict || !strings.Contains(res.Message, "retire "+string(st)) {
				t.Fatalf("result %+v, want a conflict carrying the swap's message", res)
			}
			d.finishedOnce("op-delete", catalog.OpDeleteBranch, outcome.Conflict)
		})
	}
}

func TestDeleteBranchDecision_RetireRefused_Refused(t *testing.T) {
	res, d := runDeleteBranch(t, deleteBranchInput, deletePrepared, activities.Refused)
	if res.Outcome != outcome.Refused || res.Message != "retire refused" {
		t.Fatalf("result %+v, want refused", res)
	}
	d.finishedOnce("op-delete", catalog.OpDeleteBranch, outcome.Refused)
}
