package workflows_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/workflows"
)

// Unit tier: DeleteBranch's decisions with every activity mocked. The
// real-stack tier is deletebranch_test.go.

var deleteBranchInput = workflows.DeleteBranchInput{Graph: "g", Branch: "feature", OpID: "op-delete"}

// deletePrepared is a prepare that found feature's live ref.
var deletePrepared = activities.PrepareDeleteBranchResult{Recorded: true, Native: "feature.01JAAAAAAAAAAAAAAAAAAAAAAA", ETag: `"e1"`, Head: "F-3"}

func runDeleteBranch(t *testing.T, in workflows.DeleteBranchInput, prep activities.PrepareDeleteBranchResult, retires ...activities.RetireState) (workflows.DeleteBranchResult, *decisionEnv) {
	t.Helper()
	d := newDecisionEnv(t, workflows.DeleteBranchName, workflows.DeleteBranch)
	answer(d, a.PrepareDeleteBranch, prep)
	for _, st := range retires {
		answer(d, a.RetireBranch, activities.RetireIncarnationResult{State: st, Message: "retire " + string(st)})
	}
	var res workflows.DeleteBranchResult
	d.mustRun(in, &res)
	return res, d
}

func TestDeleteBranchDecision_PrepareEndsEarly_OutcomePassedThroughNothingRetired(t *testing.T) {
	for _, tc := range []struct {
		name string
		prep activities.PrepareDeleteBranchResult
	}{
		{"main", activities.PrepareDeleteBranchResult{Outcome: outcome.Invalid, Message: "main is never deleted", Recorded: true}},
		{"tag-pinned", activities.PrepareDeleteBranchResult{Outcome: outcome.Conflict, Message: "tags name its commits", Recorded: true,
			Native: deletePrepared.Native, Head: "F-3", Tags: []string{"v1", "v2"}}},
		{"unknown", activities.PrepareDeleteBranchResult{Outcome: outcome.NotFound, Message: "no such branch", Recorded: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, d := runDeleteBranch(t, deleteBranchInput, tc.prep)
			if res.Outcome != tc.prep.Outcome || res.Message != tc.prep.Message || !reflect.DeepEqual(res.Tags, tc.prep.Tags) || res.Head != tc.prep.Head {
				t.Fatalf("result %+v, want the prepare's %s", res, tc.prep.Outcome)
			}
			d.never("RetireBranch")
			d.finishedOnce("op-delete", catalog.OpDeleteBranch, tc.prep.Outcome)
		})
	}
}

func TestDeleteBranchDecision_OpIDOfAnotherRequest_LeavesItsOperationUnfinished(t *testing.T) {
	res, d := runDeleteBranch(t, deleteBranchInput, activities.PrepareDeleteBranchResult{Outcome: outcome.Conflict, Foreign: true})
	if res.Outcome != outcome.Conflict {
		t.Fatalf("result %+v, want conflict", res)
	}
	d.never("RetireBranch", "FinishOperation")
}

func TestDeleteBranchDecision_ForcePassedToPrepare(t *testing.T) {
	in := deleteBranchInput
	in.Force = true
	_, d := runDeleteBranch(t, in, deletePrepared, activities.RetireDone)
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
	d.never("RetireBranch")
	d.finishedOnce("op-delete", catalog.OpDeleteBranch, outcome.Deleted)
}

func TestDeleteBranchDecision_RetireDone_DeletedBySwappingTheReadRef(t *testing.T) {
	res, d := runDeleteBranch(t, deleteBranchInput, deletePrepared, activities.RetireDone)
	if res.Outcome != workflows.OutcomeDeleted || res.Native != deletePrepared.Native || res.Head != "F-3" || res.SettleAttempts != 0 {
		t.Fatalf("result %+v, want deleted", res)
	}
	got := inputsOf[activities.RetireBranchInput](d, "RetireBranch")
	want := activities.RetireBranchInput{OpID: "op-delete", Graph: "g", Native: deletePrepared.Native, ETag: deletePrepared.ETag}
	if len(got) != 1 || !reflect.DeepEqual(got[0], want) {
		t.Fatalf("retires %+v, want one %+v", got, want)
	}
	d.never("MarkOperationInDoubt")
	d.finishedOnce("op-delete", catalog.OpDeleteBranch, outcome.Deleted)
}

func TestDeleteBranchDecision_RetireInDoubt_MarkedAndSettledByReissue(t *testing.T) {
	res, d := runDeleteBranch(t, deleteBranchInput, deletePrepared, activities.RetireInDoubt, activities.RetireInDoubt, activities.RetireDone)
	if res.Outcome != workflows.OutcomeDeleted || res.SettleAttempts != 2 {
		t.Fatalf("result %+v, want deleted after 2 re-issues", res)
	}
	if d.count("MarkOperationInDoubt") != 1 {
		t.Fatalf("marked in doubt %d times, want once", d.count("MarkOperationInDoubt"))
	}
	ret := inputsOf[activities.RetireBranchInput](d, "RetireBranch")
	for i, r := range ret {
		if r.ETag != deletePrepared.ETag || r.Native != deletePrepared.Native || r.InDoubtSince.IsZero() != (i == 0) {
			t.Fatalf("retire %d %+v: want the same swap, in-doubt-since set on re-issues only", i, r)
		}
	}
	d.finishedOnce("op-delete", catalog.OpDeleteBranch, outcome.Deleted)
}

func TestDeleteBranchDecision_RefChangedUnderneath_Conflict(t *testing.T) {
	for _, st := range []activities.RetireState{activities.RetireChanged, activities.RetireNotLive} {
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
	res, d := runDeleteBranch(t, deleteBranchInput, deletePrepared, activities.RetireRefused)
	if res.Outcome != outcome.Refused || res.Message != "retire refused" {
		t.Fatalf("result %+v, want refused", res)
	}
	d.finishedOnce("op-delete", catalog.OpDeleteBranch, outcome.Refused)
}

func TestDeleteBranchDecision_PrepareKeepsFailing_FailsAndRecordsTheFailure(t *testing.T) {
	d := newDecisionEnv(t, workflows.DeleteBranchName, workflows.DeleteBranch)
	failWith[activities.PrepareDeleteBranchResult](d, a.PrepareDeleteBranch, transient)
	var res workflows.DeleteBranchResult
	if err := d.run(deleteBranchInput, &res); err == nil {
		t.Fatalf("workflow succeeded although prepare kept failing")
	}
	d.never("RetireBranch")
	d.finishedOnce("op-delete", catalog.OpDeleteBranch, "")
}

func TestDeleteBranchDecision_RetireFails_FailsAndRecordsTheFailure(t *testing.T) {
	d := newDecisionEnv(t, workflows.DeleteBranchName, workflows.DeleteBranch)
	answer(d, a.PrepareDeleteBranch, deletePrepared)
	failWith[activities.RetireIncarnationResult](d, a.RetireBranch, permanent("access denied"))
	var res workflows.DeleteBranchResult
	if err := d.run(deleteBranchInput, &res); err == nil || !strings.Contains(err.Error(), deletePrepared.Native) {
		t.Fatalf("err %v, want the retire's failure naming the native", err)
	}
	d.finishedOnce("op-delete", catalog.OpDeleteBranch, "")
}
