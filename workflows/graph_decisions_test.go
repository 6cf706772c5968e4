package workflows_test

import (
	"testing"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/workflows"
)

// Unit tier: InitGraph's decisions with every activity mocked. The
// real-stack tier is graph_test.go.

func runInitGraph(t *testing.T, in workflows.InitGraphInput, init activities.InitGraphResult) (workflows.InitGraphResult, *decisionEnv) {
	t.Helper()
	d := newDecisionEnv(t, workflows.InitGraphName, workflows.InitGraph)
	answer(d, a.InitGraph, init)
	var res workflows.InitGraphResult
	d.mustRun(in, &res)
	return res, d
}

func TestInitGraphDecision_Written_ResultCarriesMainAndRoot(t *testing.T) {
	init := activities.InitGraphResult{Outcome: outcome.Done, Owned: true, Main: "main.01JAAAAAAAAAAAAAAAAAAAAAAA", Root: "R-0", Created: true}
	res, d := runInitGraph(t, workflows.InitGraphInput{Graph: "g", Author: "ann"}, init)
	want := workflows.InitGraphResult{Outcome: outcome.Done, OpID: decisionWorkflowID, Graph: "g", Main: init.Main, Root: "R-0", Created: true}
	if res != want {
		t.Fatalf("result %+v, want %+v", res, want)
	}
	got := inputsOf[activities.InitGraphInput](d, "InitGraph")
	if len(got) != 1 || got[0].OpID != decisionWorkflowID || got[0].Author != "ann" || got[0].Graph != "g" || got[0].WorkflowID != decisionWorkflowID {
		t.Fatalf("init inputs %+v, want one for g by ann under the workflow id", got)
	}
	d.finishedOnce(decisionWorkflowID, catalog.OpInitGraph, outcome.Done)
}

func TestInitGraphDecision_FoundItsOwnGraph_DoneNotCreated(t *testing.T) {
	init := activities.InitGraphResult{Outcome: outcome.Done, Owned: true, Main: "main.01JAAAAAAAAAAAAAAAAAAAAAAA", Root: "R-0"}
	res, d := runInitGraph(t, workflows.InitGraphInput{Graph: "g", OpID: "op-init"}, init)
	if res.Outcome != outcome.Done || res.Created || res.OpID != "op-init" || res.Root != "R-0" {
		t.Fatalf("result %+v, want done, not created, under op-init", res)
	}
	d.finishedOnce("op-init", catalog.OpInitGraph, outcome.Done)
}

func TestInitGraphDecision_OtherBytesAtTheKeys_ConflictRecorded(t *testing.T) {
	init := activities.InitGraphResult{Outcome: outcome.Conflict, Message: "graph g exists", Owned: true}
	res, d := runInitGraph(t, workflows.InitGraphInput{Graph: "g", OpID: "op-init"}, init)
	if res.Outcome != outcome.Conflict || res.Message != "graph g exists" || res.Created {
		t.Fatalf("result %+v, want conflict", res)
	}
	fin := d.finishedOnce("op-init", catalog.OpInitGraph, outcome.Conflict)
	if fin.Message != "graph g exists" {
		t.Fatalf("finish message %q, want the init's", fin.Message)
	}
}

func TestInitGraphDecision_NotRecorded_OutcomeNotFinishedInTheLedger(t *testing.T) {
	init := activities.InitGraphResult{Outcome: outcome.Invalid, Message: "bad graph name"}
	res, d := runInitGraph(t, workflows.InitGraphInput{Graph: "G!", OpID: "op-init"}, init)
	if res.Outcome != outcome.Invalid || res.Message != "bad graph name" {
		t.Fatalf("result %+v, want invalid", res)
	}
	d.never("FinishOperation")
}

func TestInitGraphDecision_StepKeepsFailing_FailsAndRecordsTheFailure(t *testing.T) {
	d := newDecisionEnv(t, workflows.InitGraphName, workflows.InitGraph)
	failWith[activities.InitGraphResult](d, a.InitGraph, transient)
	var res workflows.InitGraphResult
	if err := d.run(workflows.InitGraphInput{Graph: "g", OpID: "op-init"}, &res); err == nil {
		t.Fatalf("workflow succeeded although the init kept failing")
	}
	if d.count("InitGraph") < 2 {
		t.Fatalf("init ran %d times, want it retried until its deadline", d.count("InitGraph"))
	}
	d.finishedOnce("op-init", catalog.OpInitGraph, "")
}
