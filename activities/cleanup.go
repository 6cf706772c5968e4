package activities

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/bounded"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/workflows/contract"
)

// Cleanup modes, as the ledger spells them (catalog.CleanupMode).
const (
	CleanupModeDryRun = "dry_run"
	CleanupModeMark   = "mark"
	CleanupModeSweep  = "sweep"
)

// CleanupBeginInput is the input of CleanupBegin.
type CleanupBeginInput struct {
	RunID, Graph string
	Mode         string          // CleanupModeDryRun, CleanupModeMark or CleanupModeSweep
	Policy       json.RawMessage // recorded with the run and the operation
	// PlanRunID names a finished mark run whose plan this run is limited to.
	PlanRunID                 string
	WorkflowID, WorkflowRunID string
}

// CleanupBeginResult says whether the run may go on: a non-empty Outcome ends it before
// anything is read; a non-nil Orphan is a run the caller finishes first, then begins again.
type CleanupBeginResult struct {
	Outcome     outcome.Outcome
	Message     string
	ActiveRunID string // the running run that blocked this one (with Outcome conflict)
	Orphan      *CleanupOrphan
}

// CleanupOrphan is a run left running by a workflow that ended without finishing it. Its
// condemned set still refuses pins, so a sweep run's plan is still safe to delete.
type CleanupOrphan struct {
	RunID, Mode, WorkflowID string
}

// CleanupMarkTreesInput is the input of CleanupMarkTrees.
type CleanupMarkTreesInput struct {
	RunID, Graph, Mode string
	KeepNewest         int           // each live tree's newest commits by seq kept; 0 is no count window
	KeepNewerThan      time.Duration // commits newer than the reference time minus it kept; 0: no age window
	PlanRunID          string        // restricts condemnation to keys that run condemned; "": no limit
	MaxPlanKeys        int           // bounds CleanupMarkTreesResult.PlanKeys
	// GuardWindow keeps pins and lineage chunks, and commits above a live tree's head,
	// modified less than this before Now.
	GuardWindow time.Duration
}

// CleanupMarkTreesResult is what the tree phase of a mark decided.
type CleanupMarkTreesResult struct {
	Now      time.Time           // the reference time every window of the mark counts back from
	Tables   []string            // every table with a key under the graph's tables/ prefix
	Retained map[string][]string // each table's versions (ULIDs) that kept commits pin
	// RetainAllData: a kept commit could not be read: nothing under tables/ is condemned.
	RetainAllData   bool
	RetainAllReason string
	Kept            contract.CleanupKept
	Condemned       contract.CleanupCounts // the commits condemned (planned, in a dry run)
	NotInPlan       int64                  // garbage left alone because the reviewed plan did not list it
	Unsettled       []contract.UnsettledTree
	// Fenced lists the natives whose ref key this run fenced (a dry run: would have).
	Fenced, WouldFence []string
	PlanKeys           []string
	Requests           contract.StoreRequests
	// GraphChunks counts the pins and lineage chunks condemned (in Condemned.Objects too),
	// which the sweep deletes after the commits.
	GraphChunks int64
}

// CleanupMarkTableInput is the input of CleanupMarkTable.
type CleanupMarkTableInput struct {
	RunID, Graph, Table, Mode string
	Retained                  []string      // the versions (ULIDs) of the table that kept commits pin
	RetainAll                 bool          // keeps every key (CleanupMarkTreesResult.RetainAllData)
	GuardWindow               time.Duration // keeps versions and objects modified after Now minus it
	Now                       time.Time
	PlanRunID                 string
	MaxPlanKeys               int
	// Seed seeds the run's object filter, so one run's false positive is not the next's.
	Seed uint64
}

// CleanupMarkTableResult is what the table phase of a mark decided for one table.
type CleanupMarkTableResult struct {
	Kept      contract.CleanupKept
	Condemned contract.CleanupCounts
	NotInPlan int64
	PlanKeys  []string
	Requests  contract.StoreRequests
	// Chunks counts the manifest chunks condemned (in Condemned.Objects too), which the
	// sweep deletes after the versions, before the objects.
	Chunks   int64
	External int64 // kept versions' entries naming objects graft did not write (never deleted)
}

// CleanupSweepInput is the input of CleanupSweep: delete the run's condemned keys under
// Prefix (of Kind, when set), in key order.
type CleanupSweepInput struct {
	RunID, Graph string
	Prefix       string
	Kind         string // keeps only entries of this catalog object kind; "": every kind
	After        string // resumes after this key; "": from Prefix
	BatchSize    int    // the keys per DeleteBatch, at most 1000; 0: 1000
	// MaxBatches ends the call after this many batches, so a workflow sees progress and can
	// continue as new. Defaults to 50.
	MaxBatches int
}

// CleanupSweepProgress is the heartbeat of CleanupSweep, and its result: a retried
// attempt resumes from it.
type CleanupSweepProgress struct {
	After string `json:"after"` // the last key the sweep has finished with
	// Deleted and Bytes count the keys this call recorded deleted.
	Deleted int64 `json:"deleted"`
	Bytes   int64 `json:"bytes"`
	Batches int   `json:"batches"`
	// Refused counts the keys the store definitely refused to delete: they stay condemned
	// but undeleted. RefusedKeys lists the first maxRefusedListed of them.
	Refused     int64                 `json:"refused,omitempty"`
	RefusedKeys []contract.RefusedKey `json:"refused_keys,omitempty"`
	Done        bool                  `json:"done"` // no condemned key of the range is left
}

// maxRefusedListed bounds the refused keys one sweep call reports by name.
const maxRefusedListed = 100

// CleanupSummarizeInput is the input of CleanupSummarize.
type CleanupSummarizeInput struct {
	RunID     string
	PlanRunID string // the mark run whose plan the run was limited to, if any
}

// CleanupSummary is the ledger's exact count of a run's condemned set.
type CleanupSummary struct {
	// Condemned counts every key the run condemned; Deleted those recorded deleted.
	Condemned, Deleted contract.CleanupCounts
	PlanKeys           int64 // the keys of the reviewed plan (with PlanRunID)
}

// CleanupFinishInput is the input of CleanupFinish.
type CleanupFinishInput struct {
	RunID, Graph string
	// Failed finishes the run (and operation) failed instead of done; Aborted finishes it
	// aborted (an orphaned run that deleted nothing).
	Failed, Aborted bool
	Message         string
	Report          json.RawMessage // the run's summary, stored with the run
}

// CleanupUploadsInput is the input of CleanupUploads.
type CleanupUploadsInput struct {
	RunID, Graph string
	// Abort aborts the uploads found and deletes their records; false only counts them
	// (dry run, mark).
	Abort bool
	// Upload records last written, and uploads started, before Now less GuardWindow are
	// garbage unless an operation pins their object key.
	Now         time.Time
	GuardWindow time.Duration
	MaxPlanKeys int
}

// CleanupUploadsResult is what CleanupUploads found and did.
type CleanupUploadsResult struct {
	// Found counts the garbage uploads; Aborted those aborted; Pinned the records kept by a
	// pin of their object key; Removed the records deleted.
	Found, Aborted, Pinned, Removed int64
	// Unsettled counts records left alone unread (another format version, or not a record
	// of their key's object); Unknown those older than the graph.
	Unsettled, Unknown int64
	Keys               []string // up to MaxPlanKeys of the found uploads' object keys, sorted
}

// Cleanup's activities. The online-safety rules they follow are the ledger's (see
// package catalog): the run is inserted before any root is read, only keys CondemnedAdd
// accepted are deleted, each deletion is recorded with CondemnedMarkDeleted, and the run
// is finished only after its last deletion.

// CleanupBegin records the cleanup operation and inserts its run before anything is read;
// another running mark or sweep run of the graph ends it with conflict.
func (a *Activities) CleanupBegin(ctx context.Context, in CleanupBeginInput) (CleanupBeginResult, error) {
	end := func(o outcome.Outcome, f string, args ...any) (CleanupBeginResult, error) {
		return CleanupBeginResult{Outcome: o, Message: fmt.Sprintf(f, args...)}, nil
	}
	if err := format.ValidateGraphName(in.Graph); err != nil {
		return end(outcome.Invalid, "%v", err)
	}
	if _, err := graph.ReadGraph(ctx, a.Store, in.Graph); errors.Is(err, graph.ErrGraphNotFound) {
		return end(outcome.NotFound, "graph %q does not exist", in.Graph)
	} else if err != nil {
		return CleanupBeginResult{}, fmt.Errorf("read graph: %w", err)
	}
	if in.PlanRunID != "" {
		plan, err := a.Catalog.CleanupRunGet(ctx, catalog.CleanupRunGetParams{ID: in.PlanRunID})
		switch {
		case errors.Is(err, catalog.ErrNotFound):
			return end(outcome.NotFound, "cleanup run %s does not exist", in.PlanRunID)
		case err != nil:
			return CleanupBeginResult{}, fmt.Errorf("read plan run: %w", err)
		case plan.Graph != in.Graph:
			return end(outcome.Invalid, "cleanup run %s cleaned graph %q, not %q", in.PlanRunID, plan.Graph, in.Graph)
		case plan.Mode != catalog.CleanupMark:
			return end(outcome.Invalid, "cleanup run %s is a %s run; only a mark run's plan can be swept", in.PlanRunID, plan.Mode)
		case plan.State != catalog.CleanupDone:
			return end(outcome.Invalid, "cleanup run %s is %s; only a finished mark run's plan can be swept", in.PlanRunID, plan.State)
		}
	}
	op, err := a.Catalog.OperationInsert(ctx, catalog.OperationInsertParams{
		ID: in.RunID, Kind: catalog.OpCleanup, Graph: in.Graph, Inputs: in.Policy,
		WorkflowID: in.WorkflowID, RunID: in.WorkflowRunID,
	})
	if errors.Is(err, catalog.ErrDuplicate) {
		return end(outcome.Conflict, "%s", reusedMessage(in.RunID, err))
	}
	if err != nil {
		return CleanupBeginResult{}, fmt.Errorf("record operation: %w", err)
	}
	// A run id names one run: one that ended is never run again, and a run of another mode
	// under the same id is another request; neither adopts the other, nor touches its row.
	if op.State == catalog.OperationDone {
		return end(outcome.Conflict, "cleanup run %s already ended %s; a run id names one run", in.RunID, op.Outcome)
	}
	if run, err := a.Catalog.CleanupRunGet(ctx, catalog.CleanupRunGetParams{ID: in.RunID}); err == nil && string(run.Mode) != in.Mode {
		return end(outcome.Conflict, "cleanup run %s is a %s run; a run id names one request", in.RunID, run.Mode)
	} else if err != nil && !errors.Is(err, catalog.ErrNotFound) {
		return CleanupBeginResult{}, fmt.Errorf("read cleanup run: %w", err)
	}
	_, err = a.Catalog.CleanupRunInsert(ctx, catalog.CleanupRunInsertParams{
		ID: in.RunID, Graph: in.Graph, Mode: catalog.CleanupMode(in.Mode), Policy: in.Policy,
	})
	if errors.Is(err, catalog.ErrDuplicate) {
		res := CleanupBeginResult{Outcome: outcome.Conflict, Message: err.Error()}
		if active, aerr := a.Catalog.CleanupRunActive(ctx, catalog.CleanupRunActiveParams{Graph: in.Graph}); aerr == nil {
			res.ActiveRunID = active.ID
			res.Message = fmt.Sprintf("cleanup run %s (%s) is already running on graph %q", active.ID, active.Mode, in.Graph)
			orphan, err := a.orphanedRun(ctx, active)
			if err != nil {
				return CleanupBeginResult{}, err
			}
			if orphan != nil {
				return CleanupBeginResult{Orphan: orphan}, nil
			}
		}
		if _, err := a.Catalog.OperationFinish(ctx, catalog.OperationFinishParams{
			ID: in.RunID, Outcome: catalog.OutcomeConflict, Error: res.Message,
		}); err != nil {
			return CleanupBeginResult{}, fmt.Errorf("finish operation: %w", err)
		}
		return res, nil
	}
	if errors.Is(err, catalog.ErrInvalid) {
		return end(outcome.Invalid, "%v", err)
	}
	if errors.Is(err, catalog.ErrStateConflict) {
		// The reconciler ended the operation meanwhile: its workflow closed before this
		// step inserted the run (catalog.CleanupOperationAbandon). Nothing was read.
		return end(outcome.Conflict, "cleanup run %s ended before it began: its workflow closed and the reconciler finished it", in.RunID)
	}
	if err != nil {
		return CleanupBeginResult{}, fmt.Errorf("insert cleanup run: %w", err)
	}
	return CleanupBeginResult{}, nil
}

// orphanedRun reports whether a running run's workflow has ended without finishing it. It
// follows the chain from the execution recorded with the run's operation through
// continue-as-new and an operator's reset, so a run a reset execution still drives is
// never an orphan; nor is one it cannot trace to a workflow (no operation, no client).
func (a *Activities) orphanedRun(ctx context.Context, run catalog.CleanupRun) (*CleanupOrphan, error) {
	op, err := a.Catalog.OperationGet(ctx, catalog.OperationGetParams{ID: run.ID})
	if errors.Is(err, catalog.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read operation of run %s: %w", run.ID, err)
	}
	if op.WorkflowID == "" || op.RunID == "" || !activity.IsActivity(ctx) {
		return nil, nil
	}
	tc := activity.GetClient(ctx)
	if tc == nil {
		return nil, nil
	}
	orphan := &CleanupOrphan{RunID: run.ID, Mode: string(run.Mode), WorkflowID: op.WorkflowID}
	execution := op.RunID
	for range 1000 { // a chain of continue-as-new executions
		desc, err := tc.DescribeWorkflowExecution(ctx, op.WorkflowID, execution)
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			return orphan, nil // gone from the server's retention: long ended
		}
		if err != nil {
			return nil, fmt.Errorf("describe workflow of run %s: %w", run.ID, err)
		}
		status := desc.GetWorkflowExecutionInfo().GetStatus()
		// A reset terminates this execution and goes on in a new one: follow it.
		if reset := desc.GetWorkflowExtendedInfo().GetResetRunId(); reset != "" && reset != execution &&
			status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			execution = reset
			continue
		}
		switch status {
		case enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
			return nil, nil
		case enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW:
			it := tc.GetWorkflowHistory(ctx, op.WorkflowID, execution, false, enumspb.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT)
			next := ""
			for it.HasNext() {
				ev, err := it.Next()
				if err != nil {
					return nil, fmt.Errorf("read workflow history of run %s: %w", run.ID, err)
				}
				if attrs := ev.GetWorkflowExecutionContinuedAsNewEventAttributes(); attrs != nil {
					next = attrs.GetNewExecutionRunId()
				}
			}
			if next == "" {
				return nil, nil
			}
			execution = next
		default:
			return orphan, nil
		}
	}
	return nil, nil
}

// Deleting one batch: how often a batch whose answer was lost is re-sent within one
// attempt of the activity, and the first pause between re-sends.
const (
	deleteAttempts = 5
	deleteBackoff  = 50 * time.Millisecond
)

// CleanupSweep deletes the run's condemned keys under in.Prefix in key order, in batches
// of at most 1000, each deleted, recorded deleted, then reported in a heartbeat. A repeated
// or lost batch is harmless, so a dead attempt is resumed from its last heartbeat. It stops
// after in.MaxBatches batches, or when no condemned key of the range is left (Done).
//
// The ledger work of one batch (recording the previous, listing the next) runs while the
// store deletes it; the activity never returns while a deletion it started is in flight.
func (a *Activities) CleanupSweep(ctx context.Context, in CleanupSweepInput) (CleanupSweepProgress, error) {
	batchSize := cmp.Or(min(max(in.BatchSize, 0), storage.MaxBatchDelete), storage.MaxBatchDelete)
	maxBatches := cmp.Or(max(in.MaxBatches, 0), 50)
	var p CleanupSweepProgress
	if activity.IsActivity(ctx) && activity.HasHeartbeatDetails(ctx) {
		if err := activity.GetHeartbeatDetails(ctx, &p); err != nil {
			p = CleanupSweepProgress{}
		}
	}
	record := func(b sweepBatch) error {
		var gone []string
		var goneBytes int64
		for i, k := range b.keys {
			if reason, refused := b.refused[k]; refused {
				p.Refused++
				if len(p.RefusedKeys) < maxRefusedListed {
					p.RefusedKeys = append(p.RefusedKeys, contract.RefusedKey{Key: k, Reason: reason})
				}
				continue
			}
			gone = append(gone, k)
			goneBytes += b.sizes[i]
		}
		if len(gone) > 0 {
			n, err := a.Catalog.CondemnedMarkDeleted(ctx, catalog.CondemnedMarkDeletedParams{RunID: in.RunID, Keys: gone})
			if err != nil {
				return fmt.Errorf("record deletions: %w", err)
			}
			p.Deleted += n
			if n == int64(len(gone)) {
				p.Bytes += goneBytes
			}
		}
		if b.last != "" {
			p.After = b.last
			p.Batches++
			heartbeat(ctx, p)
		}
		return nil
	}

	cur, err := a.nextSweepBatch(ctx, in, max(in.Prefix, in.After, p.After), batchSize)
	if err != nil {
		return p, err
	}
	budget := maxBatches - p.Batches
	var prev *sweepBatch
	for launched := 1; ; launched++ {
		deleted := make(chan error, 1)
		go func(b *sweepBatch) {
			if len(b.keys) == 0 {
				deleted <- nil
				return
			}
			var err error
			b.refused, err = a.deleteBatch(ctx, b.keys)
			deleted <- err
		}(&cur)
		var recErr, nextErr error
		if prev != nil {
			recErr = record(*prev)
		}
		more := !cur.final && launched < budget
		var next sweepBatch
		if more && recErr == nil {
			next, nextErr = a.nextSweepBatch(ctx, in, cur.last, batchSize)
		}
		if err := <-deleted; err != nil {
			return p, err
		}
		if recErr != nil {
			return p, recErr
		}
		if nextErr != nil || !more {
			if err := record(cur); err != nil {
				return p, err
			}
			p.Done = nextErr == nil && cur.final
			return p, nextErr
		}
		done := cur
		prev, cur = &done, next
	}
}

// sweepBatch is one page of a run's condemned keys to delete.
type sweepBatch struct {
	keys    []string
	sizes   []int64           // of keys, in order
	refused map[string]string // keys the store refused to delete, with why
	last    string            // the cursor: the last key examined, "" for an empty page
	final   bool              // no condemned key of the range follows
}

// nextSweepBatch lists the run's condemned keys after after, checking first that the run
// is still running: once it is not, its condemned set no longer refuses pins, and deleting
// could remove a key an operation has since pinned.
func (a *Activities) nextSweepBatch(ctx context.Context, in CleanupSweepInput, after string, batchSize int) (sweepBatch, error) {
	run, err := a.Catalog.CleanupRunGet(ctx, catalog.CleanupRunGetParams{ID: in.RunID})
	if err != nil {
		return sweepBatch{}, fmt.Errorf("read cleanup run: %w", err)
	}
	if run.State != catalog.CleanupRunning {
		return sweepBatch{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("cleanup run %s is %s; nothing more may be deleted under it", in.RunID, run.State), "CleanupRunNotRunning", nil)
	}
	entries, err := a.Catalog.CondemnedList(ctx, catalog.CondemnedListParams{
		RunID: in.RunID, State: catalog.CondemnedPending, After: after, Limit: batchSize,
	})
	if err != nil {
		return sweepBatch{}, fmt.Errorf("list condemned keys: %w", err)
	}
	b := sweepBatch{final: len(entries) < batchSize}
	for _, e := range entries {
		if !strings.HasPrefix(e.Key, in.Prefix) {
			b.final = true
			break
		}
		b.last = e.Key
		if in.Kind == "" || string(e.Kind) == in.Kind {
			b.keys = append(b.keys, e.Key)
			b.sizes = append(b.sizes, e.Size)
		}
	}
	return b, nil
}

// deleteBatch deletes keys, re-sending (harmlessly) what an ambiguous answer or a partial
// failure left unknown. A key the store definitely refuses to delete (a 403, an object
// lock) is returned in refused and the sweep moves past it: it must never hold the run,
// the graph's next runs and every pin forever.
func (a *Activities) deleteBatch(ctx context.Context, keys []string) (refused map[string]string, err error) {
	refuse := func(k string, why error) {
		if refused == nil {
			refused = map[string]string{}
		}
		refused[k] = why.Error()
	}
	pause := deleteBackoff
	for attempt := 1; attempt <= deleteAttempts; attempt++ {
		err = a.Store.DeleteBatch(ctx, keys)
		var partial *storage.BatchError
		switch {
		case err == nil:
			return refused, nil
		case errors.As(err, &partial):
			retry := make([]string, 0, len(partial.Failed))
			for _, k := range keys {
				kerr, failed := partial.Failed[k]
				switch {
				case !failed:
				case errors.Is(kerr, storage.ErrRefused):
					refuse(k, kerr)
				default:
					retry = append(retry, k)
				}
			}
			if keys = retry; len(keys) == 0 {
				return refused, nil
			}
		case errors.Is(err, storage.ErrRefused):
			// One key may be locked, or the credentials may not delete at all: ask key by key.
			for _, k := range keys {
				kerr := a.Store.Delete(ctx, k)
				switch {
				case kerr == nil || errors.Is(kerr, storage.ErrNotFound):
				case errors.Is(kerr, storage.ErrRefused):
					refuse(k, kerr)
				default:
					return refused, fmt.Errorf("delete condemned key %s: %w", k, kerr)
				}
			}
			return refused, nil
		}
		if ctx.Err() != nil {
			break
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
		pause *= 2
	}
	return refused, fmt.Errorf("delete %d condemned keys: %w", len(keys), err)
}

// CleanupSummarize counts the run's condemned set from the ledger: exact whatever happened
// to the workers that swept it.
func (a *Activities) CleanupSummarize(ctx context.Context, in CleanupSummarizeInput) (CleanupSummary, error) {
	var s CleanupSummary
	tallies, err := a.Catalog.CondemnedSummary(ctx, catalog.CondemnedSummaryParams{RunID: in.RunID})
	if err != nil {
		return CleanupSummary{}, fmt.Errorf("summarise cleanup run: %w", err)
	}
	for _, t := range tallies {
		c := contract.CleanupCounts{Bytes: t.Bytes}
		switch t.Kind {
		case catalog.ObjectCommit, catalog.ObjectTree:
			c.Commits = t.Count
		case catalog.ObjectTableVersion:
			c.Versions = t.Count
		default:
			c.Objects = t.Count
		}
		s.Condemned.Add(c)
		if t.State == catalog.CondemnedDeleted {
			s.Deleted.Add(c)
		}
	}
	if in.PlanRunID != "" {
		plan, err := a.Catalog.CondemnedSummary(ctx, catalog.CondemnedSummaryParams{RunID: in.PlanRunID})
		if err != nil {
			return CleanupSummary{}, fmt.Errorf("summarise reviewed plan: %w", err)
		}
		for _, t := range plan {
			s.PlanKeys += t.Count
		}
	}
	return s, nil
}

// CleanupFinish ends the run, after its last deletion, with its report and records the
// operation's outcome; its condemned set then refuses no pin. A run ended already is fine.
func (a *Activities) CleanupFinish(ctx context.Context, in CleanupFinishInput) error {
	state, out := catalog.CleanupDone, catalog.OutcomeDone
	switch {
	case in.Failed:
		state, out = catalog.CleanupFailed, catalog.OutcomeFailed
	case in.Aborted:
		state, out = catalog.CleanupAborted, catalog.OutcomeFailed
	}
	_, err := a.Catalog.CleanupRunFinish(ctx, catalog.CleanupRunFinishParams{ID: in.RunID, State: state, Report: in.Report})
	if err != nil && !errors.Is(err, catalog.ErrStateConflict) && !errors.Is(err, catalog.ErrNotFound) {
		return fmt.Errorf("finish cleanup run: %w", err)
	}
	if _, err := a.Catalog.OperationFinish(ctx, catalog.OperationFinishParams{ID: in.RunID, Outcome: out, Error: in.Message}); err != nil &&
		!errors.Is(err, catalog.ErrNotFound) && !errors.Is(err, catalog.ErrStateConflict) {
		return fmt.Errorf("finish operation: %w", err)
	}
	a.observeFinished("cleanup", string(out))
	return nil
}

// CleanupUploads finds the graph's incomplete multipart uploads by their upload records
// (docs/format.md, *Upload records*), never by listing uploads under a prefix: every
// upload graft starts is recorded before it exists. A record the store last wrote before
// the guard window, whose object key no operation pins and that does not predate the
// graph, has its object key's uploads found (graph.ReclaimUpload) and, with Abort, aborted;
// then the record is deleted (only an upload's own operation completes it, and a running
// operation pins its object keys).
func (a *Activities) CleanupUploads(ctx context.Context, in CleanupUploadsInput) (CleanupUploadsResult, error) {
	var res CleanupUploadsResult
	olderThan := in.Now.Add(-in.GuardWindow)
	recs, err := graph.UploadRecords(ctx, a.Store, in.Graph, olderThan)
	if err != nil || len(recs) == 0 {
		return res, err
	}
	pins, err := listPins(ctx, a.Catalog, in.Graph, in.RunID)
	if err != nil {
		return res, err
	}
	origin, err := readOrigin(ctx, a.Store, in.Graph)
	if err != nil {
		return res, err
	}
	var todo []graph.UploadRecord
	for _, rec := range recs {
		switch {
		case pins.pinned(rec.ObjectKey):
			res.Pinned++
		case origin.predates(rec.Modified, rec.Object):
			res.Unknown++ // not the graph's: left alone
		default:
			todo = append(todo, rec)
		}
	}
	var (
		mu   sync.Mutex
		done int
	)
	err = bounded.EachErr(len(todo), getConcurrency, func(i int) error {
		r, err := graph.ReclaimUpload(ctx, a.Store, todo[i], olderThan, in.Abort)
		mu.Lock()
		defer mu.Unlock()
		if r.Unreadable != nil {
			res.Unsettled++
		}
		res.Found += int64(len(r.Uploads))
		res.Aborted += int64(r.Aborted)
		for _, u := range r.Uploads {
			if len(res.Keys) < in.MaxPlanKeys && !slices.Contains(res.Keys, u.Key) {
				res.Keys = append(res.Keys, u.Key)
			}
		}
		if r.Removed {
			res.Removed++
		}
		if done++; done%64 == 0 {
			heartbeat(ctx)
		}
		return err
	})
	slices.Sort(res.Keys)
	return res, err
}

// countingStore counts the requests a cleanup activity sends, for its report.
type countingStore struct {
	inner                      storage.Store
	list, get, head, put, dels atomic.Int64
}

func (s *countingStore) requests() contract.StoreRequests {
	return contract.StoreRequests{List: s.list.Load(), Get: s.get.Load(), Head: s.head.Load(), Put: s.put.Load(), Delete: s.dels.Load()}
}

func (s *countingStore) Get(ctx context.Context, key string) (storage.Object, error) {
	s.get.Add(1)
	return s.inner.Get(ctx, key)
}

func (s *countingStore) Head(ctx context.Context, key string) (storage.ObjectInfo, error) {
	s.head.Add(1)
	return s.inner.Head(ctx, key)
}

func (s *countingStore) Put(ctx context.Context, key string, body []byte, opts storage.PutOptions) (storage.PutResult, error) {
	s.put.Add(1)
	return s.inner.Put(ctx, key, body, opts)
}

func (s *countingStore) List(ctx context.Context, opts storage.ListOptions) (storage.ListPage, error) {
	s.list.Add(1)
	return s.inner.List(ctx, opts)
}

func (s *countingStore) Delete(ctx context.Context, key string) error {
	s.dels.Add(1)
	return s.inner.Delete(ctx, key)
}

func (s *countingStore) DeleteBatch(ctx context.Context, keys []string) error {
	s.dels.Add(1)
	return s.inner.DeleteBatch(ctx, keys)
}

// getConcurrency bounds the parallel GETs of a cleanup activity.
const getConcurrency = 16

// getListed lists prefix, then GETs every key listed (getEach); what names them in errors.
func getListed(ctx context.Context, s storage.Store, prefix, what string, fn func(key string, obj storage.Object, err error) error) error {
	var keys []string
	err := storage.ListAll(ctx, s, prefix, func(o storage.ObjectInfo) error {
		keys = append(keys, o.Key)
		return nil
	})
	if err != nil {
		return fmt.Errorf("list %s: %w", what, err)
	}
	if err := getEach(ctx, s, keys, fn); err != nil {
		return fmt.Errorf("read %s: %w", what, err)
	}
	return nil
}

// getEach GETs keys with bounded parallelism and calls fn for each, in no particular
// order and never concurrently. A missing key is passed to fn as storage.ErrNotFound;
// the first other error ends the walk and is returned.
func getEach(ctx context.Context, s storage.Store, keys []string, fn func(key string, obj storage.Object, err error) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	var first error
	n := 0
	bounded.Each(len(keys), getConcurrency, func(i int) {
		if ctx.Err() != nil {
			return
		}
		obj, err := s.Get(ctx, keys[i])
		mu.Lock()
		defer mu.Unlock()
		if first != nil {
			return
		}
		if err == nil || errors.Is(err, storage.ErrNotFound) {
			err = fn(keys[i], obj, err)
		}
		if err != nil {
			first = err
			cancel()
		} else if n++; n%256 == 0 {
			heartbeat(ctx)
		}
	})
	if first == nil && ctx.Err() != nil {
		first = ctx.Err()
	}
	return first
}

// heartbeat records a heartbeat when ctx is an activity's (the SDK throttles them).
func heartbeat(ctx context.Context, details ...any) {
	if activity.IsActivity(ctx) {
		activity.RecordHeartbeat(ctx, details...)
	}
}

// ticker returns a func that heartbeats (heartbeat) every 1000th time it is called.
func ticker(ctx context.Context) func() {
	n := 0
	return func() {
		if n++; n%1000 == 0 {
			heartbeat(ctx)
		}
	}
}

// listPins reads the graph's pins, for a dry run's own check (pinSet).
func listPins(ctx context.Context, cat *catalog.Catalog, graphName, runID string) (pinSet, error) {
	pins, err := cat.PinsList(ctx, catalog.PinsListParams{Graph: graphName, RunID: runID})
	if err != nil {
		return nil, fmt.Errorf("list pins: %w", err)
	}
	return newPinSet(pins), nil
}
