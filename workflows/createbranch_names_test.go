package workflows_test

import (
	"errors"
	"testing"
	"time"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
)

// TestCreateBranch_NameChecks proves a create refuses names that storage or
// the ledger already holds, on the real stack.
func TestCreateBranch_NameChecks(t *testing.T) {
	r := newRig(t)
	r.startWorker()

	t.Run("LiveInStorageButUnknownToLedger_Conflict", func(t *testing.T) {
		// A live branch written by another tool: the ledger never saw it.
		fork := r.handBranch("legacy", r.main, time.Now(), true)
		native := format.NativeName("legacy", fork.ID.Tree)
		_, err := r.gc.CreateBranch(r.ctx, client.CreateBranchRequest{Graph: r.graph, Branch: "legacy"})
		if !errors.Is(err, outcome.ErrConflict) {
			t.Fatalf("create over a live ref unknown to the ledger: %v, want conflict", err)
		}
		if live := r.liveNatives("legacy"); len(live) != 1 || live[0] != native {
			t.Fatalf("live refs %v, want only the existing %s", live, native)
		}
		if incs := r.incarnations("legacy"); len(incs) != 0 {
			t.Fatalf("witnesses %v written for a refused create", incs)
		}
	})

	t.Run("PrefixRelativesOfLiveBranches_Conflict", func(t *testing.T) {
		for _, name := range []string{"team", "proj/x"} {
			if _, err := r.gc.CreateBranch(r.ctx, client.CreateBranchRequest{Graph: r.graph, Branch: name}); err != nil {
				t.Fatalf("create %s: %v", name, err)
			}
		}
		for _, name := range []string{"team/a", "proj"} { // a descendant and an ancestor
			_, err := r.gc.CreateBranch(r.ctx, client.CreateBranchRequest{Graph: r.graph, Branch: name})
			if !errors.Is(err, outcome.ErrConflict) {
				t.Fatalf("create %s beside a live prefix relative: %v, want conflict", name, err)
			}
			if live := r.liveNatives(name); len(live) != 0 {
				t.Fatalf("%s went live: %v", name, live)
			}
		}
		// Names that merely share characters are fine.
		if _, err := r.gc.CreateBranch(r.ctx, client.CreateBranchRequest{Graph: r.graph, Branch: "teammate"}); err != nil {
			t.Fatalf("create teammate beside team: %v", err)
		}
	})

	t.Run("ExistingBranch_Conflict", func(t *testing.T) {
		if _, err := r.gc.CreateBranch(r.ctx, client.CreateBranchRequest{Graph: r.graph, Branch: "twice"}); err != nil {
			t.Fatal(err)
		}
		_, err := r.gc.CreateBranch(r.ctx, client.CreateBranchRequest{Graph: r.graph, Branch: "twice"})
		if !errors.Is(err, outcome.ErrConflict) {
			t.Fatalf("second create: %v, want conflict", err)
		}
		if live := r.liveNatives("twice"); len(live) != 1 {
			t.Fatalf("live refs %v, want one", live)
		}
	})

	t.Run("OperationIdOfAnotherRequest_ConflictAndTheirRecordKept", func(t *testing.T) {
		first, err := r.gc.CreateBranch(r.ctx, client.CreateBranchRequest{Graph: r.graph, Branch: "one", IdempotencyKey: "shared-key"})
		if err != nil {
			t.Fatal(err)
		}
		_, err = r.gc.CreateBranch(r.ctx, client.CreateBranchRequest{Graph: r.graph, Branch: "two", IdempotencyKey: "shared-key"})
		if !errors.Is(err, outcome.ErrConflict) {
			t.Fatalf("reused key: %v, want conflict", err)
		}
		if op := r.operation(first.OpID); op.Outcome != catalog.OutcomeCreated {
			t.Fatalf("the first request's record became %s, want created", op.Outcome)
		}
		if live := r.liveNatives("two"); len(live) != 0 {
			t.Fatalf("two went live: %v", live)
		}
	})
}
