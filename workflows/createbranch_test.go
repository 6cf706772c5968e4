package workflows_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/workflows"
)

// Unit tier: CreateBranch's decisions with every activity mocked
// (go.temporal.io/sdk/testsuite). The real-stack tier is createbranch_faults_test.go.

var a *activities.Activities

type createSuite struct {
	t     *testing.T
	env   *testsuite.TestWorkflowEnvironment
	calls map[string]int
	// last holds the arguments of each activity's latest call.
	last map[string][]any
}

// newTestEnv returns a test environment with CreateBranch registered and quiet logs.
func newTestEnv() *testsuite.TestWorkflowEnvironment {
	var ts testsuite.WorkflowTestSuite
	ts.SetLogger(quietLogger())
	env := ts.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(workflows.CreateBranch, workflow.RegisterOptions{Name: workflows.CreateBranchName})
	env.RegisterActivity(&activities.Activities{})
	return env
}

func newCreateSuite(t *testing.T) *createSuite {
	env := newTestEnv()
	s := &createSuite{t: t, env: env, calls: map[string]int{}, last: map[string][]any{}}
	env.SetOnLocalActivityStartedListener(func(info *activity.Info, _ context.Context, args []any) {
		s.calls[info.ActivityType.Name]++
		s.last[info.ActivityType.Name] = args
	})
	// Every attempt prepares a fresh native name; clones succeed unless a test says otherwise.
	attempt := 0
	env.OnActivity(a.PrepareCreate, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.PrepareCreateInput) (activities.PrepareCreateResult, error) {
			attempt++
			n := "feature.01JAAAAAAAAAAAAAAAAAAAAAA" + string(rune('0'+attempt))
			return activities.PrepareCreateResult{Native: n, SourceCommit: "01JBBBBBBBBBBBBBBBBBBBBBBB-3", ForkID: n[8:] + "-0",
				ForkBytes: []byte("fork"), RefBytes: []byte("ref-" + n)}, nil
		}).Maybe()
	env.OnActivity(a.FinishCreate, mock.Anything, mock.Anything).Return(nil).Maybe()
	env.OnActivity(a.MarkInDoubt, mock.Anything, mock.Anything).Return(nil).Maybe()
	env.OnActivity(a.ReclaimClone, mock.Anything, mock.Anything).Return(nil).Maybe()
	return s
}

func (s *createSuite) clone(states ...activities.CloneState) {
	for _, st := range states {
		s.env.OnActivity(a.CloneTree, mock.Anything, mock.Anything).Return(activities.CloneResult{State: st}, nil).Once()
	}
}

func (s *createSuite) onRef(fn any, states ...activities.RefState) {
	for _, st := range states {
		s.env.OnActivity(fn, mock.Anything, mock.Anything).Return(activities.RefResult{State: st, Message: string(st)}, nil).Once()
	}
}

func (s *createSuite) run() workflows.CreateBranchResult {
	s.t.Helper()
	s.env.ExecuteWorkflow(workflows.CreateBranchName, workflows.CreateBranchInput{Graph: "g", Branch: "feature", OpID: "op1"})
	if !s.env.IsWorkflowCompleted() {
		s.t.Fatalf("workflow did not complete")
	}
	var res workflows.CreateBranchResult
	if err := s.env.GetWorkflowResult(&res); err != nil {
		s.t.Fatalf("workflow error: %v", err)
	}
	return res
}

func (s *createSuite) called(fn string) int { return s.calls[fn] }

func TestCreateBranch_RefPutSucceeds_IsCreatedWithoutRereadOrReclaim(t *testing.T) {
	s := newCreateSuite(t)
	s.clone(activities.CloneCommitted)
	s.onRef(a.PutRef, activities.RefOurs)
	res := s.run()
	if res.Outcome != outcome.Created || res.Incarnations != 1 {
		t.Fatalf("got %+v, want created on the first incarnation", res)
	}
	if s.called("ReadRef") != 0 || s.called("ReclaimClone") != 0 || s.called("FenceRef") != 0 {
		t.Fatalf("unexpected reread/reclaim/fence calls: %v", s.calls)
	}
}

func TestCreateBranch_PrepareEndsEarly_OutcomePassedThroughNothingWritten(t *testing.T) {
	for _, o := range []outcome.Outcome{outcome.Invalid, outcome.NotFound, outcome.NotRetained, outcome.Conflict} {
		t.Run(string(o), func(t *testing.T) {
			env := newTestEnv()
			env.OnActivity(a.PrepareCreate, mock.Anything, mock.Anything).Return(activities.PrepareCreateResult{Outcome: o, Message: "why"}, nil).Once()
			env.OnActivity(a.FinishCreate, mock.Anything, mock.MatchedBy(func(in activities.FinishInput) bool { return in.Outcome == o })).Return(nil).Once()
			env.ExecuteWorkflow(workflows.CreateBranchName, workflows.CreateBranchInput{Graph: "g", Branch: "feature"})
			var res workflows.CreateBranchResult
			if err := env.GetWorkflowResult(&res); err != nil || res.Outcome != o || res.Message != "why" {
				t.Fatalf("got %+v, %v; want %s", res, err, o)
			}
			env.AssertExpectations(t)
		})
	}
}

func TestCreateBranch_RefHeldByAnotherWriter_ConflictAndNothingReclaimed(t *testing.T) {
	s := newCreateSuite(t)
	s.clone(activities.CloneCommitted)
	s.onRef(a.PutRef, activities.RefOther)
	if res := s.run(); res.Outcome != outcome.Conflict {
		t.Fatalf("got %+v, want conflict", res)
	}
	if s.called("ReclaimClone") != 0 || s.called("FenceRef") != 0 {
		t.Fatalf("a conflict must delete nothing: %v", s.calls)
	}
}

func TestCreateBranch_RefRefused_FencesReclaimsAndRetriesOnce(t *testing.T) {
	s := newCreateSuite(t)
	s.clone(activities.CloneCommitted, activities.CloneCommitted)
	s.onRef(a.PutRef, activities.RefRefused, activities.RefOurs)
	s.onRef(a.FenceRef, activities.RefFence)
	res := s.run()
	if res.Outcome != outcome.Created || res.Incarnations != 2 {
		t.Fatalf("got %+v, want created on the second incarnation", res)
	}
	if s.called("ReclaimClone") != 1 || s.called("FenceRef") != 1 {
		t.Fatalf("want one fence and one reclaim: %v", s.calls)
	}
}

func TestCreateBranch_RefusedTwice_UnpublishedAfterOneRetry(t *testing.T) {
	s := newCreateSuite(t)
	s.clone(activities.CloneCommitted, activities.CloneCommitted)
	s.onRef(a.PutRef, activities.RefRefused, activities.RefRefused)
	s.onRef(a.FenceRef, activities.RefFence, activities.RefFence)
	res := s.run()
	if res.Outcome != outcome.Unpublished || res.Incarnations != 2 {
		t.Fatalf("got %+v, want unpublished after 2 incarnations", res)
	}
}

func TestCreateBranch_CloneNeverCommitted_RefNeverSent(t *testing.T) {
	s := newCreateSuite(t)
	s.clone(activities.CloneUnknown, activities.CloneNotCommitted)
	s.onRef(a.FenceRef, activities.RefFence, activities.RefFence)
	res := s.run()
	if res.Outcome != outcome.Unpublished {
		t.Fatalf("got %+v, want unpublished", res)
	}
	if s.called("PutRef") != 0 {
		t.Fatalf("ref put sent although no clone committed")
	}
}

func TestCreateBranch_AmbiguousPut_RereadFindsOurs_Created(t *testing.T) {
	s := newCreateSuite(t)
	s.clone(activities.CloneCommitted)
	s.onRef(a.PutRef, activities.RefAmbiguous)
	s.onRef(a.ReadRef, activities.RefAbsent, activities.RefOurs)
	res := s.run()
	if res.Outcome != outcome.Created || res.SettleAttempts != 0 {
		t.Fatalf("got %+v, want created during the read-back", res)
	}
	if s.called("MarkInDoubt") != 0 {
		t.Fatalf("marked in doubt although the read-back decided")
	}
}

func TestCreateBranch_AmbiguousPut_RereadFindsOther_Conflict(t *testing.T) {
	s := newCreateSuite(t)
	s.clone(activities.CloneCommitted)
	s.onRef(a.PutRef, activities.RefAmbiguous)
	s.onRef(a.ReadRef, activities.RefOther)
	if res := s.run(); res.Outcome != outcome.Conflict {
		t.Fatalf("got %+v, want conflict", res)
	}
	if s.called("ReclaimClone") != 0 {
		t.Fatalf("a conflict must delete nothing")
	}
}

func TestCreateBranch_AmbiguousPut_RereadFindsFence_ReclaimedAndRetried(t *testing.T) {
	s := newCreateSuite(t)
	s.clone(activities.CloneCommitted, activities.CloneCommitted)
	s.onRef(a.PutRef, activities.RefAmbiguous, activities.RefOurs)
	s.onRef(a.ReadRef, activities.RefFence)
	res := s.run()
	if res.Outcome != outcome.Created || res.Incarnations != 2 || s.called("ReclaimClone") != 1 {
		t.Fatalf("got %+v (reclaims %d), want created on a fresh name after reclaiming the fenced clone", res, s.called("ReclaimClone"))
	}
}

func TestCreateBranch_StillAbsentAfterRereads_InDoubtThenSettledByReissue(t *testing.T) {
	s := newCreateSuite(t)
	s.clone(activities.CloneCommitted)
	s.onRef(a.PutRef, activities.RefAmbiguous, activities.RefAmbiguous, activities.RefOurs)
	s.onRef(a.ReadRef, activities.RefAbsent, activities.RefAbsent, activities.RefAbsent, activities.RefAbsent)
	res := s.run()
	if res.Outcome != outcome.Created || res.SettleAttempts != 2 {
		t.Fatalf("got %+v, want created at the second settle re-issue", res)
	}
	if s.called("ReadRef") != len(workflows.RereadPauses) || s.called("MarkInDoubt") != 1 {
		t.Fatalf("rereads %d (want %d), in-doubt marks %d (want 1)", s.called("ReadRef"), len(workflows.RereadPauses), s.called("MarkInDoubt"))
	}
}

func TestCreateBranch_InDoubt_OperatorAbandons_FenceWins_Unpublished(t *testing.T) {
	s := newCreateSuite(t)
	s.clone(activities.CloneCommitted)
	s.env.OnActivity(a.PutRef, mock.Anything, mock.Anything).Return(activities.RefResult{State: activities.RefAmbiguous}, nil)
	s.env.OnActivity(a.ReadRef, mock.Anything, mock.Anything).Return(activities.RefResult{State: activities.RefAbsent}, nil)
	s.onRef(a.FenceRef, activities.RefFence)
	s.env.RegisterDelayedCallback(func() {
		s.env.SignalWorkflow(workflows.AbandonSignalName, workflows.AbandonRequest{Reason: "operator"})
	}, 30*time.Second)
	res := s.run()
	if res.Outcome != outcome.Unpublished || res.Incarnations != 1 {
		t.Fatalf("got %+v, want unpublished with no retry", res)
	}
	if s.called("ReclaimClone") != 1 {
		t.Fatalf("clone not reclaimed after the fence won")
	}
}

func TestCreateBranch_InDoubt_AbandonFenceLosesToOurRef_Created(t *testing.T) {
	s := newCreateSuite(t)
	s.clone(activities.CloneCommitted)
	s.env.OnActivity(a.PutRef, mock.Anything, mock.Anything).Return(activities.RefResult{State: activities.RefAmbiguous}, nil)
	s.env.OnActivity(a.ReadRef, mock.Anything, mock.Anything).Return(activities.RefResult{State: activities.RefAbsent}, nil)
	s.onRef(a.FenceRef, activities.RefOurs)
	s.env.RegisterDelayedCallback(func() {
		s.env.SignalWorkflow(workflows.AbandonSignalName, workflows.AbandonRequest{Reason: "operator"})
	}, 10*time.Second)
	if res := s.run(); res.Outcome != outcome.Created {
		t.Fatalf("got %+v, want created (the fence lost to our own ref)", res)
	}
	if s.called("ReclaimClone") != 0 {
		t.Fatalf("reclaimed the clone of a created branch")
	}
}

func TestCreateBranch_SettleAttemptsExhausted_FencesInsteadOfWaitingForever(t *testing.T) {
	s := newCreateSuite(t)
	s.clone(activities.CloneCommitted)
	s.env.OnActivity(a.PutRef, mock.Anything, mock.Anything).Return(activities.RefResult{State: activities.RefAmbiguous}, nil)
	s.env.OnActivity(a.ReadRef, mock.Anything, mock.Anything).Return(activities.RefResult{State: activities.RefAbsent}, nil)
	s.onRef(a.FenceRef, activities.RefAmbiguous, activities.RefFence) // the first fence put is itself unknown
	res := s.run()
	if res.Outcome != outcome.Unpublished || res.SettleAttempts != workflows.MaxSettleAttempts {
		t.Fatalf("got %+v, want unpublished after %d re-issues", res, workflows.MaxSettleAttempts)
	}
	if s.called("FenceRef") != 2 {
		t.Fatalf("fence attempts %d, want 2 (retried after an unknown answer)", s.called("FenceRef"))
	}
}

func TestCreateBranch_PrepareFails_WorkflowFailsAndRecordsIt(t *testing.T) {
	env := newTestEnv()
	env.OnActivity(a.PrepareCreate, mock.Anything, mock.Anything).Return(activities.PrepareCreateResult{}, errors.New("postgres down"))
	env.OnActivity(a.FinishCreate, mock.Anything, mock.MatchedBy(func(in activities.FinishInput) bool { return in.Outcome == "" })).Return(nil).Once()
	env.ExecuteWorkflow(workflows.CreateBranchName, workflows.CreateBranchInput{Graph: "g", Branch: "feature"})
	if err := env.GetWorkflowError(); err == nil {
		t.Fatalf("workflow succeeded although prepare kept failing")
	}
	env.AssertExpectations(t)
}

func TestCreateBranch_CancelledWhileInDoubt_FencesReclaimsAndRecordsUnpublished(t *testing.T) {
	s := newCreateSuite(t)
	s.clone(activities.CloneCommitted)
	s.env.OnActivity(a.PutRef, mock.Anything, mock.Anything).Return(activities.RefResult{State: activities.RefAmbiguous}, nil)
	s.env.OnActivity(a.ReadRef, mock.Anything, mock.Anything).Return(activities.RefResult{State: activities.RefAbsent}, nil)
	s.onRef(a.FenceRef, activities.RefFence)
	s.env.RegisterDelayedCallback(s.env.CancelWorkflow, 30*time.Second)
	s.env.ExecuteWorkflow(workflows.CreateBranchName, workflows.CreateBranchInput{Graph: "g", Branch: "feature", OpID: "op1"})
	if err := s.env.GetWorkflowError(); err == nil {
		t.Fatalf("a cancelled create completed as if nothing happened")
	}
	if s.called("FenceRef") != 1 || s.called("ReclaimClone") != 1 {
		t.Fatalf("fences %d, reclaims %d; want the in-doubt incarnation fenced and reclaimed", s.called("FenceRef"), s.called("ReclaimClone"))
	}
	args := s.last["FinishCreate"]
	if len(args) != 1 {
		t.Fatalf("FinishCreate called with %v, want one input", args)
	}
	if finished := args[0].(activities.FinishInput); finished.Outcome != outcome.Unpublished || finished.OpID != "op1" {
		t.Fatalf("ledger told %+v, want unpublished for op1", finished)
	}
}

func TestCreateBranch_CancelledDuringPrepare_RecordsTheEndWithoutAFence(t *testing.T) {
	env := newTestEnv()
	env.OnActivity(a.PrepareCreate, mock.Anything, mock.Anything).Return(activities.PrepareCreateResult{}, errors.New("postgres down"))
	var finished *activities.FinishInput
	env.OnActivity(a.FinishCreate, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.FinishInput) error {
		finished = &in
		return nil
	})
	fenced := 0
	env.OnActivity(a.FenceRef, mock.Anything, mock.Anything).Return(func(context.Context, activities.FenceInput) (activities.RefResult, error) {
		fenced++
		return activities.RefResult{State: activities.RefFence}, nil
	}).Maybe()
	env.RegisterDelayedCallback(env.CancelWorkflow, 20*time.Second)
	env.ExecuteWorkflow(workflows.CreateBranchName, workflows.CreateBranchInput{Graph: "g", Branch: "feature", OpID: "op2"})
	if err := env.GetWorkflowError(); err == nil {
		t.Fatalf("a cancelled create completed")
	}
	if finished == nil || finished.Outcome != "" || finished.OpID != "op2" {
		t.Fatalf("ledger told %+v, want the operation recorded as failed", finished)
	}
	if fenced != 0 {
		t.Fatalf("fenced %d times although no incarnation was prepared", fenced)
	}
}
