package catalog_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/catalog/catalogtest"
)

func TestCleanupRunInsert_SecondCondemningRunOnGraph_IsDuplicateUntilTheFirstFinishes(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	first := newRun(t, c, "g", catalog.CleanupSweep)
	_, err := c.CleanupRunInsert(ctxFor(t), catalog.CleanupRunInsertParams{ID: catalog.NewID(), Graph: "g", Mode: catalog.CleanupMark})
	if !errors.Is(err, catalog.ErrDuplicate) {
		t.Fatalf("second mark run while a sweep runs: err = %v, want ErrDuplicate", err)
	}
	newRun(t, c, "g", catalog.CleanupDryRun) // a dry run condemns nothing that blocks pins
	newRun(t, c, "h", catalog.CleanupSweep)  // another graph is independent

	if _, err := c.CleanupRunFinish(ctxFor(t), catalog.CleanupRunFinishParams{ID: first.ID, State: catalog.CleanupDone}); err != nil {
		t.Fatalf("finish: %v", err)
	}
	newRun(t, c, "g", catalog.CleanupMark)
}

func TestCleanupRunInsert_Repeated_ReturnsTheExistingRun(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	p := catalog.CleanupRunInsertParams{ID: "run-1", Graph: "g", Mode: catalog.CleanupSweep, Policy: json.RawMessage(`{"keep_newest": 5}`)}
	first, err := c.CleanupRunInsert(ctxFor(t), p)
	if err != nil {
		t.Fatalf("insert: %v", err)
	}
	again, err := c.CleanupRunInsert(ctxFor(t), p)
	if err != nil || !again.StartedAt.Equal(first.StartedAt) || again.State != catalog.CleanupRunning {
		t.Errorf("repeated insert = %+v, %v; want the running run", again, err)
	}
	p.Mode = catalog.CleanupMark
	if _, err := c.CleanupRunInsert(ctxFor(t), p); !errors.Is(err, catalog.ErrDuplicate) {
		t.Errorf("same id, other mode: err = %v, want ErrDuplicate", err)
	}
	got, err := c.CleanupRunGet(ctxFor(t), catalog.CleanupRunGetParams{ID: "run-1"})
	var policy map[string]int
	if err != nil || json.Unmarshal(got.Policy, &policy) != nil || policy["keep_newest"] != 5 {
		t.Errorf("get = %+v, %v; want the policy back", got, err)
	}
}

func TestCleanupRunFinish_RepeatedOrConflicting_IsIdempotentOrStateConflict(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	run := newRun(t, c, "g", catalog.CleanupSweep)
	done, err := c.CleanupRunFinish(ctxFor(t), catalog.CleanupRunFinishParams{ID: run.ID, State: catalog.CleanupDone, Report: json.RawMessage(`{"deleted": 3}`)})
	if err != nil || done.State != catalog.CleanupDone || done.FinishedAt.IsZero() || len(done.Report) == 0 {
		t.Fatalf("finish = %+v, %v; want done with a report", done, err)
	}
	again, err := c.CleanupRunFinish(ctxFor(t), catalog.CleanupRunFinishParams{ID: run.ID, State: catalog.CleanupDone})
	if err != nil || !again.FinishedAt.Equal(done.FinishedAt) {
		t.Errorf("repeated finish = %+v, %v; want the unchanged run", again, err)
	}
	if _, err := c.CleanupRunFinish(ctxFor(t), catalog.CleanupRunFinishParams{ID: run.ID, State: catalog.CleanupAborted}); !errors.Is(err, catalog.ErrStateConflict) {
		t.Errorf("abort a done run: err = %v, want ErrStateConflict", err)
	}
	if _, err := c.CleanupRunFinish(ctxFor(t), catalog.CleanupRunFinishParams{ID: run.ID, State: catalog.CleanupRunning}); !errors.Is(err, catalog.ErrInvalid) {
		t.Errorf("finish as running: err = %v, want ErrInvalid", err)
	}
	_, err = c.CondemnedAdd(ctxFor(t), catalog.CondemnedAddParams{RunID: run.ID, Entries: []catalog.Condemned{{Key: v1, Kind: catalog.ObjectTableVersion}}})
	if !errors.Is(err, catalog.ErrStateConflict) {
		t.Errorf("condemn in a finished run: err = %v, want ErrStateConflict", err)
	}
	runs, err := c.CleanupRunList(ctxFor(t), catalog.CleanupRunListParams{Graph: "g"})
	if err != nil || len(runs) != 1 || runs[0].ID != run.ID {
		t.Errorf("list = %+v, %v; want the one run", runs, err)
	}
}

func TestCondemnedList_Pages_InKeyOrderAndByState(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	run := newRun(t, c, "g", catalog.CleanupSweep)
	var keys []string
	for i := range 7 {
		keys = append(keys, fmt.Sprintf("g/tables/t/objects/%02d", i))
	}
	shuffled := slices.Clone(keys)
	slices.Reverse(shuffled)
	condemn(t, c, run.ID, shuffled...)
	condemn(t, c, run.ID, keys[0]) // condemning twice changes nothing

	var paged []string
	after := ""
	for {
		page, err := c.CondemnedList(ctxFor(t), catalog.CondemnedListParams{RunID: run.ID, After: after, Limit: 3})
		if err != nil {
			t.Fatalf("list: %v", err)
		}
		if len(page) == 0 {
			break
		}
		for _, e := range page {
			paged = append(paged, e.Key)
			if e.State != catalog.CondemnedPending || e.Size != 10 || e.Graph != "g" {
				t.Errorf("entry %+v, want condemned, size 10, graph g", e)
			}
		}
		after = page[len(page)-1].Key
	}
	if !slices.Equal(paged, keys) {
		t.Errorf("paged keys %v, want %v", paged, keys)
	}

	n, err := c.CondemnedMarkDeleted(ctxFor(t), catalog.CondemnedMarkDeletedParams{RunID: run.ID, Keys: []string{keys[1], keys[4], "not-condemned"}})
	if err != nil || n != 2 {
		t.Errorf("mark deleted = %d, %v; want 2", n, err)
	}
	n, err = c.CondemnedMarkDeleted(ctxFor(t), catalog.CondemnedMarkDeletedParams{RunID: run.ID, Keys: []string{keys[1]}})
	if err != nil || n != 0 {
		t.Errorf("mark deleted again = %d, %v; want 0", n, err)
	}
	deleted, err := c.CondemnedList(ctxFor(t), catalog.CondemnedListParams{RunID: run.ID, State: catalog.CondemnedDeleted})
	if err != nil || len(deleted) != 2 || deleted[0].Key != keys[1] || deleted[1].Key != keys[4] || deleted[0].DeletedAt.IsZero() {
		t.Errorf("deleted entries %+v, %v; want %s and %s with DeletedAt", deleted, err, keys[1], keys[4])
	}

	// A deleted key stays off limits to pins while the run is active.
	op := newOp(t, c, catalog.OpRestore, "g")
	if err := register(t, c, op.ID, pins(keys[1])...); !errors.Is(err, catalog.ErrCondemned) {
		t.Errorf("pin a deleted key during the run: err = %v, want ErrCondemned", err)
	}
}

func TestCondemnedAdd_BadEntries_AreInvalid(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	run := newRun(t, c, "g", catalog.CleanupSweep)
	for _, e := range []catalog.Condemned{
		{Key: "", Kind: catalog.ObjectData},
		{Key: "k", Kind: "ref"},
		{Key: "k", Kind: catalog.ObjectData, Size: -1},
	} {
		_, err := c.CondemnedAdd(ctxFor(t), catalog.CondemnedAddParams{RunID: run.ID, Entries: []catalog.Condemned{e}})
		if !errors.Is(err, catalog.ErrInvalid) {
			t.Errorf("condemn %+v: err = %v, want ErrInvalid", e, err)
		}
	}
	_, err := c.CondemnedAdd(ctxFor(t), catalog.CondemnedAddParams{RunID: "missing", Entries: []catalog.Condemned{{Key: "k", Kind: catalog.ObjectData}}})
	if !errors.Is(err, catalog.ErrNotFound) {
		t.Errorf("condemn in a missing run: err = %v, want ErrNotFound", err)
	}
}

// TestCleanupOperationAbandon_RunNeverInserted_FinishedFailedAndTheRunNeverInsertedAfter: a
// cleanup operation whose workflow closed between recording it and inserting its run is
// finished failed, and a begin step still in flight cannot insert the run after; one whose
// run exists, or that is done, is left alone.
func TestCleanupOperationAbandon_RunNeverInserted_FinishedFailedAndTheRunNeverInsertedAfter(t *testing.T) {
	t.Parallel()
	c := catalogtest.Open(t)
	unbegun := newOp(t, c, catalog.OpCleanup, "g")
	done, err := c.CleanupOperationAbandon(ctxFor(t), catalog.CleanupOperationAbandonParams{OpID: unbegun.ID, Message: "its workflow ended"})
	if err != nil || !done {
		t.Fatalf("abandon a cleanup operation without a run: %v, %v; want done", done, err)
	}
	op, err := c.OperationGet(ctxFor(t), catalog.OperationGetParams{ID: unbegun.ID})
	if err != nil || op.State != catalog.OperationDone || op.Outcome != catalog.OutcomeFailed || op.Error != "its workflow ended" {
		t.Fatalf("operation after the abandon: %+v, %v; want done, failed, with the reason", op, err)
	}
	_, err = c.CleanupRunInsert(ctxFor(t), catalog.CleanupRunInsertParams{ID: unbegun.ID, Graph: "g", Mode: catalog.CleanupSweep})
	if !errors.Is(err, catalog.ErrStateConflict) {
		t.Fatalf("insert the run of an ended operation: %v, want a state conflict", err)
	}
	if _, err := c.CleanupRunGet(ctxFor(t), catalog.CleanupRunGetParams{ID: unbegun.ID}); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("run of the abandoned operation: %v, want none", err)
	}
	if done, err := c.CleanupOperationAbandon(ctxFor(t), catalog.CleanupOperationAbandonParams{OpID: unbegun.ID}); err != nil || done {
		t.Errorf("abandon it again: %v, %v; want left alone", done, err)
	}

	begun := newOp(t, c, catalog.OpCleanup, "g")
	if _, err := c.CleanupRunInsert(ctxFor(t), catalog.CleanupRunInsertParams{ID: begun.ID, Graph: "g", Mode: catalog.CleanupSweep}); err != nil {
		t.Fatalf("insert the run of a running operation: %v", err)
	}
	if done, err := c.CleanupOperationAbandon(ctxFor(t), catalog.CleanupOperationAbandonParams{OpID: begun.ID}); err != nil || done {
		t.Errorf("abandon an operation whose run exists: %v, %v; want left to the next cleanup", done, err)
	}
	if op, err := c.OperationGet(ctxFor(t), catalog.OperationGetParams{ID: begun.ID}); err != nil || op.State == catalog.OperationDone {
		t.Errorf("operation with a run after the abandon: %+v, %v; want still running", op, err)
	}
	write := newOp(t, c, catalog.OpWriteTable, "g")
	if _, err := c.CleanupOperationAbandon(ctxFor(t), catalog.CleanupOperationAbandonParams{OpID: write.ID}); !errors.Is(err, catalog.ErrInvalid) {
		t.Errorf("abandon a write as a cleanup: %v, want invalid", err)
	}
	if _, err := c.CleanupOperationAbandon(ctxFor(t), catalog.CleanupOperationAbandonParams{OpID: catalog.NewID()}); !errors.Is(err, catalog.ErrNotFound) {
		t.Errorf("abandon an unknown operation: %v, want not found", err)
	}
}
