package catalog_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/catalog/catalogtest"
)

func TestCondemnedSummary_CountsByKindAndState_ExactAfterRepeatedMarks(t *testing.T) {
	c := catalogtest.Open(t)
	ctx := ctxFor(t)
	run := newRun(t, c, "g", catalog.CleanupSweep)
	if _, err := c.CondemnedAdd(ctx, catalog.CondemnedAddParams{RunID: run.ID, Entries: []catalog.Condemned{
		{Key: "g/trees/T/commits/1.json", Kind: catalog.ObjectCommit, Size: 5},
		{Key: "g/tables/t/versions/A.json", Kind: catalog.ObjectTableVersion, Size: 7},
		{Key: "g/tables/t/objects/A", Kind: catalog.ObjectData, Size: 100},
		{Key: "g/tables/t/objects/B", Kind: catalog.ObjectData, Size: 200},
	}}); err != nil {
		t.Fatalf("condemn: %v", err)
	}
	for range 2 { // a repeated batch changes nothing
		if _, err := c.CondemnedMarkDeleted(ctx, catalog.CondemnedMarkDeletedParams{RunID: run.ID, Keys: []string{"g/tables/t/objects/A"}}); err != nil {
			t.Fatalf("mark deleted: %v", err)
		}
	}
	got, err := c.CondemnedSummary(ctx, catalog.CondemnedSummaryParams{RunID: run.ID})
	if err != nil {
		t.Fatalf("summary: %v", err)
	}
	want := []catalog.CondemnedTally{
		{Kind: catalog.ObjectCommit, State: catalog.CondemnedPending, Count: 1, Bytes: 5},
		{Kind: catalog.ObjectData, State: catalog.CondemnedPending, Count: 1, Bytes: 200},
		{Kind: catalog.ObjectData, State: catalog.CondemnedDeleted, Count: 1, Bytes: 100},
		{Kind: catalog.ObjectTableVersion, State: catalog.CondemnedPending, Count: 1, Bytes: 7},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("summary %+v, want %+v", got, want)
	}
}

func TestCondemnedAmong_ReturnsOnlyTheRunsKeys(t *testing.T) {
	c := catalogtest.Open(t)
	ctx := ctxFor(t)
	plan := newRun(t, c, "g", catalog.CleanupMark)
	condemn(t, c, plan.ID, "g/tables/t/versions/A.json", "g/tables/t/versions/B.json")
	got, err := c.CondemnedAmong(ctx, catalog.CondemnedAmongParams{RunID: plan.ID,
		Keys: []string{"g/tables/t/versions/C.json", "g/tables/t/versions/B.json", "g/tables/t/versions/A.json"}})
	if err != nil || !slices.Equal(got, []string{"g/tables/t/versions/A.json", "g/tables/t/versions/B.json"}) {
		t.Fatalf("among = %v, %v", got, err)
	}
	if _, err := c.CondemnedAmong(ctx, catalog.CondemnedAmongParams{RunID: plan.ID, Keys: make([]string, 10001)}); !errors.Is(err, catalog.ErrInvalid) {
		t.Fatalf("10001 keys: %v, want invalid", err)
	}
}

func TestCleanupRunActive_TheRunningCondemningRunOrNotFound(t *testing.T) {
	c := catalogtest.Open(t)
	ctx := ctxFor(t)
	if _, err := c.CleanupRunActive(ctx, catalog.CleanupRunActiveParams{Graph: "g"}); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("no run: %v, want not found", err)
	}
	newRun(t, c, "g", catalog.CleanupDryRun) // a dry run condemns nothing that blocks
	run := newRun(t, c, "g", catalog.CleanupSweep)
	got, err := c.CleanupRunActive(ctx, catalog.CleanupRunActiveParams{Graph: "g"})
	if err != nil || got.ID != run.ID {
		t.Fatalf("active = %+v, %v; want %s", got, err, run.ID)
	}
	if _, err := c.CleanupRunFinish(ctx, catalog.CleanupRunFinishParams{ID: run.ID, State: catalog.CleanupDone}); err != nil {
		t.Fatalf("finish: %v", err)
	}
	if _, err := c.CleanupRunActive(ctx, catalog.CleanupRunActiveParams{Graph: "g"}); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("after finish: %v, want not found", err)
	}
}
