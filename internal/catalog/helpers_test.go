package catalog_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/graftworks/graft/internal/catalog"
)

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// newOp records a running operation of kind on graph with a fresh id.
func newOp(t *testing.T, c *catalog.Catalog, kind catalog.OperationKind, graph string) catalog.Operation {
	t.Helper()
	op, err := c.OperationInsert(ctxFor(t), catalog.OperationInsertParams{
		ID: catalog.NewID(), Kind: kind, Graph: graph, Inputs: json.RawMessage(`{"test":true}`),
	})
	if err != nil {
		t.Fatalf("insert operation: %v", err)
	}
	return op
}

// newRun starts a cleanup run on graph.
func newRun(t *testing.T, c *catalog.Catalog, graph string, mode catalog.CleanupMode) catalog.CleanupRun {
	t.Helper()
	run, err := c.CleanupRunInsert(ctxFor(t), catalog.CleanupRunInsertParams{ID: catalog.NewID(), Graph: graph, Mode: mode})
	if err != nil {
		t.Fatalf("insert cleanup run: %v", err)
	}
	return run
}

// condemn condemns keys (as table versions) in run and returns the keys skipped as pinned.
func condemn(t *testing.T, c *catalog.Catalog, runID string, keys ...string) []string {
	t.Helper()
	entries := make([]catalog.Condemned, len(keys))
	for i, k := range keys {
		entries[i] = catalog.Condemned{Key: k, Kind: catalog.ObjectTableVersion, Size: 10}
	}
	res, err := c.CondemnedAdd(ctxFor(t), catalog.CondemnedAddParams{RunID: runID, Entries: entries})
	if err != nil {
		t.Fatalf("condemn %v: %v", keys, err)
	}
	return res.SkippedPinned
}

// pins builds table-version pins for keys.
func pins(keys ...string) []catalog.Pin {
	out := make([]catalog.Pin, len(keys))
	for i, k := range keys {
		out[i] = catalog.Pin{Kind: catalog.ObjectTableVersion, Key: k}
	}
	return out
}

// condemnedKeys lists the keys in run's condemned set.
func condemnedKeys(t *testing.T, c *catalog.Catalog, runID string) []string {
	t.Helper()
	entries, err := c.CondemnedList(ctxFor(t), catalog.CondemnedListParams{RunID: runID, Limit: 10000})
	if err != nil {
		t.Fatalf("list condemned: %v", err)
	}
	keys := make([]string, len(entries))
	for i, e := range entries {
		keys[i] = e.Key
	}
	return keys
}
