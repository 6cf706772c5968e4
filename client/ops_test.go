package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/catalog/catalogtest"
)

// openOps opens Ops, through its public constructor, on a fresh ledger.
func openOps(t *testing.T, c *Client) (*Ops, *catalog.Catalog) {
	t.Helper()
	cat := catalogtest.Open(t)
	ops, err := OpenOps(context.Background(), LedgerConfig{DatabaseURL: catalogtest.DatabaseURL(), Schema: cat.Schema()}, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ops.Close)
	return ops, cat
}

func TestOps_BadFilters_AreInvalid(t *testing.T) {
	ops, _ := openOps(t, nil)
	for _, f := range []OpsFilter{{Kind: "bake"}, {State: "asleep"}, {Limit: 5000}} {
		if _, err := ops.List(context.Background(), f); !errors.Is(err, outcome.ErrInvalid) {
			t.Errorf("filter %+v: %v, want invalid", f, err)
		}
	}
}

func TestOps_ShowUnknown_IsNotFound(t *testing.T) {
	ops, _ := openOps(t, nil)
	if _, err := ops.Show(context.Background(), "nope"); !errors.Is(err, outcome.ErrNotFound) {
		t.Fatalf("show: %v, want not_found", err)
	}
	if _, err := ops.Wait(context.Background(), "nope"); !errors.Is(err, outcome.ErrNotFound) {
		t.Fatalf("wait: %v, want not_found", err)
	}
}

func TestOps_WaitWithoutWorkflow_ReturnsOnceTheLedgerSaysDone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ops, cat := openOps(t, New(nil, Options{PollInterval: 50 * time.Millisecond}))
	if _, err := cat.OperationInsert(ctx, catalog.OperationInsertParams{ID: "op-1", Kind: catalog.OpTag, Graph: "sales"}); err != nil {
		t.Fatal(err)
	}
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		time.Sleep(300 * time.Millisecond)
		if _, err := cat.OperationFinish(ctx, catalog.OperationFinishParams{ID: "op-1", Outcome: catalog.OutcomeDone}); err != nil {
			t.Error(err)
		}
	}()
	op, err := ops.Wait(ctx, "op-1")
	<-finished
	if err != nil || op.State != OperationDone || op.Outcome != outcome.Done {
		t.Fatalf("wait: %+v, %v; want done/done", op, err)
	}
	listed, err := ops.List(ctx, OpsFilter{Graph: "sales", Kind: "tag", State: "done"})
	if err != nil || len(listed) != 1 || listed[0].ID != "op-1" {
		t.Fatalf("list: %+v, %v", listed, err)
	}
}

// A caller in another module matches the ledger's failures with the client's
// own sentinels; graft's internal packages are never needed to tell them apart.
func TestOpenOps_LedgerDownOrNotMigrated_MatchesTheClientsSentinels(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := OpenOps(ctx, LedgerConfig{DatabaseURL: "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=2"}, nil)
	if !errors.Is(err, ErrLedgerUnavailable) || errors.Is(err, ErrLedgerNotMigrated) {
		t.Fatalf("postgres on a closed port: %v, want ErrLedgerUnavailable only", err)
	}
	_, err = OpenOps(ctx, LedgerConfig{DatabaseURL: catalogtest.DatabaseURL(), Schema: "graft_never_migrated"}, nil)
	if !errors.Is(err, ErrLedgerNotMigrated) || errors.Is(err, ErrLedgerUnavailable) {
		t.Fatalf("a schema without the ledger's tables: %v, want ErrLedgerNotMigrated only", err)
	}
}
