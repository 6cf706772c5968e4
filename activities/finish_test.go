package activities

import (
	"context"
	"errors"
	"testing"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/catalog/catalogtest"
)

// A create that failed or was cancelled before prepare's answer reached the
// workflow must not leave its intent witness holding the name.
func TestFinish_FailedWithoutNative_SettlesTheOperationsIntentWitness(t *testing.T) {
	ctx := context.Background()
	cat := catalogtest.Open(t)
	a := &Activities{Catalog: cat}
	owner := Owner{OpID: "op-lost", Run: "run-1"}
	if _, err := cat.OperationInsert(ctx, catalog.OperationInsertParams{ID: "op-lost", Kind: catalog.OpCreateBranch, Graph: "g", Owner: owner.Run}); err != nil {
		t.Fatal(err)
	}
	native := "feature.01JAAAAAAAAAAAAAAAAAAAAAAA"
	if _, err := cat.IncarnationInsert(ctx, catalog.IncarnationInsertParams{Graph: "g", Logical: "feature", Native: native, OpID: "op-lost"}); err != nil {
		t.Fatal(err)
	}
	if fin, err := a.Finish(ctx, FinishInput{Owner: owner, Kind: catalog.OpCreateBranch, Graph: "g", Branch: "feature"}); err != nil || !fin.Owned {
		t.Fatalf("finish: %+v, %v", fin, err)
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

// A second, different request with the same op id never touches the first's row,
// witness or pins: its finish does not land.
func TestFinish_OfAnotherRunsRow_ChangesNothing(t *testing.T) {
	ctx := context.Background()
	cat := catalogtest.Open(t)
	a := &Activities{Catalog: cat}
	if _, err := cat.OperationInsert(ctx, catalog.OperationInsertParams{ID: "op-1", Kind: catalog.OpWriteTable, Graph: "g", Owner: "run-a", WorkflowID: "wf-a"}); err != nil {
		t.Fatal(err)
	}
	if err := cat.PinsRegister(ctx, catalog.PinsRegisterParams{OpID: "op-1", Graph: "g", Owner: "run-a",
		Pins: []catalog.Pin{{Kind: catalog.ObjectCommit, Key: "g/trees/x/commits/1.json"}}}); err != nil {
		t.Fatal(err)
	}
	fin, err := a.Finish(ctx, FinishInput{Owner: Owner{OpID: "op-1", Run: "run-b"}, Kind: catalog.OpWriteTable, Outcome: outcome.Conflict})
	if err != nil || fin.Owned {
		t.Fatalf("finish by another run: %+v, %v; want nothing owned", fin, err)
	}
	op, _ := cat.OperationGet(ctx, catalog.OperationGetParams{ID: "op-1"})
	pins, _ := cat.PinsList(ctx, catalog.PinsListParams{Graph: "g"})
	if op.State != catalog.OperationRunning || len(pins) != 1 {
		t.Fatalf("row %+v, pins %v: another run's finish must change nothing", op, pins)
	}
	// A claim by a different request (other inputs) is refused without a change.
	if _, err := cat.OperationInsert(ctx, catalog.OperationInsertParams{ID: "op-1", Kind: catalog.OpWriteTable, Graph: "g",
		Inputs: []byte(`{"other":1}`), Owner: "run-b", WorkflowID: "wf-b"}); !errors.Is(err, catalog.ErrDuplicate) {
		t.Fatalf("claim by another request: %v, want ErrDuplicate", err)
	}
	// The same request from another workflow is told who runs it.
	if _, err := cat.OperationInsert(ctx, catalog.OperationInsertParams{ID: "op-1", Kind: catalog.OpWriteTable, Graph: "g",
		Owner: "run-c", WorkflowID: "wf-c"}); !errors.Is(err, catalog.ErrOwned) {
		t.Fatalf("claim from another workflow: %v, want ErrOwned", err)
	}
	if op2, _ := cat.OperationGet(ctx, catalog.OperationGetParams{ID: "op-1"}); op2.OwnerRun != "run-a" {
		t.Fatalf("owner %q after refused claims, want run-a", op2.OwnerRun)
	}
}
