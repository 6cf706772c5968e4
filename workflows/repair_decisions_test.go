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

// Unit tier: RepairBranch's decisions with every activity mocked. The
// real-stack tier is repair_test.go.

const (
	repairKeep = "feature.01JKKKKKKKKKKKKKKKKKKKKKKK"
	repairN1   = "feature.01J1111111111111111111111"
	repairN2   = "feature.01J2222222222222222222222"
	repairN3   = "feature.01J3333333333333333333333"
)

var repairInput = workflows.RepairBranchInput{Graph: "g", Branch: "feature", Keep: repairKeep, OpID: "op-repair"}

// repairAnswers are what the mocked activities answer: prepare once, each
// retire in order (by native), and the finish's note.
type repairAnswers struct {
	prep    activities.PrepareRepairResult
	retires map[string]activities.WriteState
	note    string
}

func newRepairEnv(t *testing.T, ans repairAnswers) *decisionEnv {
	t.Helper()
	d := newDecisionEnv(t, workflows.RepairBranchName, workflows.RepairBranch)
	answer(d, a.PrepareRepair, ans.prep)
	for native, st := range ans.retires {
		d.env.OnActivity(a.Write, mock.Anything, mock.MatchedBy(func(in activities.WriteInput) bool { return in.Spec.Native == native })).
			Return(verdict(st, "was "+string(st)), nil)
	}
	d.env.OnActivity(a.AdoptKept, mock.Anything, mock.Anything).Return(activities.AdoptKeptResult{Note: ans.note}, nil).Maybe()
	return d
}

func runRepair(t *testing.T, ans repairAnswers) (workflows.RepairBranchResult, *decisionEnv) {
	t.Helper()
	d := newRepairEnv(t, ans)
	var res workflows.RepairBranchResult
	d.mustRun(repairInput, &res)
	return res, d
}

// finishedRepairOnce fails the test unless the repair finished once with outcome out,
// adopting the kept incarnation in the ledger exactly when it is done.
func finishedRepairOnce(t *testing.T, d *decisionEnv, out outcome.Outcome) activities.FinishInput {
	t.Helper()
	fin := d.finishedOnce("op-repair", catalog.OpDeleteBranch, out)
	adopted := inputsOf[activities.AdoptKeptInput](d, "AdoptKept")
	want := 0
	if out == outcome.Done {
		want = 1
	}
	if len(adopted) != want || (want == 1 && adopted[0].Keep != repairKeep) {
		t.Fatalf("adopted %+v, want %d adoption of %s", adopted, want, repairKeep)
	}
	return fin
}

func retireTarget(native, etag string) activities.RetireTarget {
	return activities.RetireTarget{Native: native, Spec: activities.WriteSpec{Kind: activities.WriteRetireRef, Graph: "g", Native: native, ETag: etag}}
}

var twoToRetire = []activities.RetireTarget{retireTarget(repairN2, `"e2"`), retireTarget(repairN3, `"e3"`)}

func TestRepairBranchDecision_PrepareEndsEarly_NothingRetiredAndOutcomeRecorded(t *testing.T) {
	res, d := runRepair(t, repairAnswers{prep: activities.PrepareRepairResult{Outcome: outcome.Invalid, Message: "keep is not live", Owned: true}})
	if res.Outcome != outcome.Invalid || res.Message != "keep is not live" || res.Kept != "" || res.Retired == nil || len(res.Retired) != 0 {
		t.Fatalf("result %+v, want invalid, nothing kept, an empty retired list", res)
	}
	d.never("Write")
	finishedRepairOnce(t, d, outcome.Invalid)
}

func TestRepairBranchDecision_NotRecorded_OutcomeNotFinished(t *testing.T) {
	res, d := runRepair(t, repairAnswers{prep: activities.PrepareRepairResult{Outcome: outcome.Conflict, Message: "op id reused"}})
	if res.Outcome != outcome.Conflict {
		t.Fatalf("result %+v, want conflict", res)
	}
	d.never("Write", "Finish")
}

func TestRepairBranchDecision_RetiresEveryOtherLiveRef_KeepOnlyLive(t *testing.T) {
	ans := repairAnswers{prep: activities.PrepareRepairResult{Owned: true, Retire: twoToRetire, AlreadyRetired: []string{repairN1}},
		retires: map[string]activities.WriteState{repairN2: activities.Landed, repairN3: activities.Landed}}
	res, d := runRepair(t, ans)
	if res.Outcome != outcome.Done || res.Kept != repairKeep || !reflect.DeepEqual(res.Retired, []string{repairN1, repairN2, repairN3}) {
		t.Fatalf("result %+v, want done keeping %s with n1..n3 retired", res, repairKeep)
	}
	got := d.written()
	want := []activities.WriteSpec{twoToRetire[0].Spec, twoToRetire[1].Spec}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("retires %+v, want %+v (one swap per ref, never the kept one)", got, want)
	}
	p := inputsOf[activities.PrepareRepairInput](d, "PrepareRepair")[0]
	if p.Keep != repairKeep || p.Branch != "feature" || p.OpID != "op-repair" {
		t.Fatalf("prepare input %+v", p)
	}
	finishedRepairOnce(t, d, outcome.Done)
}

func TestRepairBranchDecision_OneRefChanged_OthersStillRetiredAndConflict(t *testing.T) {
	ans := repairAnswers{prep: activities.PrepareRepairResult{Owned: true, Retire: twoToRetire},
		retires: map[string]activities.WriteState{repairN2: activities.Other, repairN3: activities.Landed}}
	res, d := runRepair(t, ans)
	if res.Outcome != outcome.Conflict || !reflect.DeepEqual(res.Retired, []string{repairN3}) || !strings.Contains(res.Message, repairN2) {
		t.Fatalf("result %+v, want conflict naming %s with %s retired", res, repairN2, repairN3)
	}
	if d.count("Write") != 2 {
		t.Fatalf("%d retires, want the changed ref not to stop the others", d.count("Write"))
	}
	fin := finishedRepairOnce(t, d, outcome.Conflict)
	if fin.Message != res.Message {
		t.Fatalf("finish message %q, want %q", fin.Message, res.Message)
	}
}

func TestRepairBranchDecision_RefRetiredByAnother_NotListedAndDone(t *testing.T) {
	ans := repairAnswers{prep: activities.PrepareRepairResult{Owned: true, Retire: twoToRetire[:1]},
		retires: map[string]activities.WriteState{repairN2: activities.Fenced}}
	res, d := runRepair(t, ans)
	if res.Outcome != outcome.Done || len(res.Retired) != 0 {
		t.Fatalf("result %+v, want done with nothing retired by this operation", res)
	}
	finishedRepairOnce(t, d, outcome.Done)
}

func TestRepairBranchDecision_NothingLeftToRetire_DoneWithoutSwaps(t *testing.T) {
	res, d := runRepair(t, repairAnswers{prep: activities.PrepareRepairResult{Owned: true, AlreadyRetired: []string{repairN1}}})
	if res.Outcome != outcome.Done || !reflect.DeepEqual(res.Retired, []string{repairN1}) || res.Kept != repairKeep {
		t.Fatalf("result %+v, want done reporting the earlier attempt's retire", res)
	}
	d.never("Write")
	finishedRepairOnce(t, d, outcome.Done)
}

func TestRepairBranchDecision_FinishNote_BecomesTheMessageOfASuccess(t *testing.T) {
	ans := repairAnswers{prep: activities.PrepareRepairResult{Owned: true}, note: "recorded a witness for " + repairKeep}
	res, _ := runRepair(t, ans)
	if res.Outcome != outcome.Done || res.Message != ans.note {
		t.Fatalf("result %+v, want the finish's note as message", res)
	}
}

func TestRepairBranchDecision_FinishNote_NeverHidesAConflict(t *testing.T) {
	ans := repairAnswers{prep: activities.PrepareRepairResult{Owned: true, Retire: twoToRetire[:1]},
		retires: map[string]activities.WriteState{repairN2: activities.Other}, note: "a note"}
	res, _ := runRepair(t, ans)
	if res.Outcome != outcome.Conflict || !strings.HasPrefix(res.Message, "refs changed while repairing") {
		t.Fatalf("result %+v, want the conflict's message kept", res)
	}
}

func TestRepairBranchDecision_RetireStepFails_StopsAndCompletesThePendingRetire(t *testing.T) {
	d := newRepairEnv(t, repairAnswers{prep: activities.PrepareRepairResult{Owned: true, Retire: twoToRetire}})
	d.env.OnActivity(a.Write, mock.Anything, mock.Anything).Return(activities.Verdict{}, permanent("a bug"))
	answer(d, a.Fence, verdict(activities.Landed, ""))
	var res workflows.RepairBranchResult
	if err := d.run(repairInput, &res); err != nil || res.Outcome != outcome.Unpublished {
		t.Fatalf("result %+v, %v; want the repair ended definitively once its pending retire was completed", res, err)
	}
	if d.count("Write") != 2 || d.count("Fence") != 1 { // the fast path and the durable one
		t.Fatalf("%d writes, %d fences; want the repair to stop at the failing retire and complete it", d.count("Write"), d.count("Fence"))
	}
	if f := inputsOf[activities.WriteInput](d, "Fence"); f[0].Spec.Native != repairN2 {
		t.Fatalf("fenced %+v, want the retire of %s", f[0].Spec, repairN2)
	}
	finishedRepairOnce(t, d, outcome.Unpublished)
}
