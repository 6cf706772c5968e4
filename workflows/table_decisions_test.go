package workflows_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/workflows"
)

// Unit tier: WriteTable's decisions with every activity mocked. The
// real-stack tier is table_test.go.

// runWrite runs WriteTable with PlanCommit and PutCommit answering plans and
// puts in order, and returns the result, the activity calls and the finishes.
func runWrite(t *testing.T, in workflows.WriteTableInput, plans []activities.PlanCommitResult, puts []activities.WriteState) (workflows.WriteTableResult, map[string]int, []activities.FinishInput) {
	t.Helper()
	env := newTestEnv()
	env.RegisterWorkflowWithOptions(workflows.WriteTable, workflow.RegisterOptions{Name: workflows.WriteTableName})
	calls := map[string]int{}
	count := func(info *activity.Info, _ context.Context, _ []any) { calls[info.ActivityType.Name]++ }
	env.SetOnLocalActivityStartedListener(count)
	env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		calls[info.ActivityType.Name]++
	})
	env.OnActivity(a.PrepareWrite, mock.Anything, mock.Anything).Return(
		activities.PrepareWriteResult{Owned: true, Version: "01JVVVVVVVVVVVVVVVVVVVVVVV", Native: "main.01JTTTTTTTTTTTTTTTTTTTTTTT"}, nil).Maybe()
	env.OnActivity(a.WriteManifest, mock.Anything, mock.Anything).Return(activities.WriteManifestResult{}, nil).Maybe()
	inDoubt := 0
	env.OnActivity(a.Progress, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.ProgressInput) error {
		if in.InDoubt && in.Phase == "settle" {
			inDoubt++
		}
		return nil
	}).Maybe()
	var finishes []activities.FinishInput
	env.OnActivity(a.Finish, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.FinishInput) (activities.FinishResult, error) {
			finishes = append(finishes, in)
			return activities.FinishResult{Owned: true}, nil
		}).Maybe()
	for _, p := range plans {
		env.OnActivity(a.PlanCommit, mock.Anything, mock.Anything).Return(p, nil).Once()
	}
	for _, st := range puts {
		env.OnActivity(a.Write, mock.Anything, mock.Anything).Return(activities.Verdict{State: st, Message: string(st)}, nil).Once()
	}
	env.OnActivity(a.ReadBack, mock.Anything, mock.Anything).Return(activities.Verdict{State: activities.Ambiguous}, nil).Maybe()
	env.ExecuteWorkflow(workflows.WriteTableName, in)
	if !env.IsWorkflowCompleted() {
		t.Fatalf("workflow did not complete")
	}
	var res workflows.WriteTableResult
	if err := env.GetWorkflowError(); err != nil {
		var app *temporal.ApplicationError
		if !errors.As(err, &app) || app.Details(&res) != nil || app.Type() != string(res.Outcome) {
			t.Fatalf("workflow error: %v", err)
		}
	} else if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatalf("workflow result: %v", err)
	}
	calls["inDoubt"] = inDoubt
	return res, calls, finishes
}

func plan(commit string) activities.PlanCommitResult {
	return activities.PlanCommitResult{Commit: commit, Parent: "p", Spec: activities.WriteSpec{Kind: activities.WritePublish, Graph: "g", Body: []byte(commit), Landed: outcome.Done}}
}

var writeInput = workflows.WriteTableInput{Graph: "g", Branch: "main", Table: "u", OpID: "op1",
	Objects: []workflows.TableObject{{ID: "01JOOOOOOOOOOOOOOOOOOOOOO1", Size: 3, SHA256: "x"}}}

func TestWriteTable_HeadMovedWithoutExpectedHead_ReplansAndCommits(t *testing.T) {
	res, calls, fin := runWrite(t, writeInput,
		[]activities.PlanCommitResult{plan("T-2"), plan("T-3")},
		[]activities.WriteState{activities.Other, activities.Landed})
	if res.Outcome != outcome.Done || res.Commit != "T-3" || res.HeadRetries != 1 || res.Objects != 1 || res.Bytes != 3 {
		t.Fatalf("result %+v, want done at T-3 after one re-plan", res)
	}
	if calls["PlanCommit"] != 2 || calls["Write"] != 2 || calls["inDoubt"] != 0 {
		t.Fatalf("calls %v", calls)
	}
	if len(fin) != 1 || fin[0].Outcome != outcome.Done {
		t.Fatalf("finish %+v, want one done", fin)
	}
}

func TestWriteTable_HeadMovedWithExpectedHead_ConflictWithoutReplan(t *testing.T) {
	in := writeInput
	in.ExpectedHead = "T-1"
	res, calls, fin := runWrite(t, in, []activities.PlanCommitResult{plan("T-2")}, []activities.WriteState{activities.Other})
	if res.Outcome != outcome.Conflict || res.Commit != "" {
		t.Fatalf("result %+v, want conflict and no commit", res)
	}
	if calls["PlanCommit"] != 1 || calls["Write"] != 1 {
		t.Fatalf("calls %v", calls)
	}
	if len(fin) != 1 || fin[0].Outcome != outcome.Conflict {
		t.Fatalf("finish %+v, want one conflict", fin)
	}
}

func TestWriteTable_HeadKeepsMoving_ConflictAfterBoundedReplans(t *testing.T) {
	var plans []activities.PlanCommitResult
	var puts []activities.WriteState
	for i := 0; i <= workflows.MaxHeadRetries; i++ {
		plans = append(plans, plan("T-x"))
		puts = append(puts, activities.Other)
	}
	res, calls, _ := runWrite(t, writeInput, plans, puts)
	if res.Outcome != outcome.Conflict || calls["PlanCommit"] != workflows.MaxHeadRetries+1 {
		t.Fatalf("result %+v after %d plans, want conflict after %d", res, calls["PlanCommit"], workflows.MaxHeadRetries+1)
	}
}

func TestWriteTable_CommitInDoubt_MarkedThenSettledByReissue(t *testing.T) {
	res, calls, _ := runWrite(t, writeInput, []activities.PlanCommitResult{plan("T-2")},
		[]activities.WriteState{activities.Ambiguous, activities.Ambiguous, activities.Landed})
	if res.Outcome != outcome.Done || res.Commit != "T-2" || res.SettleAttempts != 2 {
		t.Fatalf("result %+v, want done at T-2 after 2 settle re-issues", res)
	}
	if calls["inDoubt"] != 1 || calls["PlanCommit"] != 1 || calls["Write"] != 3 {
		t.Fatalf("calls %v: want one in_doubt mark, one plan, three puts of the same plan", calls)
	}
}

func TestWriteTable_InDoubtCommitProvesStale_ReplansOnNewHead(t *testing.T) {
	res, calls, _ := runWrite(t, writeInput, []activities.PlanCommitResult{plan("T-2"), plan("T-3")},
		[]activities.WriteState{activities.Ambiguous, activities.Other, activities.Landed})
	if res.Outcome != outcome.Done || res.Commit != "T-3" || res.HeadRetries != 1 {
		t.Fatalf("result %+v, want done at T-3", res)
	}
	if calls["PlanCommit"] != 2 {
		t.Fatalf("calls %v", calls)
	}
}

func TestWriteTable_PlanFindsOurCommit_DoneWithoutPut(t *testing.T) {
	committed := activities.PlanCommitResult{Committed: true, Commit: "T-2"}
	res, calls, _ := runWrite(t, writeInput, []activities.PlanCommitResult{committed}, nil)
	if res.Outcome != outcome.Done || res.Commit != "T-2" || calls["Write"] != 0 {
		t.Fatalf("result %+v, calls %v; want done with no put", res, calls)
	}
}

func TestWriteTable_CommitRefused_IsRefused(t *testing.T) {
	res, _, fin := runWrite(t, writeInput, []activities.PlanCommitResult{plan("T-2")}, []activities.WriteState{activities.Refused})
	if res.Outcome != outcome.Refused || res.Commit != "" || len(fin) != 1 || fin[0].Outcome != outcome.Refused {
		t.Fatalf("result %+v, finish %+v; want refused", res, fin)
	}
}
