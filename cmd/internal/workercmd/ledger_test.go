package workercmd

import (
	"context"
	"testing"
	"time"

	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/catalog/catalogtest"
)

// inDoubtCreate records a create whose operation and witness are in doubt.
func inDoubtCreate(t *testing.T, cat *catalog.Catalog, opID, native string) {
	t.Helper()
	ctx := context.Background()
	if _, err := cat.OperationInsert(ctx, catalog.OperationInsertParams{ID: opID, Kind: catalog.OpCreateBranch, Graph: "g"}); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.IncarnationInsert(ctx, catalog.IncarnationInsertParams{Graph: "g", Logical: "b", Native: native, OpID: opID}); err != nil {
		t.Fatal(err)
	}
	for _, step := range [][2]catalog.IncarnationState{{catalog.IncarnationIntent, catalog.IncarnationCloned}, {catalog.IncarnationCloned, catalog.IncarnationInDoubt}} {
		if _, err := cat.IncarnationSetState(ctx, catalog.IncarnationSetStateParams{Graph: "g", Native: native, From: step[0], To: step[1]}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cat.OperationSetState(ctx, catalog.OperationSetStateParams{ID: opID, From: catalog.OperationRunning, To: catalog.OperationInDoubt}); err != nil {
		t.Fatal(err)
	}
}

// TestLedgerMetrics_InDoubt_ReadFromTheLedger_EveryProcessAndAfterARestart: the
// in-doubt figures come from the ledger on each scrape, so a worker started after
// the operation went into doubt — one that never saw it happen — reports it, and
// never a negative count.
func TestLedgerMetrics_InDoubt_ReadFromTheLedger_EveryProcessAndAfterARestart(t *testing.T) {
	cat := catalogtest.Open(t)
	detached := NewMetrics()
	wantLine(t, scrape(t, detached), `graft_ledger_up 0`)

	inDoubtCreate(t, cat, "op-1", "b.01J00000000000000000000001")
	time.Sleep(1100 * time.Millisecond)
	for _, m := range []*Metrics{NewMetrics(), NewMetrics()} { // two workers, or one restarted
		m.AttachLedger(cat)
		body := scrape(t, m)
		wantLine(t, body, `graft_ledger_up 1`)
		wantLine(t, body, `graft_in_doubt\{kind="create_branch"\} 1`)
		wantLine(t, body, `graft_in_doubt\{kind="merge"\} 0`)
		wantLine(t, body, `graft_in_doubt_oldest_seconds\{kind="create_branch"\} ([1-9][0-9]*(\.[0-9]+)?|[0-9]+\.[0-9]+e\+[0-9]+)`)
		wantLine(t, body, `graft_witnesses_unsettled\{state="in_doubt"\} 1`)
		wantLine(t, body, `graft_operations_unfinished\{kind="create_branch",state="in_doubt"\} 1`)
		wantLine(t, body, `graft_objects_swept_total 0`)
	}

	// Settled: the figures drop to 0 at the next scrape.
	ctx := context.Background()
	if _, err := cat.IncarnationSettle(ctx, catalog.IncarnationSettleParams{Graph: "g", Native: "b.01J00000000000000000000001", To: catalog.IncarnationLive}); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.OperationFinish(ctx, catalog.OperationFinishParams{ID: "op-1", Outcome: catalog.OutcomeCreated}); err != nil {
		t.Fatal(err)
	}
	m := NewMetrics()
	m.AttachLedger(cat)
	body := scrape(t, m)
	wantLine(t, body, `graft_in_doubt\{kind="create_branch"\} 0`)
	wantLine(t, body, `graft_witnesses_unsettled\{state="in_doubt"\} 0`)
}

// TestIncarnationSettle_FromSince_IsWhenTheDoubtBegan: the settle of an in-doubt
// witness reports when its doubt began, so graft_settle_seconds measures the doubt
// (here over a second), not the few milliseconds between the settle's own write and
// its read of the row it just wrote.
func TestIncarnationSettle_FromSince_IsWhenTheDoubtBegan(t *testing.T) {
	cat := catalogtest.Open(t)
	inDoubtCreate(t, cat, "op-2", "b.01J00000000000000000000002")
	time.Sleep(1200 * time.Millisecond)
	res, err := cat.IncarnationSettle(context.Background(), catalog.IncarnationSettleParams{Graph: "g", Native: "b.01J00000000000000000000002", To: catalog.IncarnationLive})
	if err != nil {
		t.Fatal(err)
	}
	if res.From != catalog.IncarnationInDoubt || res.FromSince.IsZero() {
		t.Fatalf("settle result %+v, want from in_doubt with the time it began", res)
	}
	if doubt := res.Incarnation.UpdatedAt.Sub(res.FromSince); doubt < time.Second || doubt > time.Minute {
		t.Fatalf("doubt measured %s, want the 1.2s it lasted", doubt)
	}
}
