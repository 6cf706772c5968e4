package workflows

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/searchattr"
	"github.com/graftworks/graft/workflows/contract"
)

// Registered names of Cleanup and its query. Stable.
const (
	CleanupName              = "graft.Cleanup"
	CleanupProgressQueryName = "graft.cleanup.progress"
)

// CleanupMode says how far a cleanup goes.
type CleanupMode string

// The cleanup modes.
const (
	// CleanupModeDryRun plans only: it reports counts, bytes and keys and changes nothing
	// in storage (it writes no fence either).
	CleanupModeDryRun CleanupMode = activities.CleanupModeDryRun
	// CleanupModeMark plans, fences ref-less trees that need it, and persists the plan in
	// the ledger for review; it deletes nothing.
	CleanupModeMark CleanupMode = activities.CleanupModeMark
	// CleanupModeSweep marks and then deletes — or, with SweepRunID, sweeps what is still
	// garbage of a plan an earlier mark persisted.
	CleanupModeSweep CleanupMode = activities.CleanupModeSweep
)

// DefaultGuardWindow is the guard window when CleanupInput.GuardWindow is nil: table
// versions and data objects modified less than this long ago are never condemned, because
// a writer may be between uploading them and committing the commit that names them.
const DefaultGuardWindow = time.Hour

// CleanupInput is the input of graft.Cleanup.
type CleanupInput struct {
	Graph string `json:"graph"`
	// KeepNewest keeps the newest N commits (by seq) of every live branch's tree; 0 is no
	// count window.
	KeepNewest int `json:"keep_newest,omitempty"`
	// KeepNewerThan keeps every commit of a live branch younger than this; 0 is no age
	// window. At least one window is required; a commit goes only when it is outside
	// every window. A live branch's head is always kept.
	KeepNewerThan time.Duration `json:"keep_newer_than,omitempty"`
	// Mode is dry_run, mark or sweep: sweep by default with SweepRunID, required otherwise.
	Mode CleanupMode `json:"mode,omitempty"`
	// SweepRunID sweeps the plan of that earlier mark run: this run marks afresh and
	// deletes only keys that are garbage now and were in that plan.
	SweepRunID string `json:"sweep_run_id,omitempty"`
	// GuardWindow keeps table versions and data objects younger than it. nil means
	// DefaultGuardWindow; a pointer to 0 disables it (tests, or a quiesced graph).
	GuardWindow *time.Duration `json:"guard_window,omitempty"`
	// RunID names the run in the ledger (and the cleanup operation). Defaults to a fresh ULID.
	RunID  string         `json:"run_id,omitempty"`
	Tuning *CleanupTuning `json:"tuning,omitempty"`
	// Resume carries a sweep across continue-as-new; callers leave it nil.
	Resume *CleanupResume `json:"resume,omitempty"`
}

// CleanupTuning adjusts how a cleanup spreads its work; zero fields take
// DefaultCleanupTuning's.
type CleanupTuning struct {
	// BatchSize is the keys per delete request, 1..1000.
	BatchSize int `json:"batch_size,omitempty"`
	// BatchesPerActivity is the batches one sweep activity deletes before it reports back.
	BatchesPerActivity int `json:"batches_per_activity,omitempty"`
	// ActivitiesPerRun is the sweep activities one execution runs before it continues as new.
	ActivitiesPerRun int `json:"activities_per_run,omitempty"`
	// Parallelism bounds the tables marked or swept at once (each by its own activity).
	Parallelism int `json:"parallelism,omitempty"`
	// HeartbeatTimeout is how long a mark or sweep activity may go without a heartbeat
	// before another worker takes it over.
	HeartbeatTimeout time.Duration `json:"heartbeat_timeout,omitempty"`
	// MaxPlanKeys bounds the keys a result lists.
	MaxPlanKeys int `json:"max_plan_keys,omitempty"`
}

// DefaultCleanupTuning is the tuning of a cleanup that sets none.
var DefaultCleanupTuning = CleanupTuning{
	BatchSize: 1000, BatchesPerActivity: 50, ActivitiesPerRun: 200, Parallelism: 8,
	HeartbeatTimeout: 30 * time.Second, MaxPlanKeys: 1000,
}

func (t *CleanupTuning) withDefaults() CleanupTuning {
	d := DefaultCleanupTuning
	if t == nil {
		return d
	}
	return CleanupTuning{BatchSize: orDefault(t.BatchSize, d.BatchSize), BatchesPerActivity: orDefault(t.BatchesPerActivity, d.BatchesPerActivity),
		ActivitiesPerRun: orDefault(t.ActivitiesPerRun, d.ActivitiesPerRun), Parallelism: orDefault(t.Parallelism, d.Parallelism),
		HeartbeatTimeout: orDefault(t.HeartbeatTimeout, d.HeartbeatTimeout), MaxPlanKeys: orDefault(t.MaxPlanKeys, d.MaxPlanKeys)}
}

func orDefault[T int | time.Duration](v, d T) T {
	if v > 0 {
		return v
	}
	return d
}

// CleanupPolicy is the retention policy a run applied.
type CleanupPolicy struct {
	KeepNewest    int           `json:"keep_newest"`
	KeepNewerThan time.Duration `json:"keep_newer_than"`
	GuardWindow   time.Duration `json:"guard_window"`
}

// CleanupResult is the result of graft.Cleanup; the run's ledger row stores it as its
// report.
type CleanupResult struct {
	// Outcome is done, or invalid, not_found or conflict (another run is active: see
	// ActiveRunID) when the run did not start.
	Outcome outcome.Outcome `json:"outcome"`
	Message string          `json:"message,omitempty"`
	RunID   string          `json:"run_id,omitempty"`
	Graph   string          `json:"graph"`
	Mode    CleanupMode     `json:"mode"`
	// PlanRunID is the mark run whose plan a sweep was limited to.
	PlanRunID   string `json:"plan_run_id,omitempty"`
	ActiveRunID string `json:"active_run_id,omitempty"`
	// Adopted lists runs this run found orphaned (left running by a workflow that ended)
	// and finished first: a sweep run's plan deleted, a mark run aborted.
	Adopted []string      `json:"adopted,omitempty"`
	Policy  CleanupPolicy `json:"policy"`
	// Kept counts the keys kept, by the root that kept them.
	Kept CleanupKept `json:"kept"`
	// Condemned counts the keys condemned (planned, in a dry run); Deleted those deleted.
	Condemned CleanupCounts `json:"condemned"`
	Deleted   CleanupCounts `json:"deleted"`
	// PlanDropped counts keys of the reviewed plan (SweepRunID) that are no longer
	// garbage and were kept; NotInPlan counts garbage the plan did not list, left for a
	// later run.
	PlanDropped int64 `json:"plan_dropped,omitempty"`
	NotInPlan   int64 `json:"not_in_plan,omitempty"`
	// Refused counts the condemned keys the store refused to delete (a 403, an object
	// lock); RefusedKeys lists up to Tuning.MaxPlanKeys of them, with why. They stay in
	// storage and the run still ends: a later run condemns them, and tries, again.
	Refused     int64        `json:"refused,omitempty"`
	RefusedKeys []RefusedKey `json:"refused_keys,omitempty"`
	// SkippedUnsettled lists the trees left alone because a ref may still name them.
	SkippedUnsettled []UnsettledTree `json:"skipped_unsettled,omitempty"`
	// RetainAllData says why no version or object was condemned, when that happened.
	RetainAllData string `json:"retain_all_data,omitempty"`
	// Fenced lists the natives this run fenced; WouldFence those a dry run would fence.
	Fenced     []string `json:"fenced,omitempty"`
	WouldFence []string `json:"would_fence,omitempty"`
	// PlanKeys lists up to Tuning.MaxPlanKeys condemned keys; PlanKeyCount counts them all.
	PlanKeys     []string           `json:"plan_keys,omitempty"`
	PlanKeyCount int64              `json:"plan_key_count"`
	Tables       int                `json:"tables"`
	Objects      CleanupObjectStats `json:"objects"`
	Mark         CleanupMarkStats   `json:"mark"`
	Sweep        CleanupSweepStats  `json:"sweep"`
	StartedAt    time.Time          `json:"started_at"`
	FinishedAt   time.Time          `json:"finished_at"`
}

// CleanupMarkStats measures the mark phase.
type CleanupMarkStats struct {
	Requests StoreRequests `json:"requests"`
	Duration time.Duration `json:"duration"`
}

// CleanupSweepStats measures the sweep phase.
type CleanupSweepStats struct {
	Duration       time.Duration `json:"duration"`
	Activities     int           `json:"activities"`
	ContinuedAsNew int           `json:"continued_as_new"`
}

// CleanupProgress answers graft.cleanup.progress.
type CleanupProgress struct {
	RunID string `json:"run_id"`
	// Phase is begin, mark, sweep, finish or done.
	Phase       string `json:"phase"`
	TablesTotal int    `json:"tables_total"`
	TablesDone  int    `json:"tables_done"`
	// Condemned counts the keys condemned so far; Deleted those deleted so far, as of the
	// last sweep activity that reported back (the client adds in-flight heartbeats).
	Condemned    int64 `json:"condemned"`
	Deleted      int64 `json:"deleted"`
	BytesDeleted int64 `json:"bytes_deleted"`
	Refused      int64 `json:"refused,omitempty"`
}

// CleanupResume is a sweep's state carried across continue-as-new.
type CleanupResume struct {
	Result   CleanupResult   `json:"result"`
	Progress CleanupProgress `json:"progress"`
	// CommitsPending is set while condemned commits remain to delete, from CommitsAfter.
	CommitsPending bool   `json:"commits_pending"`
	CommitsAfter   string `json:"commits_after,omitempty"`
	// GraphChunksPending is set while condemned pins and lineage chunks remain
	// to delete, from GraphChunksAfter; they go after the commits, before any table.
	GraphChunksPending bool   `json:"graph_chunks_pending,omitempty"`
	GraphChunksAfter   string `json:"graph_chunks_after,omitempty"`
	// Lanes are the tables whose versions or objects remain to delete.
	Lanes []CleanupLane `json:"lanes"`
}

// CleanupLane is one table's remaining sweep: its versions, then its manifest
// chunks, then its objects.
type CleanupLane struct {
	Table    string `json:"table"`
	Versions bool   `json:"versions"`
	Chunks   bool   `json:"chunks,omitempty"`
	Objects  bool   `json:"objects"`
	After    string `json:"after,omitempty"`
}

// prefix is the key range the lane sweeps next.
func (l CleanupLane) prefix(graph string) string {
	switch {
	case l.Versions:
		return format.TableVersionsPrefix(graph, l.Table)
	case l.Chunks:
		return format.TableChunksPrefix(graph, l.Table)
	}
	return format.TableObjectsPrefix(graph, l.Table)
}

// advance moves the lane past the range it finished.
func (l *CleanupLane) advance() {
	switch {
	case l.Versions:
		l.Versions = false
	case l.Chunks:
		l.Chunks = false
	default:
		l.Objects = false
	}
	l.After = ""
}

// The ledger steps (begin, summarise, finish) are short and idempotent and the run must
// end recorded: each runs until answered (untilAnsweredStep), never given up on a clock.

// markOptions: listing and deciding, with heartbeats, on any worker. A mark that keeps
// failing ends the run failed — nothing was deleted, so that is safe.
func markOptions(t CleanupTuning) workflow.ActivityOptions {
	return workflow.ActivityOptions{StartToCloseTimeout: 2 * time.Hour, HeartbeatTimeout: t.HeartbeatTimeout,
		WaitForCancellation: true, RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second,
			BackoffCoefficient: 2, MaximumInterval: 30 * time.Second, MaximumAttempts: 10}}
}

// sweepOptions: a sweep retries until it is done. Once keys are condemned the run must
// not end while a deletion may still be in flight, and every deletion is idempotent.
func sweepOptions(t CleanupTuning) workflow.ActivityOptions {
	return workflow.ActivityOptions{StartToCloseTimeout: time.Hour, HeartbeatTimeout: t.HeartbeatTimeout,
		WaitForCancellation: true, RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2,
			MaximumInterval: time.Minute, NonRetryableErrorTypes: []string{"CleanupRunNotRunning"}}}
}

// maxHistoryEvents is the history length past which a sweep continues as new unasked.
const maxHistoryEvents = 10000

// cleanupRun is one execution's state.
type cleanupRun struct {
	in       CleanupInput
	tuning   CleanupTuning
	res      CleanupResult
	progress CleanupProgress
	// sweep is what remains to delete (Result and Progress filled only to continue as new).
	sweep        CleanupResume
	chunks       int // sweep activities completed in this execution
	sweepStarted time.Time
}

// Cleanup reclaims what no root of a graph needs any more: it inserts its run in the
// ledger, marks (reads every root, decides each tree and table, condemns the rest in the
// ledger's handshake with in-flight operations), and sweeps (deletes the condemned keys:
// commits, then each table's versions, then its objects). It never reclaims a tree whose
// ref may still land.
func Cleanup(ctx workflow.Context, in CleanupInput) (CleanupResult, error) {
	r := &cleanupRun{in: in, tuning: in.Tuning.withDefaults()}
	_ = workflow.SetQueryHandler(ctx, CleanupProgressQueryName, func() (CleanupProgress, error) { return r.progress, nil })
	_ = workflow.UpsertTypedSearchAttributes(ctx, searchattr.Graph.ValueSet(in.Graph), searchattr.Operation.ValueSet("cleanup"))
	if in.Resume != nil {
		r.res, r.progress, r.sweep = in.Resume.Result, in.Resume.Progress, *in.Resume
		return r.sweepAndFinish(ctx)
	}

	mode := in.mode()
	r.res = CleanupResult{Graph: in.Graph, Mode: mode, PlanRunID: in.SweepRunID, StartedAt: workflow.Now(ctx),
		Policy: CleanupPolicy{KeepNewest: in.KeepNewest, KeepNewerThan: in.KeepNewerThan, GuardWindow: in.guard()}}
	if err := in.Validate(); err != nil {
		r.res.Outcome, r.res.Message = outcome.Invalid, err.Error()
		return r.res, outcomeError(r.res.Outcome, r.res.Message, r.res)
	}
	r.res.RunID = in.RunID
	if r.res.RunID == "" {
		if err := workflow.SideEffect(ctx, func(workflow.Context) any { return ulid.Make().String() }).Get(&r.res.RunID); err != nil {
			return r.res, err
		}
	}
	r.progress.RunID = r.res.RunID

	r.setPhase(ctx, "begin", "insert the run in the ledger")
	policy, _ := json.Marshal(r.res.Policy)
	info := workflow.GetInfo(ctx)
	var begin activities.CleanupBeginResult
	for {
		if err := untilAnsweredStep(ctx, "begin: record the run",
			acts.CleanupBegin, activities.CleanupBeginInput{
				RunID: r.res.RunID, Graph: in.Graph, Mode: string(mode), Policy: policy, PlanRunID: in.SweepRunID,
				WorkflowID: info.WorkflowExecution.ID, WorkflowRunID: info.WorkflowExecution.RunID,
			}, &begin); err != nil {
			return r.res, fmt.Errorf("begin: %w", err)
		}
		if begin.Orphan == nil {
			break
		}
		if slices.Contains(r.res.Adopted, begin.Orphan.RunID) { // finished, yet still running?
			begin.Outcome, begin.ActiveRunID = outcome.Conflict, begin.Orphan.RunID
			begin.Message = fmt.Sprintf("cleanup run %s is still running on graph %q after it was finished", begin.Orphan.RunID, in.Graph)
			break
		}
		// A run whose workflow ended without finishing it blocks every cleanup of the
		// graph and keeps refusing pins: finish it, then begin again.
		if err := r.adopt(ctx, *begin.Orphan); err != nil {
			return r.res, fmt.Errorf("finish orphaned run %s: %w", begin.Orphan.RunID, err)
		}
		r.res.Adopted = append(r.res.Adopted, begin.Orphan.RunID)
	}
	if ctx.Err() != nil && begin.Outcome == "" { // cancelled once the run was inserted: it must not stay running
		return r.fail(ctx, fmt.Errorf("begin: %w", ctx.Err()))
	}
	if begin.Outcome != "" {
		r.res.Outcome, r.res.Message, r.res.ActiveRunID = begin.Outcome, begin.Message, begin.ActiveRunID
		r.setPhase(ctx, "done", string(begin.Outcome))
		_ = workflow.UpsertTypedSearchAttributes(ctx, searchattr.Outcome.ValueSet(string(begin.Outcome)))
		return r.res, outcomeError(begin.Outcome, begin.Message, r.res)
	}

	if err := r.mark(ctx); err != nil {
		return r.fail(ctx, fmt.Errorf("mark: %w", err))
	}
	if mode != CleanupModeSweep {
		return r.finish(ctx)
	}
	return r.sweepAndFinish(ctx)
}

// adopt finishes a run whose workflow ended without finishing it. Its condemned set has
// refused pins all along, so a sweep run's remaining keys are still safe to delete, in
// the usual order: commits, pins and lineage chunks, then versions, then manifest chunks
// and objects. A mark or dry run deleted nothing and is aborted.
func (r *cleanupRun) adopt(ctx workflow.Context, o activities.CleanupOrphan) error {
	r.setPhase(ctx, "begin", fmt.Sprintf("finishing run %s, left running by %s", o.RunID, o.WorkflowID))
	report := CleanupResult{Outcome: outcome.Done, RunID: o.RunID, Graph: r.in.Graph, Mode: CleanupMode(o.Mode),
		Message: fmt.Sprintf("finished by run %s after its workflow %s ended", r.res.RunID, o.WorkflowID)}
	finish := activities.CleanupFinishInput{RunID: o.RunID, Graph: r.in.Graph, Message: report.Message}
	if o.Mode == string(CleanupModeSweep) {
		actx := workflow.WithActivityOptions(ctx, sweepOptions(r.tuning))
		// Pins and lineage chunks after the commits. Manifest chunks are kind object and
		// sort before their table's objects, after every version went.
		lanes := []struct{ prefix, kind string }{
			{r.in.Graph + "/trees/", "commit"}, {format.ChunksPrefix(r.in.Graph), ""},
			{r.in.Graph + "/tables/", "table_version"}, {r.in.Graph + "/tables/", "object"},
		}
		for _, lane := range lanes {
			for p := (activities.CleanupSweepProgress{}); !p.Done; {
				in := r.sweepInput(o.RunID, lane.prefix, lane.kind, p.After)
				if err := workflow.ExecuteActivity(actx, acts.CleanupSweep, in).Get(ctx, &p); err != nil {
					return err
				}
				report.addRefused(p, r.tuning.MaxPlanKeys)
			}
		}
		var sum activities.CleanupSummary
		if err := untilAnsweredStep(ctx, "summarise the orphaned run",
			acts.CleanupSummarize, activities.CleanupSummarizeInput{RunID: o.RunID}, &sum); err != nil {
			return err
		}
		report.Condemned, report.Deleted = sum.Condemned, sum.Deleted
	} else {
		report.Message = fmt.Sprintf("aborted by run %s after its workflow %s ended", r.res.RunID, o.WorkflowID)
		finish.Aborted, finish.Message = true, report.Message
	}
	report.FinishedAt = workflow.Now(ctx)
	finish.Report, _ = json.Marshal(report)
	return untilAnsweredStep(ctx, "finish the orphaned run", acts.CleanupFinish, finish, nil)
}

// mode is the input's mode: sweep when it names a mark run to sweep and no mode.
func (in CleanupInput) mode() CleanupMode {
	if in.Mode == "" && in.SweepRunID != "" {
		return CleanupModeSweep
	}
	return in.Mode
}

func (in CleanupInput) guard() time.Duration {
	if in.GuardWindow == nil {
		return DefaultGuardWindow
	}
	return *in.GuardWindow
}

// Validate says why Cleanup would end the input invalid before anything runs, or nil.
func (in CleanupInput) Validate() error {
	switch mode := in.mode(); {
	case in.Graph == "":
		return errors.New("graph is required")
	case mode != CleanupModeDryRun && mode != CleanupModeMark && mode != CleanupModeSweep:
		return fmt.Errorf("mode must be dry_run, mark or sweep, not %q", mode)
	case in.SweepRunID != "" && mode != CleanupModeSweep:
		return errors.New("sweep_run_id needs mode sweep")
	case in.KeepNewest < 0 || in.KeepNewerThan < 0:
		return errors.New("keep_newest and keep_newer_than must not be negative")
	case in.KeepNewest == 0 && in.KeepNewerThan == 0:
		return errors.New("give keep_newest, keep_newer_than or both: a cleanup without a window would keep only heads")
	case in.guard() < 0:
		return errors.New("guard_window must not be negative")
	case in.Tuning != nil && (in.Tuning.BatchSize < 0 || in.Tuning.BatchSize > 1000):
		return errors.New("tuning.batch_size must be 1..1000")
	}
	if in.RunID != "" {
		if err := format.ValidateOp(in.RunID); err != nil {
			return fmt.Errorf("run_id: %v", err)
		}
	}
	return nil
}

// mark runs the tree phase, then the table phase on every table in parallel.
func (r *cleanupRun) mark(ctx workflow.Context) error {
	started := workflow.Now(ctx)
	actx := workflow.WithActivityOptions(ctx, markOptions(r.tuning))
	r.setPhase(ctx, "mark", "reading roots and deciding every tree")
	var trees activities.CleanupMarkTreesResult
	if err := workflow.ExecuteActivity(actx, acts.CleanupMarkTrees, activities.CleanupMarkTreesInput{
		RunID: r.res.RunID, Graph: r.in.Graph, Mode: string(r.res.Mode),
		KeepNewest: r.in.KeepNewest, KeepNewerThan: r.in.KeepNewerThan,
		PlanRunID: r.in.SweepRunID, MaxPlanKeys: r.tuning.MaxPlanKeys,
		GuardWindow: r.res.Policy.GuardWindow,
	}).Get(ctx, &trees); err != nil {
		return err
	}
	r.res.Kept.Add(trees.Kept)
	r.res.Condemned.Add(trees.Condemned)
	r.res.NotInPlan += trees.NotInPlan
	r.res.SkippedUnsettled = trees.Unsettled
	r.res.Fenced, r.res.WouldFence = trees.Fenced, trees.WouldFence
	r.res.RetainAllData = trees.RetainAllReason
	r.res.Mark.Requests.Add(trees.Requests)
	r.res.PlanKeys = appendUpTo(r.res.PlanKeys, trees.PlanKeys, r.tuning.MaxPlanKeys)
	r.res.Tables, r.progress.TablesTotal = len(trees.Tables), len(trees.Tables)
	r.progress.Condemned = r.res.Condemned.Keys()
	r.sweep.CommitsPending = trees.Condemned.Commits > 0
	r.sweep.GraphChunksPending = trees.GraphChunks > 0
	r.res.Objects.GraphChunks = trees.GraphChunks
	// The run's object filters take their seed from its id, so that a false positive of
	// one run (a garbage object kept) is not one of the next.
	seed := fnv.New64a()
	_, _ = seed.Write([]byte(r.res.RunID))

	queue := append([]string(nil), trees.Tables...)
	err := runQueue(ctx, r.tuning.Parallelism, &queue,
		func(table string) workflow.Future {
			return workflow.ExecuteActivity(actx, acts.CleanupMarkTable, activities.CleanupMarkTableInput{
				RunID: r.res.RunID, Graph: r.in.Graph, Table: table, Mode: string(r.res.Mode),
				Retained: trees.Retained[table], RetainAll: trees.RetainAllData,
				GuardWindow: r.res.Policy.GuardWindow, Now: trees.Now,
				PlanRunID: r.in.SweepRunID, MaxPlanKeys: r.tuning.MaxPlanKeys,
				Seed: seed.Sum64(),
			})
		},
		func(table string, f workflow.Future) error {
			var t activities.CleanupMarkTableResult
			if err := f.Get(ctx, &t); err != nil {
				return fmt.Errorf("table %s: %w", table, err)
			}
			r.res.Kept.Add(t.Kept)
			r.res.Condemned.Add(t.Condemned)
			r.res.NotInPlan += t.NotInPlan
			r.res.Mark.Requests.Add(t.Requests)
			r.res.PlanKeys = appendUpTo(r.res.PlanKeys, t.PlanKeys, r.tuning.MaxPlanKeys)
			r.res.Objects.ManifestChunks += t.Chunks
			r.res.Objects.External += t.External
			if t.Condemned.Versions > 0 || t.Condemned.Objects > 0 {
				r.sweep.Lanes = append(r.sweep.Lanes, CleanupLane{Table: table, Versions: t.Condemned.Versions > 0, Chunks: t.Chunks > 0,
					Objects: t.Condemned.Objects > t.Chunks})
			}
			r.progress.TablesDone++
			r.progress.Condemned = r.res.Condemned.Keys()
			r.setPhase(ctx, "mark", fmt.Sprintf("%d of %d tables decided", r.progress.TablesDone, r.progress.TablesTotal))
			return nil
		},
		func() bool { return false })
	if err == nil {
		// Incomplete multipart uploads, found by their records: aborted by a sweep (which
		// deletes the records), counted otherwise.
		var up activities.CleanupUploadsResult
		err = workflow.ExecuteActivity(actx, acts.CleanupUploads, activities.CleanupUploadsInput{
			RunID: r.res.RunID, Graph: r.in.Graph, Abort: r.res.Mode == CleanupModeSweep,
			Now: trees.Now, GuardWindow: r.res.Policy.GuardWindow, MaxPlanKeys: r.tuning.MaxPlanKeys,
		}).Get(ctx, &up)
		r.res.Objects.UploadsFound, r.res.Objects.UploadsAborted, r.res.Objects.UploadsPinned = up.Found, up.Aborted, up.Pinned
		r.res.Objects.UploadRecordsRemoved = up.Removed
		r.res.Objects.UploadKeys = up.Keys
		r.res.Kept.Unsettled += up.Unsettled
		r.res.Kept.Unknown += up.Unknown
	}
	r.res.Mark.Duration = workflow.Now(ctx).Sub(started)
	r.res.PlanKeyCount = r.res.Condemned.Keys()
	return err
}

// sweepAndFinish deletes the condemned commits, then every table's condemned versions
// and objects, several tables at a time, continuing as new before history grows large.
func (r *cleanupRun) sweepAndFinish(ctx workflow.Context) (CleanupResult, error) {
	if r.sweepStarted.IsZero() {
		r.sweepStarted = workflow.Now(ctx)
	}
	actx := workflow.WithActivityOptions(ctx, sweepOptions(r.tuning))
	record := func(p activities.CleanupSweepProgress) {
		r.chunks++
		r.res.Sweep.Activities++
		r.progress.Deleted += p.Deleted
		r.progress.BytesDeleted += p.Bytes
		r.res.addRefused(p, r.tuning.MaxPlanKeys)
		r.progress.Refused = r.res.Refused
	}
	// Commits first: a commit must never outlive a version it pins. Then the pins and
	// lineage chunks: no commit left names them.
	for _, s := range []struct {
		pending            *bool
		after              *string
		prefix, kind, what string
	}{
		{&r.sweep.CommitsPending, &r.sweep.CommitsAfter, r.in.Graph + "/trees/", "commit", "commits"},
		{&r.sweep.GraphChunksPending, &r.sweep.GraphChunksAfter, format.ChunksPrefix(r.in.Graph), "", "pins and lineage chunks"},
	} {
		for *s.pending {
			if r.shouldContinueAsNew(ctx) {
				return r.continueAsNew(ctx)
			}
			r.setPhase(ctx, "sweep", fmt.Sprintf("deleting %s: %d keys deleted of %d", s.what, r.progress.Deleted, r.progress.Condemned))
			var p activities.CleanupSweepProgress
			in := r.sweepInput(r.res.RunID, s.prefix, s.kind, *s.after)
			if err := workflow.ExecuteActivity(actx, acts.CleanupSweep, in).Get(ctx, &p); err != nil {
				return r.fail(ctx, fmt.Errorf("sweep %s: %w", s.what, err))
			}
			record(p)
			*s.after, *s.pending = p.After, !p.Done
		}
	}
	// Then each table: its versions before its objects.
	queue := r.sweep.Lanes
	r.sweep.Lanes = nil
	err := runQueue(ctx, r.tuning.Parallelism, &queue,
		func(l CleanupLane) workflow.Future {
			return workflow.ExecuteActivity(actx, acts.CleanupSweep, r.sweepInput(r.res.RunID, l.prefix(r.in.Graph), "", l.After))
		},
		func(l CleanupLane, f workflow.Future) error {
			var p activities.CleanupSweepProgress
			if err := f.Get(ctx, &p); err != nil {
				return fmt.Errorf("sweep table %s: %w", l.Table, err)
			}
			record(p)
			l.After = p.After
			if p.Done {
				l.advance()
			}
			if l.Versions || l.Chunks || l.Objects {
				queue = append(queue, l)
			}
			r.setPhase(ctx, "sweep", fmt.Sprintf("%d keys deleted of %d", r.progress.Deleted, r.progress.Condemned))
			return nil
		},
		func() bool { return r.shouldContinueAsNew(ctx) })
	if err != nil {
		return r.fail(ctx, err)
	}
	if len(queue) > 0 {
		r.sweep.Lanes = queue
		return r.continueAsNew(ctx)
	}
	r.res.Sweep.Duration += workflow.Now(ctx).Sub(r.sweepStarted)
	return r.finish(ctx)
}

// sweepInput asks one sweep activity to delete run's condemned keys of kind under prefix,
// from after on.
func (r *cleanupRun) sweepInput(run, prefix, kind, after string) activities.CleanupSweepInput {
	return activities.CleanupSweepInput{RunID: run, Graph: r.in.Graph, Prefix: prefix, Kind: kind, After: after,
		BatchSize: r.tuning.BatchSize, MaxBatches: r.tuning.BatchesPerActivity}
}

func (r *cleanupRun) shouldContinueAsNew(ctx workflow.Context) bool {
	info := workflow.GetInfo(ctx)
	return r.chunks >= r.tuning.ActivitiesPerRun || info.GetContinueAsNewSuggested() ||
		info.GetCurrentHistoryLength() > maxHistoryEvents
}

// continueAsNew hands the remaining sweep to a fresh execution of the same workflow id.
func (r *cleanupRun) continueAsNew(ctx workflow.Context) (CleanupResult, error) {
	r.res.Sweep.ContinuedAsNew++
	r.res.Sweep.Duration += workflow.Now(ctx).Sub(r.sweepStarted)
	next := r.in
	next.RunID = r.res.RunID
	r.sweep.Result, r.sweep.Progress = r.res, r.progress
	next.Resume = &r.sweep
	return CleanupResult{}, workflow.NewContinueAsNewError(ctx, CleanupName, next)
}

// finish counts the run's condemned set from the ledger, then ends the run with its report.
// It runs on a disconnected context: it is reached only once nothing is left to delete,
// and a cleanup cancelled now must still record its end rather than stay running.
func (r *cleanupRun) finish(ctx workflow.Context) (CleanupResult, error) {
	ctx, _ = workflow.NewDisconnectedContext(ctx)
	r.setPhase(ctx, "finish", "recording the report")
	var sum activities.CleanupSummary
	if err := untilAnsweredStep(ctx, "summarise the condemned set",
		acts.CleanupSummarize, activities.CleanupSummarizeInput{RunID: r.res.RunID, PlanRunID: r.res.PlanRunID}, &sum); err != nil {
		return r.res, fmt.Errorf("summarise: %w", err)
	}
	if r.res.Mode != CleanupModeDryRun {
		r.res.Condemned = sum.Condemned
		r.res.PlanKeyCount = sum.Condemned.Keys()
	}
	if r.res.PlanRunID != "" {
		r.res.PlanDropped = sum.PlanKeys - sum.Condemned.Keys()
	}
	r.res.Deleted = sum.Deleted
	r.res.Outcome = outcome.Done
	r.res.FinishedAt = workflow.Now(ctx)
	report, _ := json.Marshal(r.res)
	if err := untilAnsweredStep(ctx, "finish: record the report",
		acts.CleanupFinish, activities.CleanupFinishInput{RunID: r.res.RunID, Graph: r.in.Graph, Report: report}, nil); err != nil {
		return r.res, fmt.Errorf("finish: %w", err)
	}
	r.progress.Deleted, r.progress.BytesDeleted = sum.Deleted.Keys(), sum.Deleted.Bytes
	r.setPhase(ctx, "done", fmt.Sprintf("%d keys deleted, %d bytes freed", sum.Deleted.Keys(), sum.Deleted.Bytes))
	_ = workflow.UpsertTypedSearchAttributes(ctx, searchattr.Outcome.ValueSet(string(outcome.Done)))
	return r.res, nil
}

// fail ends the run failed. It is reached only when no activity of the run is still in
// flight (activities wait for their cancellation to be acknowledged), so no deletion can
// happen after the run stops refusing pins. It runs on a disconnected context, so a
// cancelled cleanup still records its end.
func (r *cleanupRun) fail(ctx workflow.Context, cause error) (CleanupResult, error) {
	var ended *temporal.ApplicationError
	if errors.As(cause, &ended) && (ended.Type() == activities.CleanupRunEndedError ||
		ended.Type() == "CleanupRunNotRunning" && strings.Contains(ended.Error(), " is done;")) {
		// An earlier execution finished the run and recorded its outcome; an operator
		// reset this one past its begin. It must not mark again: it ends conflict and
		// leaves the run's record as it is.
		r.res.Outcome, r.res.Message = outcome.Conflict, fmt.Sprintf("cleanup run %s already ended before this execution (an operator's reset?): %s", r.res.RunID, ended.Error())
		r.setPhase(ctx, "done", string(outcome.Conflict))
		_ = workflow.UpsertTypedSearchAttributes(ctx, searchattr.Outcome.ValueSet(string(outcome.Conflict)))
		return r.res, outcomeError(outcome.Conflict, r.res.Message, r.res)
	}
	ctx, _ = workflow.NewDisconnectedContext(ctx)
	r.setPhase(ctx, "done", "failed: "+cause.Error())
	r.res.Message = cause.Error()
	r.res.FinishedAt = workflow.Now(ctx)
	report, _ := json.Marshal(r.res)
	_ = untilAnsweredStep(ctx, "finish: record the failure",
		acts.CleanupFinish, activities.CleanupFinishInput{RunID: r.res.RunID, Graph: r.in.Graph, Failed: true,
			Message: cause.Error(), Report: report}, nil)
	// "failed" is the ledger's outcome of a run that gave up.
	_ = workflow.UpsertTypedSearchAttributes(ctx, searchattr.Outcome.ValueSet("failed"))
	return r.res, cause
}

func (r *cleanupRun) setPhase(ctx workflow.Context, phase, detail string) {
	r.progress.Phase = phase
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("**%s** · run %s — %s", phase, r.res.RunID, detail))
}

// runQueue starts start(item) for items taken from the front of *queue, with at most
// limit futures in flight, and calls done as each completes (done may append to *queue).
// It stops taking items when stop reports true or an error occurred, waits for every
// future in flight, and returns the first error; items not taken stay in *queue.
func runQueue[T any](ctx workflow.Context, limit int, queue *[]T, start func(T) workflow.Future,
	done func(T, workflow.Future) error, stop func() bool) error {
	sel := workflow.NewSelector(ctx)
	inflight := 0
	var first error
	for {
		for first == nil && inflight < limit && len(*queue) > 0 && !stop() {
			item := (*queue)[0]
			*queue = (*queue)[1:]
			inflight++
			sel.AddFuture(start(item), func(f workflow.Future) {
				inflight--
				if err := done(item, f); err != nil && first == nil {
					first = err
				}
			})
		}
		if inflight == 0 {
			return first
		}
		sel.Select(ctx)
	}
}

// The counts a cleanup's result reports, declared once in package contract (the
// activities fill the same types).
type (
	CleanupKept   = contract.CleanupKept
	CleanupCounts = contract.CleanupCounts
	UnsettledTree = contract.UnsettledTree
	StoreRequests = contract.StoreRequests
	RefusedKey    = contract.RefusedKey
)

// addRefused adds a sweep call's refused keys to the result, listing at most max.
func (r *CleanupResult) addRefused(p activities.CleanupSweepProgress, max int) {
	r.Refused += p.Refused
	r.RefusedKeys = appendUpTo(r.RefusedKeys, p.RefusedKeys, max)
}

// appendUpTo appends to list the items that fit in max.
func appendUpTo[T any](list, items []T, max int) []T {
	return append(list, items[:min(len(items), max-min(len(list), max))]...)
}

// CleanupObjectStats counts, apart, the objects a run decided that are neither commits,
// versions nor data objects graft wrote (docs/format.md, *Cleanup*): map chunks, external
// objects and incomplete uploads. Chunks are counted among objects in Condemned and
// Deleted too.
type CleanupObjectStats struct {
	// GraphChunks counts the pins and lineage chunks condemned; ManifestChunks the
	// manifest chunks condemned.
	GraphChunks    int64 `json:"graph_chunks"`
	ManifestChunks int64 `json:"manifest_chunks"`
	// External counts the entries of kept versions naming objects graft did not write:
	// never condemned, never deleted.
	External int64 `json:"external"`
	// Uploads: incomplete multipart uploads of the graph's object keys, found by their
	// upload records, older than the guard window and of keys no operation pins (found),
	// aborted (sweep only), and records of pinned keys left alone; UploadKeys lists up to
	// max_plan_keys of the found ones' keys. UploadRecordsRemoved counts the upload
	// records a sweep deleted: of aborted uploads and of completed ones.
	UploadsFound         int64    `json:"uploads_found"`
	UploadsAborted       int64    `json:"uploads_aborted"`
	UploadsPinned        int64    `json:"uploads_pinned,omitempty"`
	UploadRecordsRemoved int64    `json:"upload_records_removed,omitempty"`
	UploadKeys           []string `json:"upload_keys,omitempty"`
}
