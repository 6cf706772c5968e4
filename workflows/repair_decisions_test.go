package workflows_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/mock"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/client/outcome"
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
	retires map[string]activities.RetireState
	note    string
}

func newRepairEnv(t *testing.T, ans repairAnswers) *decisionEnv {
	t.Helper()
	d := newDecisionEnv(t, workflows.RepairBranchName, workflows.RepairBranch)
	answer(d, a.PrepareRepair, ans.prep)
	for native, st := range ans.retires {
		d.env.OnActivity(a.RetireIncarnation, mock.Anything, mock.MatchedBy(func(in activities.RetireIncarnationInput) bool { return in.Native == native })).
			Return(activities.RetireIncarnationResult{State: st, Message: "was " + string(st)}, nil)
	}
	d.env.OnActivity(a.FinishRepair, mock.Anything, mock.Anything).Return(activities.FinishRepairResult{Note: ans.note}, nil).Maybe()
	return d
}

func runRepair(t *testing.T, ans repairAnswers) (workflows.RepairBranchResult, *decisionEnv) {
	t.Helper()
	d := newRepairEnv(t, ans)
	var res workflows.RepairBranchResult
	d.mustRun(repairInput, &res)
	return res, d
}

// finishedRepairOnce fails the test unless FinishRepair ran once, keeping Keep, with outcome out.
func finishedRepairOnce(t *testing.T, d *decisionEnv, out outcome.Outcome) activities.FinishRepairInput {
	t.Helper()
	fin := inputsOf[activities.FinishRepairInput](d, "FinishRepair")
	if len(fin) != 1 {
		t.Fatalf("repair finished %d times, want once", len(fin))
	}
	want := activities.FinishRepairInput{OpID: "op-repair", Graph: "g", Branch: "feature", Keep: repairKeep, Outcome: out, Message: fin[0].Message}
	if !reflect.DeepEqual(fin[0], want) {
		t.Fatalf("finish %+v, want %+v", fin[0], want)
	}
	return fin[0]
}

var twoToRetire = []activities.RetireTarget{{Native: repairN2, ETag: `"e2"`}, {Native: repairN3, ETag: `"e3"`}}

func TestRepairBranchDecision_PrepareEndsEarly_NothingRetiredAndOutcomeRecorded(t *testing.T) {
	res, d := runRepair(t, repairAnswers{prep: activities.PrepareRepairResult{Outcome: outcome.Invalid, Message: "keep is not live", Recorded: true}})
	if res.Outcome != outcome.Invalid || res.Message != "keep is not live" || res.Kept != "" || res.Retired == nil || len(res.Retired) != 0 {
		t.Fatalf("result %+v, want invalid, nothing kept, an empty retired list", res)
	}
	d.never("RetireIncarnation")
	finishedRepairOnce(t, d, outcome.Invalid)
}

func TestRepairBranchDecision_NotRecorded_OutcomeNotFinished(t *testing.T) {
	res, d := runRepair(t, repairAnswers{prep: activities.PrepareRepairResult{Outcome: outcome.Conflict, Message: "op id reused"}})
	if res.Outcome != outcome.Conflict {
		t.Fatalf("result %+v, want conflict", res)
	}
	d.never("RetireIncarnation", "FinishRepair")
}

func TestRepairBranchDecision_RetiresEveryOtherLiveRef_KeepOnlyLive(t *testing.T) {
	ans := repairAnswers{prep: activities.PrepareRepairResult{Recorded: true, Retire: twoToRetire, AlreadyRetired: []string{repairN1}},
		retires: map[string]activities.RetireState{repairN2: activities.RetireDone, repairN3: activities.RetireDone}}
	res, d := runRepair(t, ans)
	if res.Outcome != outcome.Done || res.Kept != repairKeep || !reflect.DeepEqual(res.Retired, []string{repairN1, repairN2, repairN3}) {
		t.Fatalf("result %+v, want done keeping %s with n1..n3 retired", res, repairKeep)
	}
	got := inputsOf[activities.RetireIncarnationInput](d, "RetireIncarnation")
	want := []activities.RetireIncarnationInput{
		{OpID: "op-repair", Graph: "g", Native: repairN2, ETag: `"e2"`},
		{OpID: "op-repair", Graph: "g", Native: repairN3, ETag: `"e3"`},
	}
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
	ans := repairAnswers{prep: activities.PrepareRepairResult{Recorded: true, Retire: twoToRetire},
		retires: map[string]activities.RetireState{repairN2: activities.RetireChanged, repairN3: activities.RetireDone}}
	res, d := runRepair(t, ans)
	if res.Outcome != outcome.Conflict || !reflect.DeepEqual(res.Retired, []string{repairN3}) || !strings.Contains(res.Message, repairN2) {
		t.Fatalf("result %+v, want conflict naming %s with %s retired", res, repairN2, repairN3)
	}
	if d.count("RetireIncarnation") != 2 {
		t.Fatalf("%d retires, want the changed ref not to stop the others", d.count("RetireIncarnation"))
	}
	fin := finishedRepairOnce(t, d, outcome.Conflict)
	if fin.Message != res.Message {
		t.Fatalf("finish message %q, want %q", fin.Message, res.Message)
	}
}

func TestRepairBranchDecision_RefRetiredByAnother_NotListedAndDone(t *testing.T) {
	ans := repairAnswers{prep: activities.PrepareRepairResult{Recorded: true, Retire: twoToRetire[:1]},
		retires: map[string]activities.RetireState{repairN2: activities.RetireNotLive}}
	res, d := runRepair(t, ans)
	if res.Outcome != outcome.Done || len(res.Retired) != 0 {
		t.Fatalf("result %+v, want done with nothing retired by this operation", res)
	}
	finishedRepairOnce(t, d, outcome.Done)
}

func TestRepairBranchDecision_NothingLeftToRetire_DoneWithoutSwaps(t *testing.T) {
	res, d := runRepair(t, repairAnswers{prep: activities.PrepareRepairResult{Recorded: true, AlreadyRetired: []string{repairN1}}})
	if res.Outcome != outcome.Done || !reflect.DeepEqual(res.Retired, []string{repairN1}) || res.Kept != repairKeep {
		t.Fatalf("result %+v, want done reporting the earlier attempt's retire", res)
	}
	d.never("RetireIncarnation")
	finishedRepairOnce(t, d, outcome.Done)
}

func TestRepairBranchDecision_FinishNote_BecomesTheMessageOfASuccess(t *testing.T) {
	ans := repairAnswers{prep: activities.PrepareRepairResult{Recorded: true}, note: "recorded a witness for " + repairKeep}
	res, _ := runRepair(t, ans)
	if res.Outcome != outcome.Done || res.Message != ans.note {
		t.Fatalf("result %+v, want the finish's note as message", res)
	}
}

func TestRepairBranchDecision_FinishNote_NeverHidesAConflict(t *testing.T) {
	ans := repairAnswers{prep: activities.PrepareRepairResult{Recorded: true, Retire: twoToRetire[:1]},
		retires: map[string]activities.RetireState{repairN2: activities.RetireChanged}, note: "a note"}
	res, _ := runRepair(t, ans)
	if res.Outcome != outcome.Conflict || !strings.HasPrefix(res.Message, "refs changed while repairing") {
		t.Fatalf("result %+v, want the conflict's message kept", res)
	}
}

func TestRepairBranchDecision_PrepareKeepsFailing_FailsAndRecordsTheFailure(t *testing.T) {
	d := newDecisionEnv(t, workflows.RepairBranchName, workflows.RepairBranch)
	failWith[activities.PrepareRepairResult](d, a.PrepareRepair, transient)
	d.env.OnActivity(a.FinishRepair, mock.Anything, mock.Anything).Return(activities.FinishRepairResult{}, nil)
	var res workflows.RepairBranchResult
	if err := d.run(repairInput, &res); err == nil {
		t.Fatalf("workflow succeeded although prepare kept failing")
	}
	d.never("RetireIncarnation")
	finishedRepairOnce(t, d, "")
}

func TestRepairBranchDecision_RetireFails_StopsAndRecordsTheFailure(t *testing.T) {
	d := newRepairEnv(t, repairAnswers{prep: activities.PrepareRepairResult{Recorded: true, Retire: twoToRetire}})
	d.env.OnActivity(a.RetireIncarnation, mock.Anything, mock.Anything).Return(activities.RetireIncarnationResult{}, permanent("access denied"))
	var res workflows.RepairBranchResult
	if err := d.run(repairInput, &res); err == nil || !strings.Contains(err.Error(), repairN2) {
		t.Fatalf("err %v, want the first retire's failure", err)
	}
	if d.count("RetireIncarnation") != 1 {
		t.Fatalf("%d retires, want the repair to stop at the failure", d.count("RetireIncarnation"))
	}
	fin := finishedRepairOnce(t, d, "")
	if !strings.Contains(fin.Message, "access denied") {
		t.Fatalf("finish message %q, want the failure", fin.Message)
	}
}
