package workflows_test

import (
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/interceptor"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/worker"
)

// An operation's steps are local activities: their results reach Temporal's history only
// when the workflow task that ran them completes. A worker that dies after the operation
// recorded its end in the ledger, before that task completed, leaves the next worker to
// run the steps again on a ledger that says the operation is done, by this very run. The
// operation must still report the result it recorded, not an attached request's
// "already finished".

// loseFinishedTask fails, once per workflow, the workflow task in which the step that
// recorded the operation's end answered (Finish, or a create's ref write): as a worker
// dying before the task's completion reaches Temporal would.
type loseFinishedTask struct {
	interceptor.WorkerInterceptorBase
	mu   sync.Mutex
	lost map[string]bool // workflow ids whose task was failed
	// meanwhile, when set, runs before the task fails: what another writer does before
	// the next worker runs the steps again.
	meanwhile func()
}

func (l *loseFinishedTask) InterceptWorkflow(ctx workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	return &loseFinishedInbound{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}, l: l}
}

type loseFinishedInbound struct {
	interceptor.WorkflowInboundInterceptorBase
	l *loseFinishedTask
}

func (i *loseFinishedInbound) Init(outbound interceptor.WorkflowOutboundInterceptor) error {
	return i.Next.Init(&loseFinishedOutbound{WorkflowOutboundInterceptorBase: interceptor.WorkflowOutboundInterceptorBase{Next: outbound}, l: i.l})
}

type loseFinishedOutbound struct {
	interceptor.WorkflowOutboundInterceptorBase
	l *loseFinishedTask
}

func (o *loseFinishedOutbound) ExecuteLocalActivity(ctx workflow.Context, activityType string, args ...any) workflow.Future {
	f := o.Next.ExecuteLocalActivity(ctx, activityType, args...)
	if activityType != "Finish" && activityType != "Write" || workflow.IsReplaying(ctx) {
		return f
	}
	return lostAfter{Future: f, finish: activityType == "Finish", lose: func() bool {
		id := workflow.GetInfo(ctx).WorkflowExecution.ID
		o.l.mu.Lock()
		defer o.l.mu.Unlock()
		if o.l.lost[id] {
			return false
		}
		o.l.lost[id] = true
		if o.l.meanwhile != nil {
			o.l.meanwhile()
		}
		return true
	}}
}

// lostAfter is the future of a step that may record the end (a Finish, or a write whose
// verdict says it recorded it) that, once the step answered so, fails the workflow task.
type lostAfter struct {
	workflow.Future
	finish bool
	lose   func() bool
}

func (f lostAfter) Get(ctx workflow.Context, out any) error {
	err := f.Future.Get(ctx, out)
	if v, ok := out.(*activities.Verdict); !f.finish && (!ok || !v.Recorded) {
		return err
	}
	if err == nil && f.lose() {
		panic("test: the workflow task's completion is lost after the operation finished")
	}
	return err
}

// startLosingWorker starts the rig's worker with lose failing each workflow's finishing task.
func startLosingWorker(r *rig, lose *loseFinishedTask) {
	r.t.Helper()
	w := worker.New(r.tc, r.taskQueue, &activities.Activities{Store: r.store, Catalog: r.cat, Workflows: worker.TemporalWorkflows(r.tc)}, sdkworker.Options{Interceptors: []interceptor.WorkerInterceptor{lose}})
	if err := w.Start(); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(w.Stop)
}

func TestLostTaskAfterFinish_EveryOperationReportsItsOwnResult(t *testing.T) {
	r := newRig(t)
	t.Parallel()
	lose := &loseFinishedTask{lost: map[string]bool{}}
	startLosingWorker(r, lose)
	ctx, g := r.ctx, r.graph

	created, err := r.gc.CreateBranch(ctx, client.CreateBranchRequest{Graph: g, Branch: "feat"})
	if err != nil || created.Outcome != outcome.Created || created.Native == "" || created.Head == "" || created.Message != "" {
		t.Fatalf("create: %+v, %v; want created with its native and head", created, err)
	}
	feat := r.headOf("feat")
	r.commitOn(&feat, "t", "v2", time.Now())
	merged, err := r.gc.Merge(ctx, client.MergeRequest{Graph: g, Source: "feat", Target: "main"})
	if err != nil || merged.Outcome != outcome.Adopted || merged.Commit == "" || merged.SourceHead != feat.ID.String() ||
		merged.TargetHead != r.main.ID.String() || merged.Message != "" {
		t.Fatalf("merge: %+v, %v; want adopted with its commit and heads", merged, err)
	}
	written, err := r.gc.WriteTable(ctx, r.inner, client.WriteTableRequest{Graph: g, Branch: "main", Table: "w", Files: writeFiles(t, "w")})
	if err != nil || written.Outcome != outcome.Done || written.Commit == "" || written.Version == "" || written.Objects != 1 || written.Message != "" {
		t.Fatalf("write: %+v, %v; want done with its commit and version", written, err)
	}
	tag, err := r.gc.CreateTag(ctx, client.CreateTagRequest{Graph: g, Name: "before", Commit: r.main.ID.String()})
	if err != nil || tag.Outcome != outcome.Created || tag.Commit != r.main.ID.String() || tag.Message != "" {
		t.Fatalf("create tag: %+v, %v; want created naming its commit", tag, err)
	}
	restored, err := r.gc.Restore(ctx, client.RestoreRequest{Graph: g, Branch: "main", ToCommit: r.main.ID.String(), NoBackup: true})
	if err != nil || restored.Outcome != outcome.Done || restored.Commit == "" || restored.PreviousHead != written.Commit || restored.Message != "" {
		t.Fatalf("restore: %+v, %v; want done with its commit and the head it replaced", restored, err)
	}
	untagged, err := r.gc.DeleteTag(ctx, client.DeleteTagRequest{Graph: g, Name: "before"})
	if err != nil || untagged.Outcome != outcome.Deleted || untagged.Commit != r.main.ID.String() || untagged.Message != "" {
		t.Fatalf("delete tag: %+v, %v; want deleted naming its commit", untagged, err)
	}
	deleted, err := r.gc.DeleteBranch(ctx, client.DeleteBranchRequest{Graph: g, Branch: "feat"})
	if err != nil || deleted.Outcome != outcome.Deleted || deleted.Native != created.Native || deleted.Message != "" {
		t.Fatalf("delete: %+v, %v; want deleted naming the incarnation", deleted, err)
	}
	lose.mu.Lock()
	defer lose.mu.Unlock()
	if len(lose.lost) != 7 {
		t.Fatalf("lost the finishing task of %d operations, want 7: %v", len(lose.lost), lose.lost)
	}
}

// Another writer moves the branch after the write finished and before its steps run
// again: they must not plan a second commit on the new head, nor call the write a conflict.
func TestLostTaskAfterFinish_BranchMovedMeanwhile_TheWriteReportsItsOwnCommit(t *testing.T) {
	r := newRig(t)
	t.Parallel()
	lose := &loseFinishedTask{lost: map[string]bool{}}
	lose.meanwhile = func() {
		head := r.headOf("main")
		r.commitOn(&head, "other", "another-writer", time.Now())
	}
	startLosingWorker(r, lose)
	written, err := r.gc.WriteTable(r.ctx, r.inner, client.WriteTableRequest{Graph: r.graph, Branch: "main", Table: "w", Files: writeFiles(t, "w")})
	if err != nil || written.Outcome != outcome.Done || written.Commit == "" || written.Message != "" {
		t.Fatalf("write: %+v, %v; want done with its commit", written, err)
	}
	head := r.headOf("main")
	if len(head.Parents) != 1 || head.Parents[0].String() != written.Commit || head.Pins["other"].IsZero() {
		t.Fatalf("main's head %+v; want the other writer's commit on the write's %s, and no second write", head, written.Commit)
	}
	if len(lose.lost) != 1 {
		t.Fatalf("lost %d finishing tasks, want 1", len(lose.lost))
	}
}
