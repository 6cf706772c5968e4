package workflows_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/workflows"
)

// Unit tier: Merge's decisions with every activity mocked. The real-stack
// tier is merge_test.go.

var mergeInput = workflows.MergeInput{Graph: "g", Source: "feature", Target: "main", OpID: "op-merge"}

// mergePlan is a plan that writes commit (kind adopted), its body the commit's name.
func mergePlan(commit string) activities.PlanMergeResult {
	return activities.PlanMergeResult{Owned: true, SourceHead: "S-4", TargetHead: "T-1", Bases: []string{"T-1"},
		Tables:    []activities.MergeTable{{Table: "t", Action: workflows.MergeAdopt, Source: "V2", Target: "V1"}},
		Unchanged: 2, Kind: outcome.Adopted, Commit: commit,
		Spec: activities.WriteSpec{Kind: activities.WritePublish, Graph: "g", Body: []byte("body of " + commit), Landed: outcome.Adopted}}
}

// runMerge runs Merge with PlanMerge answering plans and PutPlannedCommit
// answering puts, in order.
func runMerge(t *testing.T, in workflows.MergeInput, plans []activities.PlanMergeResult, puts ...activities.WriteState) (workflows.MergeResult, *decisionEnv) {
	t.Helper()
	d := newDecisionEnv(t, workflows.MergeName, workflows.Merge)
	answer(d, a.PlanMerge, plans...)
	for _, st := range puts {
		answer(d, a.Write, verdict(st, "put "+string(st)))
	}
	d.env.OnActivity(a.ReadBack, mock.Anything, mock.Anything).Return(verdict(activities.Ambiguous, "not there yet"), nil).Maybe()
	var res workflows.MergeResult
	d.mustRun(in, &res)
	return res, d
}

func TestMergeDecision_PlanHasConflicts_PublishesNothing(t *testing.T) {
	plan := activities.PlanMergeResult{Outcome: outcome.Conflict, Message: "1 of 2 tables changed on both", Owned: true,
		SourceHead: "S-4", TargetHead: "T-3", Bases: []string{"T-1"}, Conflicts: 1, Unchanged: 1,
		Tables: []activities.MergeTable{{Table: "t", Action: workflows.MergeConflict, Base: "V1", Source: "V2", Target: "V3"}}}
	res, d := runMerge(t, mergeInput, []activities.PlanMergeResult{plan})
	if res.Outcome != outcome.Conflict || res.Commit != "" || res.Conflicts != 1 || res.Message != plan.Message {
		t.Fatalf("result %+v, want a conflict with no commit", res)
	}
	if gotTables, _ := json.Marshal(res.Tables); string(gotTables) != string(mustJSON(t, plan.Tables)) || res.SourceHead != "S-4" || res.TargetHead != "T-3" || !reflect.DeepEqual(res.Bases, plan.Bases) {
		t.Fatalf("result %+v does not report the plan %+v", res, plan)
	}
	d.never("Write", "Progress")
	d.finishedOnce("op-merge", catalog.OpMerge, outcome.Conflict)
}

func TestMergeDecision_AlreadyUpToDate_WritesNothingAndFinishes(t *testing.T) {
	plan := activities.PlanMergeResult{Outcome: outcome.AlreadyUpToDate, Owned: true, SourceHead: "S-1", TargetHead: "T-5", Unchanged: 3}
	res, d := runMerge(t, mergeInput, []activities.PlanMergeResult{plan})
	if res.Outcome != workflows.OutcomeAlreadyUpToDate || res.Commit != "" || res.Tables == nil || len(res.Tables) != 0 {
		t.Fatalf("result %+v, want already up to date with an empty (non-nil) table list", res)
	}
	d.never("Write")
	d.finishedOnce("op-merge", catalog.OpMerge, outcome.AlreadyUpToDate)
}

func TestMergeDecision_OpIDOfAnotherRequest_LeavesItsOperationUnfinished(t *testing.T) {
	plan := activities.PlanMergeResult{Outcome: outcome.Conflict, Owned: false, Message: "operation id used for a different request"}
	res, d := runMerge(t, mergeInput, []activities.PlanMergeResult{plan})
	if res.Outcome != outcome.Conflict {
		t.Fatalf("result %+v, want conflict", res)
	}
	d.never("Write", "Finish")
}

func TestMergeDecision_Preview_ReturnsThePlanAndTouchesNoLedgerRow(t *testing.T) {
	in := mergeInput
	in.Preview, in.OpID = true, ""
	// Even a plan claiming to be recorded is not finished: a preview is no operation of the ledger.
	plan := mergePlan("T-2")
	plan.Outcome, plan.Commit, plan.Spec = outcome.Adopted, "", activities.WriteSpec{}
	res, d := runMerge(t, in, []activities.PlanMergeResult{plan})
	if res.Outcome != outcome.Adopted || !res.Preview || res.Commit != "" || res.OpID != "" || len(res.Tables) != 1 {
		t.Fatalf("result %+v, want the adopted plan without commit or op id", res)
	}
	if p := inputsOf[activities.PlanMergeInput](d, "PlanMerge"); !p[0].Preview || p[0].OpID != "" {
		t.Fatalf("plan input %+v, want a preview without op id", p[0])
	}
	d.never("Write", "Finish")
}

func TestMergeDecision_PreviewPlanFails_FailsWithoutFinishingAnything(t *testing.T) {
	d := newDecisionEnv(t, workflows.MergeName, workflows.Merge)
	failWith[activities.PlanMergeResult](d, a.PlanMerge, permanent("store down"))
	in := mergeInput
	in.Preview = true
	var res workflows.MergeResult
	if err := d.run(in, &res); err == nil || !strings.Contains(err.Error(), "store down") {
		t.Fatalf("err %v, want the plan's failure", err)
	}
	d.never("Write", "Finish")
}

func TestMergeDecision_EarlierAttemptCommitted_EndsWithoutPut(t *testing.T) {
	plan := activities.PlanMergeResult{Owned: true, Committed: true, Commit: "T-2", Kind: outcome.Merged, SourceHead: "S-4", TargetHead: "T-2"}
	res, d := runMerge(t, mergeInput, []activities.PlanMergeResult{plan})
	if res.Outcome != workflows.OutcomeMerged || res.Commit != "T-2" {
		t.Fatalf("result %+v, want merged at the commit already there", res)
	}
	d.never("Write")
	d.finishedOnce("op-merge", catalog.OpMerge, outcome.Merged)
}

func TestMergeDecision_PutStored_TargetGetsExactlyThePlannedBytes(t *testing.T) {
	plan := mergePlan("T-2")
	res, d := runMerge(t, mergeInput, []activities.PlanMergeResult{plan}, activities.Landed)
	if res.Outcome != workflows.OutcomeAdopted || res.Commit != "T-2" || res.HeadRetries != 0 || res.SettleAttempts != 0 {
		t.Fatalf("result %+v, want adopted at T-2", res)
	}
	puts := d.written()
	if len(puts) != 1 || !reflect.DeepEqual(puts[0], plan.Spec) {
		t.Fatalf("puts %+v, want one %+v", puts, plan.Spec)
	}
	p := inputsOf[activities.PlanMergeInput](d, "PlanMerge")[0]
	if p.OpID != "op-merge" || p.Source != "feature" || p.Target != "main" || p.WorkflowID != decisionWorkflowID || p.Preview {
		t.Fatalf("plan input %+v", p)
	}
	if d.inDoubtMarks() != 0 {
		t.Fatalf("recorded in doubt although the put answered")
	}
	d.finishedOnce("op-merge", catalog.OpMerge, outcome.Adopted)
}

func TestMergeDecision_NoOpID_TheWorkflowIDIsTheOperation(t *testing.T) {
	in := mergeInput
	in.OpID = ""
	res, d := runMerge(t, in, []activities.PlanMergeResult{mergePlan("T-2")}, activities.Landed)
	if res.OpID != decisionWorkflowID || inputsOf[activities.PlanMergeInput](d, "PlanMerge")[0].OpID != decisionWorkflowID {
		t.Fatalf("op id %q, want the workflow id", res.OpID)
	}
	d.finishedOnce(decisionWorkflowID, catalog.OpMerge, outcome.Adopted)
}

func TestMergeDecision_PutRefusedOrInvalid_EndsWithoutCommit(t *testing.T) {
	for st, want := range map[activities.WriteState]outcome.Outcome{activities.Refused: outcome.Refused, activities.Invalid: outcome.Invalid} {
		t.Run(string(st), func(t *testing.T) {
			res, d := runMerge(t, mergeInput, []activities.PlanMergeResult{mergePlan("T-2")}, st)
			if res.Outcome != want || res.Commit != "" || res.Message != "put "+string(st) {
				t.Fatalf("result %+v, want %s without commit", res, want)
			}
			if d.count("PlanMerge") != 1 || d.count("Write") != 1 {
				t.Fatalf("steps %v, want one plan and one put", d.names())
			}
			d.finishedOnce("op-merge", catalog.OpMerge, want)
		})
	}
}

func TestMergeDecision_TargetMovedWithExpectedHead_ConflictWithoutReplan(t *testing.T) {
	in := mergeInput
	in.ExpectedHead = "T-1"
	res, d := runMerge(t, in, []activities.PlanMergeResult{mergePlan("T-2")}, activities.Other)
	if res.Outcome != outcome.Conflict || res.Commit != "" || res.HeadRetries != 0 || !strings.Contains(res.Message, "T-1") {
		t.Fatalf("result %+v, want a conflict naming the expected head", res)
	}
	if d.count("PlanMerge") != 1 || inputsOf[activities.PlanMergeInput](d, "PlanMerge")[0].ExpectedHead != "T-1" {
		t.Fatalf("steps %v, want one plan given the expected head", d.names())
	}
	d.finishedOnce("op-merge", catalog.OpMerge, outcome.Conflict)
}

func TestMergeDecision_TargetMovedWithoutExpectedHead_Replans(t *testing.T) {
	p1, p2 := mergePlan("T-2"), mergePlan("T-3")
	res, d := runMerge(t, mergeInput, []activities.PlanMergeResult{p1, p2}, activities.Other, activities.Landed)
	if res.Outcome != outcome.Adopted || res.Commit != "T-3" || res.HeadRetries != 1 {
		t.Fatalf("result %+v, want adopted at T-3 after one re-plan", res)
	}
	puts := d.written()
	if len(puts) != 2 || !bytes.Equal(puts[0].Body, p1.Spec.Body) || !bytes.Equal(puts[1].Body, p2.Spec.Body) {
		t.Fatalf("puts %+v, want the first plan's bytes then the re-plan's", puts)
	}
	d.finishedOnce("op-merge", catalog.OpMerge, outcome.Adopted)
}

func TestMergeDecision_TargetKeepsMoving_ConflictAfterMaxHeadRetries(t *testing.T) {
	var plans []activities.PlanMergeResult
	var puts []activities.WriteState
	for i := 0; i <= workflows.MaxHeadRetries; i++ {
		plans = append(plans, mergePlan("T-x"))
		puts = append(puts, activities.Other)
	}
	res, d := runMerge(t, mergeInput, plans, puts...)
	if res.Outcome != outcome.Conflict || res.Commit != "" || res.HeadRetries != workflows.MaxHeadRetries {
		t.Fatalf("result %+v, want conflict after %d re-plans", res, workflows.MaxHeadRetries)
	}
	if d.count("PlanMerge") != workflows.MaxHeadRetries+1 {
		t.Fatalf("%d plans, want %d", d.count("PlanMerge"), workflows.MaxHeadRetries+1)
	}
	d.finishedOnce("op-merge", catalog.OpMerge, outcome.Conflict)
}

func TestMergeDecision_PutInDoubt_MarkedOnceAndSettledByReissuingTheSameBytes(t *testing.T) {
	plan := mergePlan("T-2")
	res, d := runMerge(t, mergeInput, []activities.PlanMergeResult{plan},
		activities.Ambiguous, activities.Ambiguous, activities.Landed)
	if res.Outcome != outcome.Adopted || res.Commit != "T-2" || res.SettleAttempts != 2 {
		t.Fatalf("result %+v, want adopted after 2 re-issues", res)
	}
	if d.inDoubtMarks() != 1 || d.count("PlanMerge") != 1 || d.count("ReadBack") != len(workflows.RereadPauses) {
		t.Fatalf("steps %v, want one plan, the read-backs, and one in_doubt mark", d.names())
	}
	if n := d.names(); d.first("Progress") != d.last("ReadBack")+1 || n[d.first("Progress")+1] != "Write" {
		t.Fatalf("steps %v: the operation must be recorded in doubt after the read-backs, before the re-issue", d.names())
	}
	for i, in := range inputsOf[activities.WriteInput](d, "Write") {
		if !bytes.Equal(in.Spec.Body, plan.Spec.Body) || in.Attempt != i {
			t.Fatalf("write %d %+v, want the planned bytes as attempt %d", i, in, i)
		}
	}
	var rereads time.Duration
	for _, p := range workflows.RereadPauses {
		rereads += p
	}
	if got, want := d.pauses("Write"), []time.Duration{rereads + workflows.SettleBackoff, 2 * workflows.SettleBackoff}; !reflect.DeepEqual(got, want) {
		t.Fatalf("pauses between puts %v, want %v (read-backs, then durable and doubling)", got, want)
	}
	d.finishedOnce("op-merge", catalog.OpMerge, outcome.Adopted)
}

func TestMergeDecision_WhileSettling_StatusReportsInDoubt(t *testing.T) {
	d := newDecisionEnv(t, workflows.MergeName, workflows.Merge)
	answer(d, a.PlanMerge, mergePlan("T-2"))
	answer(d, a.Write, verdict(activities.Ambiguous, "timeout"), verdict(activities.Landed, ""))
	d.env.OnActivity(a.ReadBack, mock.Anything, mock.Anything).Return(verdict(activities.Ambiguous, "not there yet"), nil).Maybe()
	var rereads time.Duration
	for _, p := range workflows.RereadPauses {
		rereads += p
	}
	var during workflows.OperationStatus
	d.env.RegisterDelayedCallback(func() {
		v, err := d.env.QueryWorkflow(workflows.StatusQueryName)
		if err != nil {
			t.Errorf("query: %v", err)
			return
		}
		if err := v.Get(&during); err != nil {
			t.Errorf("decode status: %v", err)
		}
	}, rereads+workflows.SettleBackoff/2)
	var res workflows.MergeResult
	d.mustRun(mergeInput, &res)
	if during.Outcome != outcome.InDoubt || during.Phase != "settle" || during.Commit != "T-2" || during.OpID != "op-merge" {
		t.Fatalf("status while settling %+v, want in_doubt in phase settle for T-2", during)
	}
	v, err := d.env.QueryWorkflow(workflows.StatusQueryName)
	var after workflows.OperationStatus
	if err != nil || v.Get(&after) != nil || after.Outcome != outcome.Adopted || after.Phase != "done" || after.SettleAttempts != 1 {
		t.Fatalf("status after %+v (%v), want done/adopted after 1 re-issue", after, err)
	}
}

func TestMergeDecision_InDoubtThenStale_ReplansAndMarksOnlyOnce(t *testing.T) {
	p1, p2 := mergePlan("T-2"), mergePlan("T-3")
	res, d := runMerge(t, mergeInput, []activities.PlanMergeResult{p1, p2},
		activities.Ambiguous, activities.Other, activities.Ambiguous, activities.Landed)
	if res.Outcome != outcome.Adopted || res.Commit != "T-3" || res.HeadRetries != 1 || res.SettleAttempts != 2 {
		t.Fatalf("result %+v, want adopted at T-3 after a re-plan and 2 re-issues in all", res)
	}
	if d.inDoubtMarks() != 2 {
		t.Fatalf("recorded in doubt %d times, want once per settle episode", d.inDoubtMarks())
	}
	puts := d.written()
	if !bytes.Equal(puts[1].Body, p1.Spec.Body) || !bytes.Equal(puts[3].Body, p2.Spec.Body) {
		t.Fatalf("each settle must re-issue its own plan's bytes")
	}
}

func TestMergeDecision_PlanKeepsFailing_FailsAndRecordsTheFailure(t *testing.T) {
	d := newDecisionEnv(t, workflows.MergeName, workflows.Merge)
	failWith[activities.PlanMergeResult](d, a.PlanMerge, transient)
	var res workflows.MergeResult
	if err := d.run(mergeInput, &res); err == nil {
		t.Fatalf("workflow succeeded although every plan failed")
	}
	if d.count("PlanMerge") < 2 {
		t.Fatalf("plan ran %d times, want it retried before giving up", d.count("PlanMerge"))
	}
	d.never("Write")
	d.finishedOnce("op-merge", catalog.OpMerge, "")
}

func TestMergeDecision_PutStepFails_PendingCommitFencedBeforeTheEnd(t *testing.T) {
	d := newDecisionEnv(t, workflows.MergeName, workflows.Merge)
	plan := mergePlan("T-2")
	answer(d, a.PlanMerge, plan)
	failWith[activities.Verdict](d, a.Write, permanent("bucket deleted"))
	answer(d, a.Fence, verdict(activities.Fenced, "a fence commit holds the seq"))
	var res workflows.MergeResult
	if err := d.run(mergeInput, &res); err != nil || res.Outcome != outcome.Unpublished || res.Commit != "" {
		t.Fatalf("result %+v, %v; want unpublished: a commit put that may have landed is fenced, never left in doubt", res, err)
	}
	if f := inputsOf[activities.WriteInput](d, "Fence"); len(f) != 1 || !reflect.DeepEqual(f[0].Spec, plan.Spec) {
		t.Fatalf("fences %+v, want the pending commit fenced once", f)
	}
	fin := d.finishedOnce("op-merge", catalog.OpMerge, outcome.Unpublished)
	if !strings.Contains(fin.Message, "fenced") {
		t.Fatalf("finish message %q, want it to say the commit was fenced", fin.Message)
	}
}

func TestMergeDecision_ReplanUpToDate_ReportsTheNewPlanNotTheStaleOne(t *testing.T) {
	upToDate := activities.PlanMergeResult{Owned: true, SourceHead: "S-4", TargetHead: "T-2",
		Unchanged: 3, Outcome: outcome.AlreadyUpToDate}
	res, _ := runMerge(t, mergeInput, []activities.PlanMergeResult{mergePlan("T-2"), upToDate}, activities.Other)
	if res.Outcome != outcome.AlreadyUpToDate || len(res.Tables) != 0 || res.Unchanged != 3 {
		t.Fatalf("result %+v, want already up to date with no table left from the first plan", res)
	}
}

// mustJSON is v as JSON: the result's tables are workflows' own type, the
// plan's the activity's, and the JSON is their contract.
func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
