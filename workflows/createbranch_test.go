package workflows_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/workflows"
)

// Unit tier: CreateBranch's decisions with every activity mocked
// (go.temporal.io/sdk/testsuite). The real-stack tier is createbranch_faults_test.go.

type createSuite struct {
	t     *testing.T
	env   *testsuite.TestWorkflowEnvironment
	calls map[string]int
	// last holds the arguments of each activity's latest call.
	last map[string][]any
	// all holds the arguments of every call, by activity.
	all map[string][][]any
}

func newCreateSuite(t *testing.T) *createSuite {
	env := newTestEnv()
	s := &createSuite{t: t, env: env, calls: map[string]int{}, last: map[string][]any{}, all: map[string][][]any{}}
	env.SetOnLocalActivityStartedListener(func(info *activity.Info, _ context.Context, args []any) {
		s.calls[info.ActivityType.Name]++
		s.last[info.ActivityType.Name] = args
		s.all[info.ActivityType.Name] = append(s.all[info.ActivityType.Name], args)
	})
	// Every attempt prepares a fresh native name; clones succeed unless a test says otherwise.
	attempt := 0
	env.OnActivity(a.PrepareCreate, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in activities.PrepareCreateInput) (activities.PrepareCreateResult, error) {
			attempt++
			n := "feature.01JAAAAAAAAAAAAAAAAAAAAAA" + string(rune('0'+attempt))
			return activities.PrepareCreateResult{Owned: true, Native: n, SourceCommit: "01JBBBBBBBBBBBBBBBBBBBBBBB-3", ForkID: n[8:] + "-0",
				ForkBytes: []byte("fork"), RefBytes: []byte("ref-" + n)}, nil
		}).Maybe()
	env.OnActivity(a.Finish, mock.Anything, mock.Anything).Return(activities.FinishResult{Owned: true}, nil).Maybe()
	env.OnActivity(a.Progress, mock.Anything, mock.Anything).Return(nil).Maybe()
	env.OnActivity(a.ReclaimClone, mock.Anything, mock.Anything).Return(nil).Maybe()
	return s
}

// inDoubtMarks counts the Progress calls that recorded the create in doubt.
func (s *createSuite) inDoubtMarks() int {
	n := 0
	for _, args := range s.all["Progress"] {
		if in, ok := args[0].(activities.ProgressInput); ok && in.InDoubt && in.Phase == "settle" {
			n++
		}
	}
	return n
}

// finished returns the inputs of every Finish call.
func (s *createSuite) finished() []activities.FinishInput {
	var out []activities.FinishInput
	for _, args := range s.all["Finish"] {
		out = append(out, args[0].(activities.FinishInput))
	}
	return out
}

func (s *createSuite) clone(states ...activities.CloneState) {
	for _, st := range states {
		s.env.OnActivity(a.CloneTree, mock.Anything, mock.Anything).Return(activities.CloneResult{State: st}, nil).Once()
	}
}

func (s *createSuite) onRef(fn any, states ...activities.WriteState) {
	for _, st := range states {
		s.env.OnActivity(fn, mock.Anything, mock.Anything).Return(activities.Verdict{State: st, Message: string(st), Recorded: st == activities.Landed}, nil).Once()
	}
}

func (s *createSuite) run() workflows.CreateBranchResult {
	s.t.Helper()
	s.env.ExecuteWorkflow(workflows.CreateBranchName, workflows.CreateBranchInput{Graph: "g", Branch: "feature", OpID: "op1"})
	if !s.env.IsWorkflowCompleted() {
		s.t.Fatalf("workflow did not complete")
	}
	var res workflows.CreateBranchResult
	if err := workflowEnd(s.env, &res); err != nil {
		s.t.Fatalf("workflow error: %v", err)
	}
	return res
}

// workflowEnd decodes a workflow's result, from its completion or — for an outcome
// that is not a success — from the ApplicationError it failed with, whose type must be
// the outcome (docs/workflows.md). Any other failure is returned.
func workflowEnd(env *testsuite.TestWorkflowEnvironment, res *workflows.CreateBranchResult) error {
	err := env.GetWorkflowError()
	if err == nil {
		return env.GetWorkflowResult(res)
	}
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || !outcome.Outcome(app.Type()).Valid() {
		return err
	}
	if derr := app.Details(res); derr != nil {
		return derr
	}
	if string(res.Outcome) != app.Type() || res.Outcome.Success() || !app.NonRetryable() {
		return fmt.Errorf("failed with type %s (non-retryable %v) carrying outcome %s", app.Type(), app.NonRetryable(), res.Outcome)
	}
	return nil
}

func (s *createSuite) called(fn string) int { return s.calls[fn] }

// What the clone and the ref put answer decides the create: its outcome, how many
// incarnations it took, and what it reclaimed or fenced on the way.
func TestCreateBranch_CloneAndRefAnswers_DecideOutcomeIncarnationsReclaimsAndFences(t *testing.T) {
	const (
		C = activities.CloneCommitted
		L = activities.Landed
		A = activities.Ambiguous
	)
	for _, c := range []struct {
		name                    string
		clones                  []activities.CloneState
		writes, rereads, fences []activities.WriteState
		want                    outcome.Outcome
		incarnations            int // 0: not checked
		calls                   map[string]int
		decidedWithoutDoubt     bool
	}{
		{name: "RefPutSucceeds_CreatedWithoutRereadOrReclaim", clones: []activities.CloneState{C}, writes: []activities.WriteState{L},
			want: outcome.Created, incarnations: 1, calls: map[string]int{"ReadBack": 0, "ReclaimClone": 0, "Fence": 0}},
		{name: "RefHeldByAnotherWriter_ConflictAndNothingReclaimed", clones: []activities.CloneState{C}, writes: []activities.WriteState{activities.Other},
			want: outcome.Conflict, calls: map[string]int{"ReclaimClone": 0, "Fence": 0}},
		// A definitely refused put cannot land: no fence.
		{name: "RefRefused_ReclaimsWithoutAFenceAndRetriesOnce", clones: []activities.CloneState{C, C}, writes: []activities.WriteState{activities.Refused, L},
			want: outcome.Created, incarnations: 2, calls: map[string]int{"ReclaimClone": 1, "Fence": 0}},
		{name: "RefusedTwice_RefusedAfterOneRetryNeverFenced", clones: []activities.CloneState{C, C}, writes: []activities.WriteState{activities.Refused, activities.Refused},
			want: outcome.Refused, incarnations: 2, calls: map[string]int{"ReclaimClone": 2, "Fence": 0}},
		{name: "CloneRefused_RefusedNothingSentOrFenced", clones: []activities.CloneState{activities.CloneRefused},
			want: outcome.Refused, incarnations: 1, calls: map[string]int{"Write": 0, "Fence": 0, "ReclaimClone": 0}},
		{name: "CloneNeverCommitted_RefNeverSent", clones: []activities.CloneState{activities.CloneUnknown, activities.CloneUnknown},
			fences: []activities.WriteState{activities.Fenced, activities.Fenced}, want: outcome.Unpublished, incarnations: 2, calls: map[string]int{"Write": 0}},
		{name: "AmbiguousPut_RereadFindsOurs_CreatedNeverInDoubt", clones: []activities.CloneState{C}, writes: []activities.WriteState{A},
			rereads: []activities.WriteState{A, L}, want: outcome.Created, decidedWithoutDoubt: true},
		{name: "AmbiguousPut_RereadFindsOther_ConflictNothingReclaimed", clones: []activities.CloneState{C}, writes: []activities.WriteState{A},
			rereads: []activities.WriteState{activities.Other}, want: outcome.Conflict, calls: map[string]int{"ReclaimClone": 0}},
		{name: "AmbiguousPut_RereadFindsFence_ReclaimedAndRetriedUnderAFreshName", clones: []activities.CloneState{C, C}, writes: []activities.WriteState{A, L},
			rereads: []activities.WriteState{activities.Fenced}, want: outcome.Created, incarnations: 2, calls: map[string]int{"ReclaimClone": 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newCreateSuite(t)
			s.clone(c.clones...)
			s.onRef(a.Write, c.writes...)
			s.onRef(a.ReadBack, c.rereads...)
			s.onRef(a.Fence, c.fences...)
			res := s.run()
			if res.Outcome != c.want || c.incarnations != 0 && res.Incarnations != c.incarnations {
				t.Fatalf("got %+v, want %s after %d incarnations", res, c.want, c.incarnations)
			}
			for fn, n := range c.calls {
				if s.called(fn) != n {
					t.Fatalf("%s called %d times, want %d: %v", fn, s.called(fn), n, s.calls)
				}
			}
			if c.decidedWithoutDoubt && (res.SettleAttempts != 0 || s.inDoubtMarks() != 0) {
				t.Fatalf("got %+v, marked in doubt %d times; want it decided during the read-back", res, s.inDoubtMarks())
			}
		})
	}
}

func TestCreateBranch_PrepareEndsEarly_OutcomePassedThroughNothingWritten(t *testing.T) {
	for _, o := range []outcome.Outcome{outcome.Invalid, outcome.NotFound, outcome.NotRetained, outcome.Conflict} {
		t.Run(string(o), func(t *testing.T) {
			env := newTestEnv()
			env.OnActivity(a.PrepareCreate, mock.Anything, mock.Anything).Return(activities.PrepareCreateResult{Owned: true, Outcome: o, Message: "why"}, nil).Once()
			env.OnActivity(a.Finish, mock.Anything, mock.MatchedBy(func(in activities.FinishInput) bool { return in.Outcome == o })).Return(activities.FinishResult{Owned: true}, nil).Once()
			env.ExecuteWorkflow(workflows.CreateBranchName, workflows.CreateBranchInput{Graph: "g", Branch: "feature"})
			var res workflows.CreateBranchResult
			if err := workflowEnd(env, &res); err != nil || res.Outcome != o || res.Message != "why" {
				t.Fatalf("got %+v, %v; want %s", res, err, o)
			}
			env.AssertExpectations(t)
		})
	}
}

func TestCreateBranch_StillAbsentAfterRereads_InDoubtThenSettledByReissue(t *testing.T) {
	s := newCreateSuite(t)
	s.clone(activities.CloneCommitted)
	s.onRef(a.Write, activities.Ambiguous, activities.Ambiguous, activities.Landed)
	s.onRef(a.ReadBack, activities.Ambiguous, activities.Ambiguous, activities.Ambiguous, activities.Ambiguous)
	res := s.run()
	if res.Outcome != outcome.Created || res.SettleAttempts != 2 {
		t.Fatalf("got %+v, want created at the second settle re-issue", res)
	}
	if s.called("ReadBack") != len(workflows.RereadPauses) || s.inDoubtMarks() != 1 {
		t.Fatalf("rereads %d (want %d), in-doubt marks %d (want 1)", s.called("ReadBack"), len(workflows.RereadPauses), s.inDoubtMarks())
	}
}

func TestCreateBranch_InDoubt_OperatorAbandons_FenceWins_Unpublished(t *testing.T) {
	s := newCreateSuite(t)
	s.clone(activities.CloneCommitted)
	s.env.OnActivity(a.Write, mock.Anything, mock.Anything).Return(activities.Verdict{State: activities.Ambiguous}, nil)
	s.env.OnActivity(a.ReadBack, mock.Anything, mock.Anything).Return(activities.Verdict{State: activities.Ambiguous}, nil)
	s.onRef(a.Fence, activities.Fenced)
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
	s.env.OnActivity(a.Write, mock.Anything, mock.Anything).Return(activities.Verdict{State: activities.Ambiguous}, nil)
	s.env.OnActivity(a.ReadBack, mock.Anything, mock.Anything).Return(activities.Verdict{State: activities.Ambiguous}, nil)
	s.onRef(a.Fence, activities.Landed)
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
	s.env.OnActivity(a.Write, mock.Anything, mock.Anything).Return(activities.Verdict{State: activities.Ambiguous}, nil)
	s.env.OnActivity(a.ReadBack, mock.Anything, mock.Anything).Return(activities.Verdict{State: activities.Ambiguous}, nil)
	s.onRef(a.Fence, activities.Ambiguous, activities.Fenced) // the first fence put is itself unknown
	res := s.run()
	if res.Outcome != outcome.Unpublished || res.SettleAttempts != workflows.MaxSettleAttempts {
		t.Fatalf("got %+v, want unpublished after %d re-issues", res, workflows.MaxSettleAttempts)
	}
	if s.called("Fence") != 2 {
		t.Fatalf("fence attempts %d, want 2 (retried after an unknown answer)", s.called("Fence"))
	}
}

func TestCreateBranch_PrepareFails_WorkflowFailsAndRecordsIt(t *testing.T) {
	env := newTestEnv()
	env.OnActivity(a.PrepareCreate, mock.Anything, mock.Anything).Return(activities.PrepareCreateResult{}, errors.New("postgres down"))
	env.OnActivity(a.Finish, mock.Anything, mock.MatchedBy(func(in activities.FinishInput) bool { return in.Outcome == "" })).Return(activities.FinishResult{}, nil).Once()
	env.ExecuteWorkflow(workflows.CreateBranchName, workflows.CreateBranchInput{Graph: "g", Branch: "feature"})
	if err := env.GetWorkflowError(); err == nil {
		t.Fatalf("workflow succeeded although prepare kept failing")
	}
	env.AssertExpectations(t)
}

func TestCreateBranch_CancelledWhileInDoubt_FencesReclaimsAndRecordsUnpublished(t *testing.T) {
	s := newCreateSuite(t)
	s.clone(activities.CloneCommitted)
	s.env.OnActivity(a.Write, mock.Anything, mock.Anything).Return(activities.Verdict{State: activities.Ambiguous}, nil)
	s.env.OnActivity(a.ReadBack, mock.Anything, mock.Anything).Return(activities.Verdict{State: activities.Ambiguous}, nil)
	s.onRef(a.Fence, activities.Fenced)
	s.env.RegisterDelayedCallback(s.env.CancelWorkflow, 30*time.Second)
	s.env.ExecuteWorkflow(workflows.CreateBranchName, workflows.CreateBranchInput{Graph: "g", Branch: "feature", OpID: "op1"})
	if err := s.env.GetWorkflowError(); err == nil {
		t.Fatalf("a cancelled create completed as if nothing happened")
	}
	if s.called("Fence") != 1 || s.called("ReclaimClone") != 1 {
		t.Fatalf("fences %d, reclaims %d; want the in-doubt incarnation fenced and reclaimed", s.called("Fence"), s.called("ReclaimClone"))
	}
	fin := s.finished()
	if len(fin) != 1 || fin[0].Outcome != outcome.Unpublished || fin[0].Owner.OpID != "op1" {
		t.Fatalf("ledger told %+v, want unpublished for op1, once", fin)
	}
}

func TestCreateBranch_CancelledDuringPrepare_RecordsTheEndWithoutAFence(t *testing.T) {
	env := newTestEnv()
	env.OnActivity(a.PrepareCreate, mock.Anything, mock.Anything).Return(activities.PrepareCreateResult{}, errors.New("postgres down"))
	var finished *activities.FinishInput
	env.OnActivity(a.Finish, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.FinishInput) (activities.FinishResult, error) {
		finished = &in
		return activities.FinishResult{}, nil
	})
	fenced := 0
	env.OnActivity(a.Fence, mock.Anything, mock.Anything).Return(func(context.Context, activities.WriteInput) (activities.Verdict, error) {
		fenced++
		return activities.Verdict{State: activities.Fenced}, nil
	}).Maybe()
	env.RegisterDelayedCallback(env.CancelWorkflow, 20*time.Second)
	env.ExecuteWorkflow(workflows.CreateBranchName, workflows.CreateBranchInput{Graph: "g", Branch: "feature", OpID: "op2"})
	if err := env.GetWorkflowError(); err == nil {
		t.Fatalf("a cancelled create completed")
	}
	if finished == nil || finished.Outcome != "" || finished.Owner.OpID != "op2" {
		t.Fatalf("ledger told %+v, want the operation recorded as failed", finished)
	}
	if fenced != 0 {
		t.Fatalf("fenced %d times although no incarnation was prepared", fenced)
	}
}

// TestCreateBranch_NameChecks proves a create refuses names that storage or
// the ledger already holds, on the real stack.
func TestCreateBranch_NameChecks(t *testing.T) {
	r := newRig(t)
	r.startWorker()

	t.Run("LiveInStorageButUnknownToLedger_Conflict", func(t *testing.T) {
		// A live branch written by another tool: the ledger never saw it.
		fork := r.handBranch("legacy", r.main, time.Now(), true)
		native := format.NativeName("legacy", fork.ID.Tree)
		_, err := r.gc.CreateBranch(r.ctx, client.CreateBranchRequest{Graph: r.graph, Branch: "legacy"})
		if !errors.Is(err, outcome.ErrConflict) {
			t.Fatalf("create over a live ref unknown to the ledger: %v, want conflict", err)
		}
		if live := r.liveNatives("legacy"); len(live) != 1 || live[0] != native {
			t.Fatalf("live refs %v, want only the existing %s", live, native)
		}
		if incs := r.incarnations("legacy"); len(incs) != 0 {
			t.Fatalf("witnesses %v written for a refused create", incs)
		}
	})

	t.Run("PrefixRelativesOfLiveBranches_Conflict", func(t *testing.T) {
		for _, name := range []string{"team", "proj/x"} {
			if _, err := r.gc.CreateBranch(r.ctx, client.CreateBranchRequest{Graph: r.graph, Branch: name}); err != nil {
				t.Fatalf("create %s: %v", name, err)
			}
		}
		for _, name := range []string{"team/a", "proj"} { // a descendant and an ancestor
			_, err := r.gc.CreateBranch(r.ctx, client.CreateBranchRequest{Graph: r.graph, Branch: name})
			if !errors.Is(err, outcome.ErrConflict) {
				t.Fatalf("create %s beside a live prefix relative: %v, want conflict", name, err)
			}
			if live := r.liveNatives(name); len(live) != 0 {
				t.Fatalf("%s went live: %v", name, live)
			}
		}
		// Names that merely share characters are fine.
		if _, err := r.gc.CreateBranch(r.ctx, client.CreateBranchRequest{Graph: r.graph, Branch: "teammate"}); err != nil {
			t.Fatalf("create teammate beside team: %v", err)
		}
	})

	t.Run("ExistingBranch_Conflict", func(t *testing.T) {
		if _, err := r.gc.CreateBranch(r.ctx, client.CreateBranchRequest{Graph: r.graph, Branch: "twice"}); err != nil {
			t.Fatal(err)
		}
		_, err := r.gc.CreateBranch(r.ctx, client.CreateBranchRequest{Graph: r.graph, Branch: "twice"})
		if !errors.Is(err, outcome.ErrConflict) {
			t.Fatalf("second create: %v, want conflict", err)
		}
		if live := r.liveNatives("twice"); len(live) != 1 {
			t.Fatalf("live refs %v, want one", live)
		}
	})

	t.Run("OperationIdOfAnotherRequest_ConflictAndTheirRecordKept", func(t *testing.T) {
		first, err := r.gc.CreateBranch(r.ctx, client.CreateBranchRequest{Graph: r.graph, Branch: "one", IdempotencyKey: "shared-key"})
		if err != nil {
			t.Fatal(err)
		}
		_, err = r.gc.CreateBranch(r.ctx, client.CreateBranchRequest{Graph: r.graph, Branch: "two", IdempotencyKey: "shared-key"})
		if !errors.Is(err, outcome.ErrConflict) {
			t.Fatalf("reused key: %v, want conflict", err)
		}
		if op := r.operation(first.OpID); op.Outcome != catalog.OutcomeCreated {
			t.Fatalf("the first request's record became %s, want created", op.Outcome)
		}
		if live := r.liveNatives("two"); len(live) != 0 {
			t.Fatalf("two went live: %v", live)
		}
	})
}
