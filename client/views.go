package client

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
)

// OperationDetail is an operation with the phase it is in and what it waits for, from the
// ledger and — while its workflow runs — the workflow itself.
type OperationDetail struct {
	Operation
	// Stuck says why Stuck lists it: in_doubt, parked (another unfinished state) or
	// running_long; "" from Detail.
	Stuck string `json:"stuck,omitempty"`
	// Age is how long ago the operation was recorded; InStateFor how long it has been in
	// its state.
	Age        time.Duration `json:"age"`
	InStateFor time.Duration `json:"in_state_for"`
	// Phase is the step the workflow reports (prepare, publish, settle, …).
	Phase string `json:"phase,omitempty"`
	// Native and WitnessState are a create's newest incarnation and its witness state
	// (intent, cloned, in_doubt, live, …).
	Native       string `json:"native,omitempty"`
	WitnessState string `json:"witness_state,omitempty"`
	// WaitsFor says what the operation waits for, for a person.
	WaitsFor string `json:"waits_for,omitempty"`
	// From says where Phase and WaitsFor came from: "workflow" (its status query),
	// "history" (its pending step or task, when the workflow could not answer), or "ledger".
	From string `json:"from,omitempty"`
	// Workflow is the workflow's status when it could be described (running, failed, …).
	Workflow string `json:"workflow,omitempty"`
	// PendingWrite names the write the operation issued whose outcome the ledger has not
	// recorded yet ("ref feature/x.01J…", "commit …"); SettleAttempts its re-issues.
	PendingWrite   string `json:"pending_write,omitempty"`
	SettleAttempts int    `json:"settle_attempts,omitempty"`
	// Extra holds ledger columns this client does not know, by name.
	Extra map[string]json.RawMessage `json:"extra,omitempty"`
}

// StuckFilter selects the operations Stuck lists.
type StuckFilter struct {
	Graph string
	// RunningFor is how long a running operation may run before it is listed. Defaults to
	// 10 minutes.
	RunningFor time.Duration
	// Limit caps the operations returned, oldest first. Defaults to 100.
	Limit int
}

// Stuck lists, oldest first, the operations that are not moving on by themselves, or not
// quickly: in doubt, parked, or running longer than f.RunningFor — each with its phase
// and what it waits for.
func (o *Ops) Stuck(ctx context.Context, f StuckFilter) ([]OperationDetail, error) {
	if f.RunningFor < 0 {
		return nil, outcome.Errorf(outcome.Invalid, "", "running-for must not be negative, got %s", f.RunningFor)
	}
	views, err := o.cat.OperationStuckList(ctx, catalog.OperationStuckParams{Graph: f.Graph, RunningFor: f.RunningFor, Limit: f.Limit})
	if errors.Is(err, catalog.ErrInvalid) {
		return nil, outcome.Errorf(outcome.Invalid, "", "%v", err)
	}
	if err != nil {
		return nil, fmt.Errorf("list stuck operations: %w", ledgerErr(err))
	}
	out := make([]OperationDetail, len(views))
	for i, v := range views {
		out[i] = o.detail(ctx, v)
		out[i].Stuck = cmp.Or(stuckReasons[out[i].State], "parked")
	}
	return out, nil
}

// stuckReasons are the Stuck values of the states other than parked.
var stuckReasons = map[OperationState]string{OperationInDoubt: "in_doubt", OperationRunning: "running_long"}

// Detail returns one operation with its phase and what it waits for; an unknown id is
// not_found.
func (o *Ops) Detail(ctx context.Context, id string) (OperationDetail, error) {
	v, err := o.cat.OperationViewGet(ctx, id)
	if errors.Is(err, catalog.ErrNotFound) {
		return OperationDetail{}, outcome.Errorf(outcome.NotFound, "", "operation %q does not exist", id)
	}
	if err != nil {
		return OperationDetail{}, fmt.Errorf("show operation %s: %w", id, ledgerErr(err))
	}
	return o.detail(ctx, v), nil
}

// detail fills what the ledger row says, then what the running workflow says.
func (o *Ops) detail(ctx context.Context, v catalog.OperationView) OperationDetail {
	now := time.Now()
	d := OperationDetail{
		Operation: operationOf(v.Operation), Native: v.Native, WitnessState: string(v.WitnessState), Extra: v.Extra,
		Age: now.Sub(v.CreatedAt).Round(time.Second), InStateFor: now.Sub(v.UpdatedAt).Round(time.Second),
		SettleAttempts: v.SettleAttempts, PendingWrite: pendingWrite(v.Pending),
	}
	if v.Phase != "" {
		d.Phase, d.From = v.Phase, "ledger"
	}
	if v.Waiting != "" {
		d.WaitsFor, d.From = v.Waiting, "ledger"
	}
	if d.State == OperationDone {
		return d
	}
	if d.WaitsFor == "" {
		d.WaitsFor, d.From = ledgerStory(d), "ledger"
	}
	if o.c != nil && d.WorkflowID != "" {
		o.c.describeInto(ctx, &d)
	}
	return d
}

// ledgerStory is what the ledger alone says an operation waits for.
func ledgerStory(d OperationDetail) string {
	switch {
	case d.State == OperationInDoubt && d.Native != "":
		return fmt.Sprintf("a write may still land (witness %s is %s); the workflow settles it, or `graft branch abandon` fences it",
			d.Native, d.WitnessState)
	case d.State == OperationInDoubt:
		return "a write may still land; the workflow settles it by reading back and re-issuing it"
	case d.State == OperationRunning:
		return "its workflow's next step"
	}
	return fmt.Sprintf("the ledger has it %s", d.State)
}

// describeInto asks the operation's workflow what it is doing: its status query, then its
// description (how it closed; when it could not answer, the pending step's last failure
// or a task no worker picked up).
func (c *Client) describeInto(ctx context.Context, d *OperationDetail) {
	if st, err := c.Status(ctx, d.WorkflowID, ""); err == nil && st.Phase != "" {
		d.Phase, d.From = st.Phase, "workflow"
		if st.Pending != "" {
			d.WaitsFor = st.Pending
		}
		d.Native = cmp.Or(d.Native, st.Native)
		d.Workflow = "running"
	}
	dctx, cancel := context.WithTimeout(ctx, c.opts.QueryTimeout)
	defer cancel()
	desc, err := c.tc.DescribeWorkflowExecution(dctx, d.WorkflowID, "")
	if err != nil {
		return
	}
	status := desc.GetWorkflowExecutionInfo().GetStatus()
	d.Workflow = strings.ToLower(strings.TrimPrefix(status.String(), "WORKFLOW_EXECUTION_STATUS_"))
	if status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		d.WaitsFor, d.From = fmt.Sprintf("its workflow is %s but the ledger row is %s: `graft op reconcile` settles it as the workflow would have",
			d.Workflow, d.State), "history"
		return
	}
	if d.From == "workflow" {
		return
	}
	for _, pa := range desc.GetPendingActivities() {
		what := "step " + pa.GetActivityType().GetName()
		if f := pa.GetLastFailure(); f != nil {
			d.WaitsFor = fmt.Sprintf("%s, retrying (attempt %d) after: %s", what, pa.GetAttempt(), oneLine(f.GetMessage()))
		} else {
			d.WaitsFor = what + " to finish"
		}
		d.From = "history"
		return
	}
	if wft := desc.GetPendingWorkflowTask(); wft != nil {
		switch wft.GetState() {
		case enumspb.PENDING_WORKFLOW_TASK_STATE_SCHEDULED:
			d.WaitsFor = "a worker to pick up its next task: is a graft worker polling task queue " +
				desc.GetExecutionConfig().GetTaskQueue().GetName() + "?"
		default:
			d.WaitsFor = fmt.Sprintf("its current task (attempt %d), which does not answer queries: a step is retrying inside it", wft.GetAttempt())
		}
		d.From = "history"
	}
}

// pendingWrite names a ledger row's pending write by kind and subject, or "".
func pendingWrite(raw json.RawMessage) string {
	var w struct {
		Kind    string `json:"kind"`
		Subject string `json:"subject"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &w) != nil || w.Kind == "" {
		return ""
	}
	return strings.TrimSpace(w.Kind + " " + w.Subject)
}
