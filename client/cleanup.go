package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	sdkclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/searchattr"
	"github.com/graftworks/graft/workflows"
)

// CleanupRequest asks for one cleanup of a graph. Each field means what the field of
// workflows.CleanupInput of the same name does (at least one window is required); RunID,
// the cleanup's operation id in the ledger, defaults to a fresh ULID.
type CleanupRequest struct {
	Graph         string
	KeepNewest    int
	KeepNewerThan time.Duration
	Mode          workflows.CleanupMode
	SweepRunID    string
	GuardWindow   *time.Duration
	Tuning        *workflows.CleanupTuning
	RunID         string
}

// CleanupWorkflowID is the workflow id of an on-demand cleanup of graph: one at a time per
// graph. (Scheduled runs get it with the scheduled time appended; the ledger lets only
// one of them condemn at once.)
func CleanupWorkflowID(graph string) string { return "graft/cleanup/" + graph }

// CleanupScheduleID is the id of graph's cleanup schedule.
func CleanupScheduleID(graph string) string { return "graft-cleanup-" + graph }

// CleanupHandle is a started cleanup. RunID is the Temporal run id of the workflow's first
// execution; OpID the cleanup's operation id in the ledger, "" when the attached run has
// not said it yet (OperationID asks again). Wait follows any continue-as-new.
type CleanupHandle struct {
	*OperationHandle[workflows.CleanupResult]
}

func (r CleanupRequest) input() workflows.CleanupInput {
	return workflows.CleanupInput{
		Graph: r.Graph, KeepNewest: r.KeepNewest, KeepNewerThan: r.KeepNewerThan, Mode: r.Mode,
		SweepRunID: r.SweepRunID, GuardWindow: r.GuardWindow, Tuning: r.Tuning, RunID: r.RunID,
	}
}

// Validate checks the request as graft.Cleanup would, without contacting anything.
func (r CleanupRequest) Validate() error {
	return firstInvalid(checkGraph(r.Graph), invalid("", r.input().Validate()), checkKey(r.SweepRunID))
}

// StartCleanup starts a cleanup of req.Graph, or attaches to the one running when it is
// the same request (the run id aside), and returns at once; a running cleanup of another
// request is a *RequestConflictError.
func (c *Client) StartCleanup(ctx context.Context, req CleanupRequest) (*CleanupHandle, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	given := req.RunID != ""
	req.RunID = keyOrNew(req.RunID)
	run, opID, err := c.startRun(ctx, operationStart{
		Kind: "cleanup",
		ID:   CleanupWorkflowID(req.Graph), Workflow: workflows.CleanupName, Input: req.input(),
		Summary: fmt.Sprintf("cleanup (%s) of %s", req.Mode, req.Graph), Graph: req.Graph, OpID: req.RunID,
		ReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE, Finished: given,
		What: "start cleanup of " + req.Graph, NoEager: true,
	})
	if err != nil {
		return nil, err
	}
	// An attached run has its own ledger id: from its input, or asked.
	h := &CleanupHandle{&OperationHandle[workflows.CleanupResult]{c: c, WorkflowID: run.GetID(), RunID: run.GetRunID(), OpID: opID, run: run}}
	_, _ = h.OperationID(ctx)
	return h, nil
}

// AttachCleanup returns a handle on a cleanup workflow that runs, or ran; runID "" follows
// its latest run.
func (c *Client) AttachCleanup(ctx context.Context, workflowID, runID string) *CleanupHandle {
	run := c.tc.GetWorkflow(ctx, workflowID, runID)
	return &CleanupHandle{&OperationHandle[workflows.CleanupResult]{c: c, WorkflowID: workflowID, RunID: run.GetRunID(), run: run}}
}

// WaitRecorded returns once the cleanup's first step has recorded its run in the ledger
// (its phase is past begin), so that the ledger — `graft op show`, `graft op wait` —
// knows the run's id; or with ctx's error when ctx ends first.
func (h *CleanupHandle) WaitRecorded(ctx context.Context) error {
	for {
		if p, err := h.Progress(ctx); err == nil && p.Phase != "" && p.Phase != "begin" {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// OperationID returns the cleanup's ledger id, asking the workflow when StartCleanup could
// not tell.
func (h *CleanupHandle) OperationID(ctx context.Context) (string, error) {
	if h.OpID != "" {
		return h.OpID, nil
	}
	p, err := h.Progress(ctx)
	if err != nil {
		return "", err
	}
	if p.RunID == "" {
		return "", fmt.Errorf("cleanup %s has not named its run yet", h.WorkflowID)
	}
	h.OpID = p.RunID
	return h.OpID, nil
}

// Cleanup runs a cleanup and waits for its result; an outcome other than done is an
// *outcome.Error.
func (c *Client) Cleanup(ctx context.Context, req CleanupRequest) (workflows.CleanupResult, error) {
	h, err := c.StartCleanup(ctx, req)
	if err != nil {
		return workflows.CleanupResult{}, err
	}
	return h.Wait(ctx)
}

// Progress asks the running cleanup how far it got, bounded by Options.QueryTimeout.
// Deleted includes what sweep activities still in flight reported in their heartbeats.
func (h *CleanupHandle) Progress(ctx context.Context) (workflows.CleanupProgress, error) {
	var p workflows.CleanupProgress
	if err := h.c.query(ctx, h.WorkflowID, "", workflows.CleanupProgressQueryName, &p); err != nil || p.Phase != "sweep" {
		return p, err
	}
	dctx, cancel := context.WithTimeout(ctx, h.c.opts.QueryTimeout)
	defer cancel()
	desc, err := h.c.tc.DescribeWorkflowExecution(dctx, h.WorkflowID, "")
	if err != nil {
		return p, nil // the query's figures stand on their own
	}
	dc := converter.GetDefaultDataConverter()
	for _, pa := range desc.GetPendingActivities() {
		if pa.GetActivityType().GetName() != "CleanupSweep" || len(pa.GetHeartbeatDetails().GetPayloads()) == 0 {
			continue
		}
		var hb struct { // a CleanupSweep heartbeat's counts (docs/cleanup.md)
			Deleted int64 `json:"deleted"`
			Bytes   int64 `json:"bytes"`
		}
		if dc.FromPayload(pa.GetHeartbeatDetails().GetPayloads()[0], &hb) == nil {
			p.Deleted += hb.Deleted
			p.BytesDeleted += hb.Bytes
		}
	}
	return p, nil
}

// CleanupScheduleRequest configures graph's cleanup schedule.
type CleanupScheduleRequest struct {
	Graph string
	// Every runs the cleanup at this interval. Set Every or Cron (or both).
	Every time.Duration
	// Cron runs the cleanup on a cron expression (UTC), e.g. "0 3 * * *".
	Cron string
	// The policy each run applies (see CleanupRequest).
	KeepNewest    int
	KeepNewerThan time.Duration
	GuardWindow   *time.Duration
	// Mode of each run. Defaults to sweep.
	Mode workflows.CleanupMode
	// Paused creates (or leaves) the schedule paused.
	Paused bool
	// Note is shown with the schedule's state. Defaults to "".
	Note string
}

// CleanupScheduleInfo describes graph's cleanup schedule.
type CleanupScheduleInfo struct {
	ID string
	// The schedule as configured.
	CleanupScheduleRequest
	// NextRuns are the next times the schedule starts a cleanup; RecentRuns the latest it
	// started, oldest first; Running the workflow ids of those still running.
	NextRuns   []time.Time
	RecentRuns []CleanupScheduleRun
	Running    []string
	// Actions counts the cleanups started; SkippedOverlap those skipped while one ran.
	Actions, SkippedOverlap int
	CreatedAt, UpdatedAt    time.Time
}

// CleanupScheduleRun is one cleanup a schedule started.
type CleanupScheduleRun struct {
	ScheduledAt, StartedAt time.Time
	WorkflowID, RunID      string
}

// cronMemo is the start action's memo key keeping the cron expression as given (the
// server turns cron into calendar specs).
const cronMemo = "graft_cleanup_cron"

// input is the input of every cleanup the schedule starts.
func (r CleanupScheduleRequest) input() workflows.CleanupInput {
	return workflows.CleanupInput{Graph: r.Graph, KeepNewest: r.KeepNewest, KeepNewerThan: r.KeepNewerThan,
		Mode: cmp.Or(r.Mode, workflows.CleanupModeSweep), GuardWindow: r.GuardWindow}
}

func (r CleanupScheduleRequest) check() error {
	if r.Every <= 0 && r.Cron == "" {
		return outcome.Errorf(outcome.Invalid, "", "give an interval (every) or a cron expression")
	}
	return invalid("", r.input().Validate())
}

func (c *Client) scheduleParts(r CleanupScheduleRequest) (sdkclient.ScheduleSpec, *sdkclient.ScheduleWorkflowAction) {
	var spec sdkclient.ScheduleSpec
	if r.Every > 0 {
		spec.Intervals = []sdkclient.ScheduleIntervalSpec{{Every: r.Every}}
	}
	if r.Cron != "" {
		spec.CronExpressions = []string{r.Cron}
	}
	in := r.input()
	action := &sdkclient.ScheduleWorkflowAction{
		ID:            CleanupWorkflowID(r.Graph),
		Workflow:      workflows.CleanupName,
		Args:          []any{in},
		TaskQueue:     c.opts.TaskQueue,
		StaticSummary: fmt.Sprintf("scheduled cleanup (%s) of %s", in.Mode, r.Graph),
		Memo:          map[string]any{cronMemo: r.Cron},
		TypedSearchAttributes: temporal.NewSearchAttributes(
			searchattr.Graph.ValueSet(r.Graph), searchattr.Operation.ValueSet("cleanup")),
	}
	return spec, action
}

// CleanupScheduleCreate creates graph's cleanup schedule (a run due while the previous one
// runs is skipped), or updates it to req when it exists.
func (c *Client) CleanupScheduleCreate(ctx context.Context, req CleanupScheduleRequest) error {
	if err := req.check(); err != nil {
		return err
	}
	spec, action := c.scheduleParts(req)
	_, err := c.tc.ScheduleClient().Create(ctx, sdkclient.ScheduleOptions{
		ID: CleanupScheduleID(req.Graph), Spec: spec, Action: action,
		Overlap: enumspb.SCHEDULE_OVERLAP_POLICY_SKIP, Paused: req.Paused, Note: req.Note,
		TypedSearchAttributes: temporal.NewSearchAttributes(searchattr.Graph.ValueSet(req.Graph)),
	})
	if errors.Is(err, temporal.ErrScheduleAlreadyRunning) {
		return c.CleanupScheduleUpdate(ctx, req)
	}
	if err != nil {
		return fmt.Errorf("create cleanup schedule of %s: %w", req.Graph, err)
	}
	return nil
}

// CleanupScheduleUpdate replaces the spec, policy and paused state of graph's cleanup
// schedule; a missing one is not_found.
func (c *Client) CleanupScheduleUpdate(ctx context.Context, req CleanupScheduleRequest) error {
	if err := req.check(); err != nil {
		return err
	}
	spec, action := c.scheduleParts(req)
	h := c.tc.ScheduleClient().GetHandle(ctx, CleanupScheduleID(req.Graph))
	err := h.Update(ctx, sdkclient.ScheduleUpdateOptions{
		DoUpdate: func(in sdkclient.ScheduleUpdateInput) (*sdkclient.ScheduleUpdate, error) {
			s := in.Description.Schedule
			s.Spec = &spec
			s.Action = action
			s.Policy = cmp.Or(s.Policy, &sdkclient.SchedulePolicies{})
			s.Policy.Overlap = enumspb.SCHEDULE_OVERLAP_POLICY_SKIP
			s.State = cmp.Or(s.State, &sdkclient.ScheduleState{})
			s.State.Paused, s.State.Note = req.Paused, req.Note
			return &sdkclient.ScheduleUpdate{Schedule: &s}, nil
		},
	})
	return c.scheduleError(err, "update", req.Graph)
}

// CleanupSchedulePause pauses (paused true) or resumes graph's cleanup schedule.
func (c *Client) CleanupSchedulePause(ctx context.Context, graph string, paused bool, note string) error {
	h := c.tc.ScheduleClient().GetHandle(ctx, CleanupScheduleID(graph))
	var err error
	if paused {
		err = h.Pause(ctx, sdkclient.SchedulePauseOptions{Note: note})
	} else {
		err = h.Unpause(ctx, sdkclient.ScheduleUnpauseOptions{Note: note})
	}
	return c.scheduleError(err, "pause", graph)
}

// CleanupScheduleTrigger starts a cleanup from graph's schedule now (skipped while one
// is still running).
func (c *Client) CleanupScheduleTrigger(ctx context.Context, graph string) error {
	h := c.tc.ScheduleClient().GetHandle(ctx, CleanupScheduleID(graph))
	return c.scheduleError(h.Trigger(ctx, sdkclient.ScheduleTriggerOptions{Overlap: enumspb.SCHEDULE_OVERLAP_POLICY_SKIP}), "trigger", graph)
}

// CleanupScheduleDelete deletes graph's cleanup schedule; running cleanups go on.
func (c *Client) CleanupScheduleDelete(ctx context.Context, graph string) error {
	h := c.tc.ScheduleClient().GetHandle(ctx, CleanupScheduleID(graph))
	return c.scheduleError(h.Delete(ctx), "delete", graph)
}

// CleanupScheduleDescribe describes graph's cleanup schedule.
func (c *Client) CleanupScheduleDescribe(ctx context.Context, graph string) (CleanupScheduleInfo, error) {
	info := CleanupScheduleInfo{ID: CleanupScheduleID(graph), CleanupScheduleRequest: CleanupScheduleRequest{Graph: graph}}
	h := c.tc.ScheduleClient().GetHandle(ctx, info.ID)
	d, err := h.Describe(ctx)
	if err != nil {
		return info, c.scheduleError(err, "describe", graph)
	}
	dc := converter.GetDefaultDataConverter()
	if s := d.Schedule.Spec; s != nil && len(s.Intervals) > 0 {
		info.Every = s.Intervals[0].Every
	}
	if a, ok := d.Schedule.Action.(*sdkclient.ScheduleWorkflowAction); ok {
		var in workflows.CleanupInput
		if len(a.Args) > 0 {
			if p, ok := a.Args[0].(*commonpb.Payload); ok && dc.FromPayload(p, &in) == nil {
				info.KeepNewest, info.KeepNewerThan, info.GuardWindow, info.Mode = in.KeepNewest, in.KeepNewerThan, in.GuardWindow, in.Mode
			}
		}
		if p, ok := a.Memo[cronMemo].(*commonpb.Payload); ok {
			_ = dc.FromPayload(p, &info.Cron)
		}
	}
	if st := d.Schedule.State; st != nil {
		info.Paused, info.Note = st.Paused, st.Note
	}
	info.NextRuns = d.Info.NextActionTimes
	for _, ra := range d.Info.RecentActions {
		run := CleanupScheduleRun{ScheduledAt: ra.ScheduleTime, StartedAt: ra.ActualTime}
		if ra.StartWorkflowResult != nil {
			run.WorkflowID, run.RunID = ra.StartWorkflowResult.WorkflowID, ra.StartWorkflowResult.FirstExecutionRunID
		}
		info.RecentRuns = append(info.RecentRuns, run)
	}
	for _, w := range d.Info.RunningWorkflows {
		info.Running = append(info.Running, w.WorkflowID)
	}
	info.Actions, info.SkippedOverlap = d.Info.NumActions, d.Info.NumActionsSkippedOverlap
	info.CreatedAt, info.UpdatedAt = d.Info.CreatedAt, d.Info.LastUpdateAt
	return info, nil
}

// scheduleError maps a missing schedule to not_found.
func (c *Client) scheduleError(err error, verb, graph string) error {
	if err == nil {
		return nil
	}
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return outcome.Errorf(outcome.NotFound, "", "graph %s has no cleanup schedule", graph)
	}
	return fmt.Errorf("%s cleanup schedule of %s: %w", verb, graph, err)
}
