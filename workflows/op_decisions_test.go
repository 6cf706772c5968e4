package workflows_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/workflows"
)

// Unit tier shared by the *_decisions_test.go files: one workflow run with
// every activity mocked, recording each activity attempt it started — name,
// input and workflow time — in order. Tests of this tier carry "Decision" in
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
	// in is the activity's input: the Go value for a local activity, the
	// encoded payloads (converter.EncodedValues) for an ordinary one.
	in any
	at time.Time
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
	d.env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: decisionWorkflowID})
	d.env.SetOnLocalActivityStartedListener(func(info *activity.Info, _ context.Context, args []any) {
		var in any
		if len(args) > 0 {
			in = args[0]
		}
		d.steps = append(d.steps, step{name: info.ActivityType.Name, in: in, at: d.env.Now()})
	})
	d.env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, args converter.EncodedValues) {
		d.steps = append(d.steps, step{name: info.ActivityType.Name, in: args, at: d.env.Now()})
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

// stepsOf returns the attempts of the local activity name.
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

// answerWrites makes Write answer the states in order. The kernel reads an
// ambiguous write back before it settles it: every read-back answers Ambiguous
// unless the test registered its own ReadBack answers first.
func answerWrites(d *decisionEnv, states ...activities.WriteState) {
	for _, st := range states {
		d.env.OnActivity(a.Write, mock.Anything, mock.Anything).Return(verdict(st, "write "+string(st)), nil).Once()
	}
	d.env.OnActivity(a.ReadBack, mock.Anything, mock.Anything).Return(verdict(activities.Ambiguous, "not there yet"), nil).Maybe()
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
