package activities

import (
	"context"
	"testing"

	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/catalog/catalogtest"
)

// A create that failed or was cancelled before prepare's answer reached the
// workflow must not leave its intent witness holding the name.
func TestFinishCreate_FailedWithoutNative_SettlesTheOperationsIntentWitness(t *testing.T) {
	ctx := context.Background()
	cat := catalogtest.Open(t)
	a := &Activities{Catalog: cat}
	if _, err := cat.OperationInsert(ctx, catalog.OperationInsertParams{ID: "op-lost", Kind: catalog.OpCreateBranch, Graph: "g"}); err != nil {
		t.Fatal(err)
	}
	native := "feature.01JAAAAAAAAAAAAAAAAAAAAAAA"
	if _, err := cat.IncarnationInsert(ctx, catalog.IncarnationInsertParams{Graph: "g", Logical: "feature", Native: native, OpID: "op-lost"}); err != nil {
		t.Fatal(err)
	}
	if err := a.FinishCreate(ctx, FinishInput{OpID: "op-lost", Graph: "g", Branch: "feature"}); err != nil {
		t.Fatalf("finish: %v", err)
	}
	inc, err := cat.IncarnationGetByNative(ctx, catalog.IncarnationGetByNativeParams{Graph: "g", Native: native})
	if err != nil || inc.State != catalog.IncarnationUnpublished {
		t.Fatalf("witness %+v, %v; want unpublished", inc, err)
	}
	op, err := cat.OperationGet(ctx, catalog.OperationGetParams{ID: "op-lost"})
	if err != nil || op.Outcome != catalog.OutcomeFailed {
		t.Fatalf("operation %+v, %v; want failed", op, err)
	}
	// The name is free again.
	if _, err := cat.OperationInsert(ctx, catalog.OperationInsertParams{ID: "op-next", Kind: catalog.OpCreateBranch, Graph: "g"}); err != nil {
		t.Fatal(err)
	}
	if _, err := cat.IncarnationInsert(ctx, catalog.IncarnationInsertParams{Graph: "g", Logical: "feature", Native: "feature.01JBBBBBBBBBBBBBBBBBBBBBBB", OpID: "op-next"}); err != nil {
		t.Fatalf("a new create of the name after the failed one: %v", err)
	}
}
