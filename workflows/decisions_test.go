package workflows_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	sdkclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/searchattr"
	"github.com/graftworks/graft/workflows"
)

// Unit tier: one workflow run with every activity mocked, recording each activity
// attempt it started — name, input and workflow time — in order. Tests of this tier carry "Decision" in
// their names (go test -run Decision).

// decisionWorkflowID is the workflow id of every decision run; an operation
// started without an op id takes it as its op id.
const decisionWorkflowID = "wf-decision"

// a is the typed nil receiver the mocks name activities through.
var a *activities.Activities

// newTestEnv returns a test environment with graft's workflows registered and quiet logs.
func newTestEnv() *testsuite.TestWorkflowEnvironment {
	var ts testsuite.WorkflowTestSuite
	ts.SetLogger(quietLogger())
	env := ts.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(workflows.CreateBranch, workflow.RegisterOptions{Name: workflows.CreateBranchName})
	env.RegisterActivity(&activities.Activities{})
	return env
}

// step is one activity attempt a workflow started.
type step struct {
	name string
	// in is the activity's input, a Go value whether it ran as a local activity or an
	// ordinary one.
	in any
	at time.Time
	// local: the step ran as a local activity, holding the workflow task.
	local bool
}

// decodedInput decodes the payloads of an ordinary activity's input into the type of
// the activity method's input, as a local activity's listener sees it.
func decodedInput(t *testing.T, name string, args converter.EncodedValues) any {
	m := reflect.ValueOf(a).MethodByName(name)
	if !m.IsValid() || m.Type().NumIn() < 2 || !args.HasValues() {
		return args
	}
	ptr := reflect.New(m.Type().In(1))
	if err := args.Get(ptr.Interface()); err != nil {
		t.Fatalf("decode the input of %s: %v", name, err)
	}
	return ptr.Elem().Interface()
}

type decisionEnv struct {
	t     *testing.T
	env   *testsuite.TestWorkflowEnvironment
	name  string
	steps []step
	// ended is the workflow's failure when its outcome was not a success.
	ended *temporal.ApplicationError
}

// newDecisionEnv returns an environment running the workflow registered as
// name, with Finish and Progress answering success unless a test says otherwise.
func newDecisionEnv(t *testing.T, name string, wf any) *decisionEnv {
	t.Helper()
	d := &decisionEnv{t: t, env: newTestEnv(), name: name}
	d.env.RegisterWorkflowWithOptions(wf, workflow.RegisterOptions{Name: name})
	d.env.SetStartWorkflowOptions(sdkclient.StartWorkflowOptions{ID: decisionWorkflowID})
	d.env.SetOnLocalActivityStartedListener(func(info *activity.Info, _ context.Context, args []any) {
		var in any
		if len(args) > 0 {
			in = args[0]
		}
		d.steps = append(d.steps, step{name: info.ActivityType.Name, in: in, at: d.env.Now(), local: true})
	})
	d.env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, args converter.EncodedValues) {
		d.steps = append(d.steps, step{name: info.ActivityType.Name, in: decodedInput(t, info.ActivityType.Name, args), at: d.env.Now()})
	})
	d.env.OnActivity(a.Finish, mock.Anything, mock.Anything).Return(activities.FinishResult{Owned: true}, nil).Maybe()
	d.env.OnActivity(a.Progress, mock.Anything, mock.Anything).Return(nil).Maybe()
	return d
}

// run executes the workflow with in, decodes its result into res and
// returns the workflow's error.
func (d *decisionEnv) run(in, res any) error {
	d.t.Helper()
	d.env.ExecuteWorkflow(d.name, in)
	if !d.env.IsWorkflowCompleted() {
		d.t.Fatalf("workflow %s did not complete", d.name)
	}
	if err := d.env.GetWorkflowError(); err != nil {
		// A definitive outcome that is not a success fails the workflow with the
		// result as the ApplicationError's detail (docs/workflows.md).
		var app *temporal.ApplicationError
		if errors.As(err, &app) && outcome.Outcome(app.Type()).Valid() {
			if derr := app.Details(res); derr != nil {
				d.t.Fatalf("decode the result from the failure: %v", derr)
			}
			d.ended = app
			return nil
		}
		return err
	}
	if err := d.env.GetWorkflowResult(res); err != nil {
		d.t.Fatalf("decode result: %v", err)
	}
	return nil
}

// mustRun is run for a workflow that must end without error.
func (d *decisionEnv) mustRun(in, res any) {
	d.t.Helper()
	if err := d.run(in, res); err != nil {
		d.t.Fatalf("workflow %s failed: %v", d.name, err)
	}
}

// answer makes the activity fn return results, one per call, in order.
func answer[R any](d *decisionEnv, fn any, results ...R) {
	for _, r := range results {
		d.env.OnActivity(fn, mock.Anything, mock.Anything).Return(r, nil).Once()
	}
}

// failWith makes every call of the activity fn (whose result is R) fail with err.
func failWith[R any](d *decisionEnv, fn any, err error) {
	d.env.OnActivity(fn, mock.Anything, mock.Anything).Return(*new(R), err)
}

// permanent is an activity error no retry policy retries.
func permanent(msg string) error {
	return temporal.NewNonRetryableApplicationError(msg, "DecisionTest", nil)
}

// transient is an activity error the retry policy retries.
var transient = errors.New("store unavailable")

// count is the number of attempts of the activity name.
func (d *decisionEnv) count(name string) int {
	n := 0
	for _, s := range d.steps {
		if s.name == name {
			n++
		}
	}
	return n
}

// names lists the activities started, in order.
func (d *decisionEnv) names() []string {
	out := make([]string, 0, len(d.steps))
	for _, s := range d.steps {
		out = append(out, s.name)
	}
	return out
}

// stepsOf returns the attempts of the activity name.
func (d *decisionEnv) stepsOf(name string) []step {
	var out []step
	for _, s := range d.steps {
		if s.name == name {
			out = append(out, s)
		}
	}
	return out
}

// inputsOf returns the inputs of every attempt of the local activity name.
func inputsOf[T any](d *decisionEnv, name string) []T {
	d.t.Helper()
	var out []T
	for _, s := range d.stepsOf(name) {
		in, ok := s.in.(T)
		if !ok {
			d.t.Fatalf("input of %s is %T, want %T", name, s.in, *new(T))
		}
		out = append(out, in)
	}
	return out
}

// first returns the index of the first attempt of name, or -1.
func (d *decisionEnv) first(name string) int { return slices.Index(d.names(), name) }

// last returns the index of the last attempt of name, or -1.
func (d *decisionEnv) last(name string) int {
	n := d.names()
	for i := len(n) - 1; i >= 0; i-- {
		if n[i] == name {
			return i
		}
	}
	return -1
}

// never fails the test if any of the activities names ran.
func (d *decisionEnv) never(names ...string) {
	d.t.Helper()
	for _, n := range names {
		if c := d.count(n); c != 0 {
			d.t.Fatalf("%s ran %d times, want never; steps %v", n, c, d.names())
		}
	}
}

// finishedOnce fails the test unless the operation was finished in the
// ledger exactly once, as op id opID of kind with outcome out, by this run;
// and unless the workflow's end has the shape of its outcome: completed on a
// success, failed with an ApplicationError of the outcome's type otherwise.
func (d *decisionEnv) finishedOnce(opID string, kind catalog.OperationKind, out outcome.Outcome) activities.FinishInput {
	d.t.Helper()
	fin := inputsOf[activities.FinishInput](d, "Finish")
	if len(fin) != 1 {
		d.t.Fatalf("finished %d times (%+v), want once", len(fin), fin)
	}
	got := fin[0]
	if got.Owner.OpID != opID || got.Kind != kind || got.Outcome != out || got.Owner.Run == "" {
		d.t.Fatalf("finish %+v, want op %s of kind %s with outcome %q by this run", got, opID, kind, out)
	}
	switch {
	case out != "" && !out.Success() && (d.ended == nil || d.ended.Type() != string(out)):
		d.t.Fatalf("outcome %s ended the workflow with %v, want an ApplicationError of type %s", out, d.ended, out)
	case out.Success() && d.ended != nil:
		d.t.Fatalf("outcome %s failed the workflow with %v, want it completed", out, d.ended)
	}
	return got
}

// written returns the specs of every Write attempt, in order.
func (d *decisionEnv) written() []activities.WriteSpec {
	var out []activities.WriteSpec
	for _, in := range inputsOf[activities.WriteInput](d, "Write") {
		out = append(out, in.Spec)
	}
	return out
}

// verdict is a Write, ReadBack or Fence answer.
func verdict(st activities.WriteState, msg string) activities.Verdict {
	return activities.Verdict{State: st, Message: msg}
}

// pauses returns the workflow time between consecutive attempts of name.
func (d *decisionEnv) pauses(name string) []time.Duration {
	var out []time.Duration
	s := d.stepsOf(name)
	for i := 1; i < len(s); i++ {
		out = append(out, s[i].at.Sub(s[i-1].at))
	}
	return out
}

// inDoubtMarks counts the Progress calls that recorded the operation in doubt for a settle.
func (d *decisionEnv) inDoubtMarks() int {
	n := 0
	for _, in := range inputsOf[activities.ProgressInput](d, "Progress") {
		if in.InDoubt && in.Phase == "settle" {
			n++
		}
	}
	return n
}

// A prepare that keeps failing (the store or Postgres away) ends the operation before any
// write, recording the failure in the ledger once.
func TestDecision_PrepareKeepsFailing_FailsAndRecordsTheFailure(t *testing.T) {
	for _, c := range []struct {
		wf, prepare, opID string
		fn                any
		run               any
		fail              func(d *decisionEnv)
		in, res           any
		kind              catalog.OperationKind
		never             []string
	}{
		{wf: workflows.DeleteBranchName, run: workflows.DeleteBranch, prepare: "PrepareDeleteBranch", in: deleteBranchInput, res: &workflows.DeleteBranchResult{},
			fail: func(d *decisionEnv) {
				failWith[activities.PrepareDeleteBranchResult](d, a.PrepareDeleteBranch, transient)
			},
			opID: "op-delete", kind: catalog.OpDeleteBranch},
		{wf: workflows.CreateTagName, run: workflows.CreateTag, prepare: "PrepareTag", in: createTagInput, res: &workflows.CreateTagResult{},
			fail: func(d *decisionEnv) { failWith[activities.PrepareTagResult](d, a.PrepareTag, transient) },
			opID: "op-tag", kind: catalog.OpTag},
		{wf: workflows.DeleteTagName, run: workflows.DeleteTag, prepare: "PrepareDeleteTag", in: deleteTagInput, res: &workflows.DeleteTagResult{},
			fail: func(d *decisionEnv) { failWith[activities.PrepareDeleteTagResult](d, a.PrepareDeleteTag, transient) },
			opID: "op-untag", kind: catalog.OpTag},
		{wf: workflows.RepairBranchName, run: workflows.RepairBranch, prepare: "PrepareRepair", in: repairInput, res: &workflows.RepairBranchResult{},
			fail: func(d *decisionEnv) { failWith[activities.PrepareRepairResult](d, a.PrepareRepair, transient) },
			opID: "op-repair", kind: catalog.OpDeleteBranch, never: []string{"AdoptKept"}},
		{wf: workflows.RestoreName, run: workflows.Restore, prepare: "PrepareRestore", in: restoreInput, res: &workflows.RestoreResult{},
			fail: func(d *decisionEnv) { failWith[activities.PrepareRestoreResult](d, a.PrepareRestore, transient) },
			opID: "op-restore", kind: catalog.OpRestore, never: []string{"PlanRestore"}},
	} {
		t.Run(c.wf, func(t *testing.T) {
			d := newDecisionEnv(t, c.wf, c.run)
			c.fail(d)
			if err := d.run(c.in, c.res); err == nil {
				t.Fatalf("workflow succeeded although prepare kept failing")
			}
			if d.count(c.prepare) < 2 {
				t.Fatalf("prepare ran %d times, want it retried", d.count(c.prepare))
			}
			d.never(append(c.never, "Write")...)
			d.finishedOnce(c.opID, c.kind, "")
		})
	}
}

// A write step that fails outright leaves a write that may have landed: the kernel fences
// it once before the end, so the operation ends with the fence's verdict, never in doubt.
func TestDecision_WriteStepFails_PendingWriteFencedOnceBeforeTheEnd(t *testing.T) {
	for _, c := range []struct {
		wf, opID string
		run      any
		prepare  func(d *decisionEnv)
		spec     activities.WriteSpec
		fenced   activities.Verdict
		in, res  any
		kind     catalog.OperationKind
		want     outcome.Outcome
	}{
		// A retire that may have landed is completed by its fence.
		{wf: workflows.DeleteBranchName, run: workflows.DeleteBranch, in: deleteBranchInput, res: &workflows.DeleteBranchResult{},
			prepare: func(d *decisionEnv) { answer(d, a.PrepareDeleteBranch, deletePrepared) }, spec: deletePrepared.Spec,
			fenced: verdict(activities.Landed, ""), opID: "op-delete", kind: catalog.OpDeleteBranch, want: outcome.Deleted},
		{wf: workflows.DeleteTagName, run: workflows.DeleteTag, in: deleteTagInput, res: &workflows.DeleteTagResult{},
			prepare: func(d *decisionEnv) { answer(d, a.PrepareDeleteTag, deleteTagPrepared) }, spec: deleteTagPrepared.Spec,
			fenced: verdict(activities.Landed, ""), opID: "op-untag", kind: catalog.OpTag, want: outcome.Deleted},
		// A tag put that may have landed is fenced: unpublished.
		{wf: workflows.CreateTagName, run: workflows.CreateTag, in: createTagInput, res: &workflows.CreateTagResult{},
			prepare: func(d *decisionEnv) { answer(d, a.PrepareTag, tagPrepared) }, spec: tagPrepared.Spec,
			fenced: verdict(activities.Fenced, "a retired tag holds the name"), opID: "op-tag", kind: catalog.OpTag, want: outcome.Unpublished},
	} {
		t.Run(c.wf, func(t *testing.T) {
			d := newDecisionEnv(t, c.wf, c.run)
			c.prepare(d)
			failWith[activities.Verdict](d, a.Write, permanent("a bug"))
			answer(d, a.Fence, c.fenced)
			if err := d.run(c.in, c.res); err != nil || outcomeOf(c.res) != c.want {
				t.Fatalf("result %+v, %v; want %s: a write that may have landed is fenced, never left in doubt", c.res, err, c.want)
			}
			if f := inputsOf[activities.WriteInput](d, "Fence"); len(f) != 1 || !reflect.DeepEqual(f[0].Spec, c.spec) {
				t.Fatalf("fences %+v, want the pending write fenced once", f)
			}
			d.finishedOnce(c.opID, c.kind, c.want)
		})
	}
}

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

// Unit tier: DeleteBranch's decisions with every activity mocked. The
// real-stack tier is merge_restore_tags_test.go.

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

// TestDeleteBranchDecision_RetireRecordedItsEnd_NoFinishStep_TheRecordedResultIsReturned
// proves a delete whose retire recorded the operation's end (activities.Write, given the
// result should it land) runs no finish step, and returns the result the retire carried,
// settle re-issues counted.
func TestDeleteBranchDecision_RetireRecordedItsEnd_NoFinishStep_TheRecordedResultIsReturned(t *testing.T) {
	d := newDecisionEnv(t, workflows.DeleteBranchName, workflows.DeleteBranch)
	answer(d, a.PrepareDeleteBranch, deletePrepared)
	answer(d, a.Write, verdict(activities.Ambiguous, "answer lost"), activities.Verdict{State: activities.Landed, Recorded: true})
	d.env.OnActivity(a.ReadBack, mock.Anything, mock.Anything).Return(verdict(activities.Ambiguous, "still live"), nil).Maybe()
	var res workflows.DeleteBranchResult
	d.mustRun(deleteBranchInput, &res)
	if res.Outcome != workflows.OutcomeDeleted || res.Native != deletePrepared.Native || res.Head != "F-3" || res.SettleAttempts != 1 {
		t.Fatalf("result %+v, want %s deleted at F-3 after one re-issue", res, deletePrepared.Native)
	}
	d.never("Finish")
	writes := inputsOf[activities.WriteInput](d, "Write")
	var carried workflows.DeleteBranchResult
	if err := json.Unmarshal(writes[len(writes)-1].Result, &carried); err != nil || !reflect.DeepEqual(carried, res) {
		t.Fatalf("the landing retire carried %+v (%v), want the result the delete returned, %+v", carried, err, res)
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

// Unit tier: CreateTag's and DeleteTag's decisions with every activity
// mocked. The real-stack tier is merge_restore_tags_test.go.

var (
	createTagInput = workflows.CreateTagInput{Graph: "g", Name: "v1", Branch: "main", OpID: "op-tag"}
	tagPrepared    = activities.PrepareTagResult{Owned: true, Commit: "T-4",
		Spec: activities.WriteSpec{Kind: activities.WriteTag, Graph: "g", Body: []byte("tag v1 of T-4"), Landed: outcome.Created}}
	// tagFound is a put that found another operation's live tag of the same commit.
	tagFound = activities.WriteState("found")
)

func runCreateTag(t *testing.T, prep activities.PrepareTagResult, puts ...activities.WriteState) (workflows.CreateTagResult, *decisionEnv) {
	t.Helper()
	d := newDecisionEnv(t, workflows.CreateTagName, workflows.CreateTag)
	answer(d, a.PrepareTag, prep)
	for _, st := range puts {
		v := verdict(st, "tag "+string(st))
		if st == tagFound {
			v = activities.Verdict{State: activities.Landed, Equivalent: true, Message: "tag exists"}
		}
		answer(d, a.Write, v)
	}
	d.env.OnActivity(a.ReadBack, mock.Anything, mock.Anything).Return(verdict(activities.Ambiguous, "not there yet"), nil).Maybe()
	var res workflows.CreateTagResult
	d.mustRun(createTagInput, &res)
	return res, d
}

func TestCreateTagDecision_PrepareEndsEarly_OutcomePassedThroughNothingPut(t *testing.T) {
	for _, o := range []outcome.Outcome{outcome.NotFound, outcome.NotRetained, outcome.Invalid} {
		t.Run(string(o), func(t *testing.T) {
			res, d := runCreateTag(t, activities.PrepareTagResult{Outcome: o, Message: "why", Owned: true, Commit: "T-4"})
			if res.Outcome != o || res.Message != "why" || res.Commit != "T-4" {
				t.Fatalf("result %+v, want %s", res, o)
			}
			d.never("Write")
			d.finishedOnce("op-tag", catalog.OpTag, o)
		})
	}
}

func TestCreateTagDecision_OpIDOfAnotherRequest_LeavesItsOperationUnfinished(t *testing.T) {
	res, d := runCreateTag(t, activities.PrepareTagResult{Outcome: outcome.Conflict, Owned: false})
	if res.Outcome != outcome.Conflict {
		t.Fatalf("result %+v, want conflict", res)
	}
	d.never("Write", "Finish")
}

func TestCreateTagDecision_TagStored_CreatedWithThePreparedBytes(t *testing.T) {
	res, d := runCreateTag(t, tagPrepared, activities.Landed)
	if res.Outcome != outcome.Created || res.Existing || res.Commit != "T-4" || res.Name != "v1" {
		t.Fatalf("result %+v, want created (not existing) on T-4", res)
	}
	p := inputsOf[activities.PrepareTagInput](d, "PrepareTag")[0]
	if p.Name != "v1" || p.Branch != "main" || p.Commit != "" || p.OpID != "op-tag" {
		t.Fatalf("prepare input %+v", p)
	}
	got := d.written()
	if len(got) != 1 || !reflect.DeepEqual(got[0], tagPrepared.Spec) {
		t.Fatalf("puts %+v, want one %+v", got, tagPrepared.Spec)
	}
	d.finishedOnce("op-tag", catalog.OpTag, outcome.Created)
}

func TestCreateTagDecision_SameTagAlreadyThere_CreatedAndExisting(t *testing.T) {
	res, d := runCreateTag(t, tagPrepared, tagFound)
	if res.Outcome != outcome.Created || !res.Existing || res.Message != "tag exists" {
		t.Fatalf("result %+v, want created and existing", res)
	}
	d.finishedOnce("op-tag", catalog.OpTag, outcome.Created)
}

func TestCreateTagDecision_TagNotStored_OutcomeOfThePut(t *testing.T) {
	for st, want := range map[activities.WriteState]outcome.Outcome{
		activities.Other: outcome.Conflict, activities.Refused: outcome.Refused, activities.Invalid: outcome.Invalid,
	} {
		t.Run(string(st), func(t *testing.T) {
			res, d := runCreateTag(t, tagPrepared, st)
			if res.Outcome != want || res.Existing || res.Message != "tag "+string(st) {
				t.Fatalf("result %+v, want %s", res, want)
			}
			d.finishedOnce("op-tag", catalog.OpTag, want)
		})
	}
}

func TestCreateTagDecision_PutInDoubt_MarkedAndSettledByReissuingTheSameBytes(t *testing.T) {
	res, d := runCreateTag(t, tagPrepared, activities.Ambiguous, activities.Ambiguous, activities.Landed)
	if res.Outcome != outcome.Created || res.SettleAttempts != 2 {
		t.Fatalf("result %+v, want created after 2 re-issues", res)
	}
	if d.inDoubtMarks() != 1 {
		t.Fatalf("marked in doubt %d times, want once", d.inDoubtMarks())
	}
	for i, p := range inputsOf[activities.WriteInput](d, "Write") {
		if !bytes.Equal(p.Spec.Body, tagPrepared.Spec.Body) || p.Attempt != i {
			t.Fatalf("put %d %+v: want the prepared bytes, attempt %d", i, p, i)
		}
	}
	d.finishedOnce("op-tag", catalog.OpTag, outcome.Created)
}

// A caller waiting on an in-doubt operation must see in_doubt: once the operation is
// recorded in doubt its re-issues and the record after them run as ordinary activities,
// which leave the workflow task free to answer the status query while the store hangs.
func TestDecision_InDoubtWrite_ReissuesLeaveTheStatusAnswerable(t *testing.T) {
	_, d := runCreateTag(t, tagPrepared, activities.Ambiguous, activities.Ambiguous, activities.Landed)
	var kinds []string
	for _, s := range d.steps {
		kind := "ordinary"
		if s.local {
			kind = "local"
		}
		kinds = append(kinds, s.name+" "+kind)
	}
	mark := slices.IndexFunc(d.steps, func(s step) bool {
		in, ok := s.in.(activities.ProgressInput)
		return ok && in.InDoubt
	})
	if mark < 0 {
		t.Fatalf("steps %v: the operation was never recorded in doubt", kinds)
	}
	reissues := 0
	for i, s := range d.steps {
		inDoubt := i > mark && s.name == "Write"
		if inDoubt {
			reissues++
		}
		if i <= mark && !s.local || inDoubt && s.local {
			t.Fatalf("steps %v: before the in-doubt record every step is local, after it every re-issue ordinary", kinds)
		}
	}
	if reissues != 2 {
		t.Fatalf("steps %v: %d re-issues, want 2", kinds, reissues)
	}
}

// The client sets a run's graph, operation and branch as it starts it: the run upserts
// only what its start did not set (a run started otherwise), then its outcome.
func TestDecision_SearchAttributesTheStartSet_AreNotUpsertedAgain(t *testing.T) {
	for _, tc := range []struct {
		start []temporal.SearchAttributeUpdate
		want  []string
	}{
		{[]temporal.SearchAttributeUpdate{searchattr.Graph.ValueSet("g"), searchattr.Operation.ValueSet("tag"), searchattr.Branch.ValueSet("main")},
			[]string{searchattr.OutcomeName}},
		{[]temporal.SearchAttributeUpdate{searchattr.Graph.ValueSet("g")},
			[]string{searchattr.BranchName, searchattr.OperationName, searchattr.OutcomeName}},
		{nil, []string{searchattr.BranchName, searchattr.GraphName, searchattr.OperationName, searchattr.OutcomeName}},
	} {
		d := newDecisionEnv(t, workflows.CreateTagName, workflows.CreateTag)
		if err := d.env.SetTypedSearchAttributesOnStart(temporal.NewSearchAttributes(tc.start...)); err != nil {
			t.Fatal(err)
		}
		var upserted []string
		d.env.OnUpsertTypedSearchAttributes(mock.Anything).Run(func(args mock.Arguments) {
			for k := range args.Get(0).(temporal.SearchAttributes).GetUntypedValues() {
				upserted = append(upserted, k.GetName())
			}
		}).Return(nil)
		answer(d, a.PrepareTag, tagPrepared)
		answer(d, a.Write, verdict(activities.Landed, "tag landed"))
		var res workflows.CreateTagResult
		d.mustRun(createTagInput, &res)
		slices.Sort(upserted)
		if res.Outcome != outcome.Created || !slices.Equal(upserted, tc.want) {
			t.Fatalf("started with %d attributes: %s, upserted %v; want created, upserting %v", len(tc.start), res.Outcome, upserted, tc.want)
		}
	}
}

var (
	deleteTagInput    = workflows.DeleteTagInput{Graph: "g", Name: "v1", OpID: "op-untag"}
	deleteTagPrepared = activities.PrepareDeleteTagResult{Owned: true, Commit: "T-4",
		Spec: activities.WriteSpec{Kind: activities.WriteRetireTag, Graph: "g", Name: "v1", ETag: `"t1"`, Landed: outcome.Deleted}}
)

func runDeleteTag(t *testing.T, prep activities.PrepareDeleteTagResult, retires ...activities.WriteState) (workflows.DeleteTagResult, *decisionEnv) {
	t.Helper()
	d := newDecisionEnv(t, workflows.DeleteTagName, workflows.DeleteTag)
	answer(d, a.PrepareDeleteTag, prep)
	for _, st := range retires {
		answer(d, a.Write, verdict(st, "retire "+string(st)))
	}
	d.env.OnActivity(a.ReadBack, mock.Anything, mock.Anything).Return(verdict(activities.Ambiguous, "still live"), nil).Maybe()
	var res workflows.DeleteTagResult
	d.mustRun(deleteTagInput, &res)
	return res, d
}

func TestDeleteTagDecision_PrepareEndsEarly_OutcomePassedThroughNothingRetired(t *testing.T) {
	res, d := runDeleteTag(t, activities.PrepareDeleteTagResult{Outcome: outcome.NotFound, Message: "already deleted", Owned: true, Commit: "T-4"})
	if res.Outcome != outcome.NotFound || res.Message != "already deleted" || res.Commit != "T-4" {
		t.Fatalf("result %+v, want not found", res)
	}
	d.never("Write")
	d.finishedOnce("op-untag", catalog.OpTag, outcome.NotFound)
}

func TestDeleteTagDecision_OpIDOfAnotherRequest_LeavesItsOperationUnfinished(t *testing.T) {
	res, d := runDeleteTag(t, activities.PrepareDeleteTagResult{Outcome: outcome.Conflict, Owned: false})
	if res.Outcome != outcome.Conflict {
		t.Fatalf("result %+v, want conflict", res)
	}
	d.never("Write", "Finish")
}

func TestDeleteTagDecision_RetiredByThisOperationBefore_DeletedWithoutASwap(t *testing.T) {
	prep := deleteTagPrepared
	prep.Retired = true
	res, d := runDeleteTag(t, prep)
	if res.Outcome != workflows.OutcomeDeleted || res.Commit != "T-4" {
		t.Fatalf("result %+v, want deleted", res)
	}
	d.never("Write")
	d.finishedOnce("op-untag", catalog.OpTag, outcome.Deleted)
}

func TestDeleteTagDecision_RetireDone_DeletedBySwappingTheReadTag(t *testing.T) {
	res, d := runDeleteTag(t, deleteTagPrepared, activities.Landed)
	if res.Outcome != workflows.OutcomeDeleted || res.Commit != "T-4" {
		t.Fatalf("result %+v, want deleted", res)
	}
	got := d.written()
	if len(got) != 1 || !reflect.DeepEqual(got[0], deleteTagPrepared.Spec) {
		t.Fatalf("retires %+v, want one %+v", got, deleteTagPrepared.Spec)
	}
	d.finishedOnce("op-untag", catalog.OpTag, outcome.Deleted)
}

func TestDeleteTagDecision_RetireInDoubt_MarkedAndSettledByReissue(t *testing.T) {
	res, d := runDeleteTag(t, deleteTagPrepared, activities.Ambiguous, activities.Landed)
	if res.Outcome != workflows.OutcomeDeleted || res.SettleAttempts != 1 {
		t.Fatalf("result %+v, want deleted after 1 re-issue", res)
	}
	ret := inputsOf[activities.WriteInput](d, "Write")
	if d.inDoubtMarks() != 1 || len(ret) != 2 || ret[1].Spec.ETag != deleteTagPrepared.Spec.ETag || ret[1].Attempt != 1 {
		t.Fatalf("steps %v, retires %+v: want one mark and the same swap re-issued", d.names(), ret)
	}
}

func TestDeleteTagDecision_SwapNotDone_OutcomeOfTheSwap(t *testing.T) {
	for st, want := range map[activities.WriteState]outcome.Outcome{
		activities.Other: outcome.Conflict, activities.Refused: outcome.Refused,
	} {
		t.Run(string(st), func(t *testing.T) {
			res, d := runDeleteTag(t, deleteTagPrepared, st)
			if res.Outcome != want || !strings.Contains(res.Message, "retire "+string(st)) {
				t.Fatalf("result %+v, want %s carrying the swap's message", res, want)
			}
			d.finishedOnce("op-untag", catalog.OpTag, want)
		})
	}
}

// Unit tier: RepairBranch's decisions with every activity mocked. The
// real-stack tier is merge_restore_tags_test.go.

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

// Unit tier: Restore's decisions with every activity mocked. The real-stack
// tier is merge_restore_tags_test.go.

var restoreInput = workflows.RestoreInput{Graph: "g", Branch: "main", To: workflows.RestoreTarget{Commit: "T-1"}, OpID: "op-restore"}

var restoreTime = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// restorePrepared is a prepare that found T-1 retained and recorded the operation.
var restorePrepared = activities.PrepareRestoreResult{Owned: true, Target: "T-1", Time: restoreTime}

// restorePlan plans a restore commit on head, backed up by a tag named after head.
func restorePlan(head, commit string) activities.PlanRestoreResult {
	return activities.PlanRestoreResult{Head: head, BackupTag: "backup/main/" + head,
		Tag:    activities.WriteSpec{Kind: activities.WriteTag, Graph: "g", Body: []byte("tag of " + head)},
		Commit: commit, Spec: activities.WriteSpec{Kind: activities.WritePublish, Graph: "g", Body: []byte("body of " + commit), Landed: outcome.Done}}
}

type restoreAnswers struct {
	prep  activities.PrepareRestoreResult
	plans []activities.PlanRestoreResult
	tags  []activities.WriteState
	puts  []activities.WriteState
}

// ofKind selects the writes of one kind.
func ofKind(k activities.WriteKind) any {
	return mock.MatchedBy(func(in activities.WriteInput) bool { return in.Spec.Kind == k })
}

func runRestore(t *testing.T, in workflows.RestoreInput, ans restoreAnswers) (workflows.RestoreResult, *decisionEnv) {
	t.Helper()
	d := newDecisionEnv(t, workflows.RestoreName, workflows.Restore)
	answer(d, a.PrepareRestore, ans.prep)
	answer(d, a.PlanRestore, ans.plans...)
	for _, st := range ans.tags {
		v := verdict(st, "tag "+string(st))
		if st == tagFound {
			v = activities.Verdict{State: activities.Landed, Equivalent: true, Message: "tag exists"}
		}
		d.env.OnActivity(a.Write, mock.Anything, ofKind(activities.WriteTag)).Return(v, nil).Once()
	}
	for _, st := range ans.puts {
		d.env.OnActivity(a.Write, mock.Anything, ofKind(activities.WritePublish)).Return(verdict(st, "put "+string(st)), nil).Once()
	}
	d.env.OnActivity(a.ReadBack, mock.Anything, mock.Anything).Return(verdict(activities.Ambiguous, "not there yet"), nil).Maybe()
	var res workflows.RestoreResult
	d.mustRun(in, &res)
	return res, d
}

// writesOf returns the write inputs of one kind, in order.
func (d *decisionEnv) writesOf(k activities.WriteKind) []activities.WriteInput {
	var out []activities.WriteInput
	for _, in := range inputsOf[activities.WriteInput](d, "Write") {
		if in.Spec.Kind == k {
			out = append(out, in)
		}
	}
	return out
}

// kindNames lists the activities started, each Write named with its kind.
func (d *decisionEnv) kindNames() []string {
	var out []string
	for _, st := range d.steps {
		if in, ok := st.in.(activities.WriteInput); ok && st.name == "Write" {
			out = append(out, "Write "+string(in.Spec.Kind))
			continue
		}
		out = append(out, st.name)
	}
	return out
}

func TestRestoreDecision_PrepareEndsEarly_OutcomePassedThroughNothingWritten(t *testing.T) {
	for _, o := range []outcome.Outcome{outcome.NotRetained, outcome.NotFound, outcome.Invalid} {
		t.Run(string(o), func(t *testing.T) {
			res, d := runRestore(t, restoreInput, restoreAnswers{prep: activities.PrepareRestoreResult{Outcome: o, Message: "why", Owned: true}})
			if res.Outcome != o || res.Message != "why" || res.Commit != "" {
				t.Fatalf("result %+v, want %s", res, o)
			}
			d.never("PlanRestore", "Write")
			d.finishedOnce("op-restore", catalog.OpRestore, o)
		})
	}
}

func TestRestoreDecision_OpIDOfAnotherRequest_LeavesItsOperationUnfinished(t *testing.T) {
	res, d := runRestore(t, restoreInput, restoreAnswers{prep: activities.PrepareRestoreResult{Outcome: outcome.Conflict, Owned: false}})
	if res.Outcome != outcome.Conflict {
		t.Fatalf("result %+v, want conflict", res)
	}
	d.never("PlanRestore", "Finish")
}

func TestRestoreDecision_BackupTagThenCommit_Done(t *testing.T) {
	plan := restorePlan("T-5", "T-6")
	res, d := runRestore(t, restoreInput, restoreAnswers{prep: restorePrepared, plans: []activities.PlanRestoreResult{plan},
		tags: []activities.WriteState{activities.Landed}, puts: []activities.WriteState{activities.Landed}})
	if res.Outcome != outcome.Done || res.Commit != "T-6" || res.PreviousHead != "T-5" || res.RestoredFrom != "T-1" || res.BackupTag != "backup/main/T-5" {
		t.Fatalf("result %+v, want done at T-6 restoring T-1 with T-5 backed up", res)
	}
	if got := strings.Join(d.kindNames(), ","); !strings.Contains(got, "Write tag,Write publish") {
		t.Fatalf("steps %v: the backup tag must be stored before the commit is sent", got)
	}
	p := inputsOf[activities.PlanRestoreInput](d, "PlanRestore")[0]
	if p.Target != "T-1" || !p.Time.Equal(restoreTime) || p.Owner.OpID != "op-restore" {
		t.Fatalf("plan input %+v, want the prepared target and time", p)
	}
	tag := d.writesOf(activities.WriteTag)[0]
	if !bytes.Equal(tag.Spec.Body, plan.Tag.Body) || tag.Owner.OpID != "op-restore" {
		t.Fatalf("tag put %+v, want the planned tag bytes", tag)
	}
	put := d.writesOf(activities.WritePublish)[0]
	if !bytes.Equal(put.Spec.Body, plan.Spec.Body) {
		t.Fatalf("commit put %+v, want the planned commit bytes", put)
	}
	if d.inDoubtMarks() != 0 {
		t.Fatalf("recorded in doubt although every write answered")
	}
	d.finishedOnce("op-restore", catalog.OpRestore, outcome.Done)
}

func TestRestoreDecision_NoBackup_CommitsWithoutATag(t *testing.T) {
	in := restoreInput
	in.NoBackup = true
	plan := restorePlan("T-5", "T-6")
	plan.BackupTag, plan.Tag = "", activities.WriteSpec{}
	res, d := runRestore(t, in, restoreAnswers{prep: restorePrepared, plans: []activities.PlanRestoreResult{plan},
		puts: []activities.WriteState{activities.Landed}})
	if res.Outcome != outcome.Done || res.Commit != "T-6" || res.BackupTag != "" {
		t.Fatalf("result %+v, want done without a backup tag", res)
	}
	if !inputsOf[activities.PrepareRestoreInput](d, "PrepareRestore")[0].NoBackup || !inputsOf[activities.PlanRestoreInput](d, "PlanRestore")[0].NoBackup {
		t.Fatalf("no_backup was not passed to prepare and plan")
	}
	if n := len(d.writesOf(activities.WriteTag)); n != 0 {
		t.Fatalf("%d tag puts, want none", n)
	}
}

func TestRestoreDecision_BackupTagPutInDoubt_SettlesBeforeTheCommit(t *testing.T) {
	plan := restorePlan("T-5", "T-6")
	res, d := runRestore(t, restoreInput, restoreAnswers{prep: restorePrepared, plans: []activities.PlanRestoreResult{plan},
		tags: []activities.WriteState{activities.Ambiguous, activities.Ambiguous, activities.Landed},
		puts: []activities.WriteState{activities.Landed}})
	if res.Outcome != outcome.Done || res.Commit != "T-6" || res.SettleAttempts != 2 || res.BackupTag != plan.BackupTag {
		t.Fatalf("result %+v, want done after the tag settled in 2 re-issues", res)
	}
	want := []string{"PrepareRestore", "PlanRestore", "Write tag", "ReadBack", "ReadBack", "ReadBack", "ReadBack", "Progress",
		"Write tag", "Write tag", "Progress", "Write publish", "Finish"}
	if got := d.kindNames(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("steps %v, want %v", got, want)
	}
	for _, tag := range d.writesOf(activities.WriteTag) {
		if !bytes.Equal(tag.Spec.Body, plan.Tag.Body) {
			t.Fatalf("tag re-issue sent %q, want %q", tag.Spec.Body, plan.Tag.Body)
		}
	}
}

func TestRestoreDecision_BackupTagAlreadyNamesTheHead_Proceeds(t *testing.T) {
	res, d := runRestore(t, restoreInput, restoreAnswers{prep: restorePrepared, plans: []activities.PlanRestoreResult{restorePlan("T-5", "T-6")},
		tags: []activities.WriteState{tagFound}, puts: []activities.WriteState{activities.Landed}})
	if res.Outcome != outcome.Done || res.BackupTag != "backup/main/T-5" || res.Commit != "T-6" {
		t.Fatalf("result %+v, want done with the existing backup tag reported", res)
	}
	d.finishedOnce("op-restore", catalog.OpRestore, outcome.Done)
}

func TestRestoreDecision_BackupTagNotStored_EndsBeforeTheCommit(t *testing.T) {
	for st, want := range map[activities.WriteState]outcome.Outcome{
		activities.Other: outcome.Conflict, activities.Refused: outcome.Refused, activities.Invalid: outcome.Invalid,
	} {
		t.Run(string(st), func(t *testing.T) {
			res, d := runRestore(t, restoreInput, restoreAnswers{prep: restorePrepared, plans: []activities.PlanRestoreResult{restorePlan("T-5", "T-6")},
				tags: []activities.WriteState{st}})
			if res.Outcome != want || res.Commit != "" || res.BackupTag != "" || res.Message != "backup tag: tag "+string(st) {
				t.Fatalf("result %+v, want %s naming the backup tag", res, want)
			}
			if n := len(d.writesOf(activities.WritePublish)); n != 0 {
				t.Fatalf("%d commit puts, want none", n)
			}
			d.finishedOnce("op-restore", catalog.OpRestore, want)
		})
	}
}

func TestRestoreDecision_EarlierAttemptCommitted_DoneWithoutWrites(t *testing.T) {
	plan := activities.PlanRestoreResult{Committed: true, Commit: "T-6", Head: "T-5"}
	res, d := runRestore(t, restoreInput, restoreAnswers{prep: restorePrepared, plans: []activities.PlanRestoreResult{plan}})
	if res.Outcome != outcome.Done || res.Commit != "T-6" || res.PreviousHead != "T-5" {
		t.Fatalf("result %+v, want done at the commit already there", res)
	}
	d.never("Write")
	d.finishedOnce("op-restore", catalog.OpRestore, outcome.Done)
}

func TestRestoreDecision_PlanEndsWithOutcome_NothingWritten(t *testing.T) {
	plan := activities.PlanRestoreResult{Outcome: outcome.Conflict, Message: "the head is T-7, not the expected T-5"}
	in := restoreInput
	in.ExpectedHead = "T-5"
	res, d := runRestore(t, in, restoreAnswers{prep: restorePrepared, plans: []activities.PlanRestoreResult{plan}})
	if res.Outcome != outcome.Conflict || res.Message != plan.Message || res.Commit != "" {
		t.Fatalf("result %+v, want the plan's conflict", res)
	}
	if inputsOf[activities.PlanRestoreInput](d, "PlanRestore")[0].ExpectedHead != "T-5" {
		t.Fatalf("expected head not passed to the plan")
	}
	d.never("Write")
	d.finishedOnce("op-restore", catalog.OpRestore, outcome.Conflict)
}

func TestRestoreDecision_HeadMovedWithoutExpectedHead_BacksUpTheNewHeadAndReplans(t *testing.T) {
	p1, p2 := restorePlan("T-5", "T-6"), restorePlan("T-6", "T-7")
	res, d := runRestore(t, restoreInput, restoreAnswers{prep: restorePrepared, plans: []activities.PlanRestoreResult{p1, p2},
		tags: []activities.WriteState{activities.Landed, activities.Landed},
		puts: []activities.WriteState{activities.Other, activities.Landed}})
	if res.Outcome != outcome.Done || res.Commit != "T-7" || res.PreviousHead != "T-6" || res.BackupTag != "backup/main/T-6" || res.HeadRetries != 1 {
		t.Fatalf("result %+v, want done at T-7 with the moved head T-6 backed up", res)
	}
	tags := d.writesOf(activities.WriteTag)
	if len(tags) != 2 || !bytes.Equal(tags[0].Spec.Body, p1.Tag.Body) || !bytes.Equal(tags[1].Spec.Body, p2.Tag.Body) {
		t.Fatalf("tag puts %+v, want a backup of each head replaced", tags)
	}
	if d.count("PrepareRestore") != 1 {
		t.Fatalf("prepared %d times, want once (a re-plan does not re-resolve the target)", d.count("PrepareRestore"))
	}
}

func TestRestoreDecision_HeadMovedWithExpectedHead_ConflictWithoutReplan(t *testing.T) {
	in := restoreInput
	in.ExpectedHead = "T-5"
	res, d := runRestore(t, in, restoreAnswers{prep: restorePrepared, plans: []activities.PlanRestoreResult{restorePlan("T-5", "T-6")},
		tags: []activities.WriteState{activities.Landed}, puts: []activities.WriteState{activities.Other}})
	if res.Outcome != outcome.Conflict || res.Commit != "" || !strings.Contains(res.Message, "T-5") {
		t.Fatalf("result %+v, want a conflict naming the expected head", res)
	}
	if d.count("PlanRestore") != 1 {
		t.Fatalf("planned %d times, want once", d.count("PlanRestore"))
	}
	d.finishedOnce("op-restore", catalog.OpRestore, outcome.Conflict)
}

func TestRestoreDecision_HeadKeepsMoving_ConflictAfterMaxHeadRetries(t *testing.T) {
	ans := restoreAnswers{prep: restorePrepared}
	for i := 0; i <= workflows.MaxHeadRetries; i++ {
		plan := restorePlan("T-5", "T-6")
		plan.BackupTag, plan.Tag = "", activities.WriteSpec{}
		ans.plans = append(ans.plans, plan)
		ans.puts = append(ans.puts, activities.Other)
	}
	res, d := runRestore(t, restoreInput, ans)
	if res.Outcome != outcome.Conflict || res.HeadRetries != workflows.MaxHeadRetries || d.count("PlanRestore") != workflows.MaxHeadRetries+1 {
		t.Fatalf("result %+v after %d plans, want conflict after %d", res, d.count("PlanRestore"), workflows.MaxHeadRetries+1)
	}
}

func TestRestoreDecision_CommitRefusedOrInvalid_EndsWithoutCommit(t *testing.T) {
	for st, want := range map[activities.WriteState]outcome.Outcome{activities.Refused: outcome.Refused, activities.Invalid: outcome.Invalid} {
		t.Run(string(st), func(t *testing.T) {
			res, d := runRestore(t, restoreInput, restoreAnswers{prep: restorePrepared, plans: []activities.PlanRestoreResult{restorePlan("T-5", "T-6")},
				tags: []activities.WriteState{activities.Landed}, puts: []activities.WriteState{st}})
			if res.Outcome != want || res.Commit != "" || res.Message != "put "+string(st) {
				t.Fatalf("result %+v, want %s", res, want)
			}
			d.finishedOnce("op-restore", catalog.OpRestore, want)
		})
	}
}

func TestRestoreDecision_TagThenCommitInDoubt_EachSettled(t *testing.T) {
	res, d := runRestore(t, restoreInput, restoreAnswers{prep: restorePrepared, plans: []activities.PlanRestoreResult{restorePlan("T-5", "T-6")},
		tags: []activities.WriteState{activities.Ambiguous, activities.Landed},
		puts: []activities.WriteState{activities.Ambiguous, activities.Landed}})
	if res.Outcome != outcome.Done || res.Commit != "T-6" || res.SettleAttempts != 2 {
		t.Fatalf("result %+v, want done after one re-issue of each write", res)
	}
	if d.inDoubtMarks() != 2 {
		t.Fatalf("recorded in doubt %d times, want once per write that settled", d.inDoubtMarks())
	}
}

func TestRestoreDecision_PlanFails_FailsAndRecordsTheFailure(t *testing.T) {
	d := newDecisionEnv(t, workflows.RestoreName, workflows.Restore)
	answer(d, a.PrepareRestore, restorePrepared)
	failWith[activities.PlanRestoreResult](d, a.PlanRestore, permanent("ledger schema missing"))
	var res workflows.RestoreResult
	if err := d.run(restoreInput, &res); err == nil || !strings.Contains(err.Error(), "ledger schema missing") {
		t.Fatalf("err %v, want the plan's failure", err)
	}
	d.never("Write")
	d.finishedOnce("op-restore", catalog.OpRestore, "")
}

// Unit tier: Merge's decisions with every activity mocked. The real-stack
// tier is merge_restore_tags_test.go.

var mergeInput = workflows.MergeInput{Graph: "g", Source: "feature", Target: "main", OpID: "op-merge"}

// mergePlan is a plan that writes commit (kind adopted), its body the commit's name.
func mergePlan(commit string) activities.PlanMergeResult {
	return activities.PlanMergeResult{Owned: true, SourceHead: "S-4", TargetHead: "T-1", Bases: []string{"T-1"},
		Tables:    []workflows.MergeTable{{Table: "t", Action: workflows.MergeAdopt, Source: "V2", Target: "V1"}},
		Unchanged: 2, Kind: outcome.Adopted, Commit: commit,
		Spec: activities.WriteSpec{Kind: activities.WritePublish, Graph: "g", Body: []byte("body of " + commit), Landed: outcome.Adopted}}
}

// A publish whose landing recorded the operation's end (the ledger's row then holds the
// result the write carried) leaves the kernel no finish step; the result the write
// carried is the one the merge returns, re-issues counted.
func TestMergeDecision_PublishRecordedItsEnd_NoFinishStep_TheRecordedResultIsReturned(t *testing.T) {
	d := newDecisionEnv(t, workflows.MergeName, workflows.Merge)
	answer(d, a.PlanMerge, mergePlan("T-2"))
	answer(d, a.Write, verdict(activities.Ambiguous, "answer lost"), activities.Verdict{State: activities.Landed, Recorded: true})
	d.env.OnActivity(a.ReadBack, mock.Anything, mock.Anything).Return(verdict(activities.Ambiguous, "not there yet"), nil).Maybe()
	var res workflows.MergeResult
	d.mustRun(mergeInput, &res)
	if res.Outcome != outcome.Adopted || res.Commit != "T-2" || res.SettleAttempts != 1 {
		t.Fatalf("result %+v, want adopted at T-2 after one re-issue", res)
	}
	d.never("Finish")
	writes := inputsOf[activities.WriteInput](d, "Write")
	var carried workflows.MergeResult
	if err := json.Unmarshal(writes[len(writes)-1].Result, &carried); err != nil || !reflect.DeepEqual(carried, res) {
		t.Fatalf("the landing write carried %+v (%v), want the result the merge returned, %+v", carried, err, res)
	}
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
		Tables: []workflows.MergeTable{{Table: "t", Action: workflows.MergeConflict, Base: "V1", Source: "V2", Target: "V3"}}}
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

// Unit tier: CreateBranch's decisions with every activity mocked
// (go.temporal.io/sdk/testsuite). The real-stack tier is createbranch_test.go.

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
	started := func(name string, args []any) {
		s.calls[name]++
		s.last[name] = args
		s.all[name] = append(s.all[name], args)
	}
	env.SetOnLocalActivityStartedListener(func(info *activity.Info, _ context.Context, args []any) {
		started(info.ActivityType.Name, args)
	})
	// An in-doubt create's steps run as ordinary activities.
	env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, args converter.EncodedValues) {
		started(info.ActivityType.Name, []any{decodedInput(t, info.ActivityType.Name, args)})
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
