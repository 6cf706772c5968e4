package workflows_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/storage"
)

// handWrittenIncarnation writes, as an older tool would, a live incarnation
// of branch forked from main's head: a fork commit and a live ref, with no
// ledger witness. It returns the native name and the ref's bytes.
func (r *rig) handWrittenIncarnation(branch string) (string, []byte) {
	r.t.Helper()
	tree := ulid.Make()
	g := r.graphAPI()
	plan, err := g.PlanFork(r.ctx, graph.ForkSpec{Branch: branch, Tree: tree, Source: r.main.ID.String(),
		Author: "old-tool", Message: "fork", Time: time.Now().UTC(), Op: "old-tool-" + tree.String()})
	if err != nil {
		r.t.Fatalf("plan fork: %v", err)
	}
	if err := g.WriteFork(r.ctx, plan); err != nil {
		r.t.Fatalf("fork commit: %v", err)
	}
	if _, err := r.inner.Put(r.ctx, format.BranchRefKey(r.graph, plan.Ref.Native), plan.RefBody, storage.PutOptions{IfNoneMatch: true}); err != nil {
		r.t.Fatalf("put ref: %v", err)
	}
	return plan.Ref.Native, plan.RefBody
}

func TestRepairBranch_TwoLiveIncarnations_ListRefusesThenRepairKeepsOne(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.startWorker()
	reader := client.NewReader(r.inner)
	keep, _ := r.handWrittenIncarnation("dup")
	retire, retireBytes := r.handWrittenIncarnation("dup")

	_, err := reader.ListBranches(r.ctx, r.graph)
	if !errors.Is(err, outcome.ErrConflict) {
		t.Fatalf("list with two live incarnations: %v, want conflict", err)
	}
	for _, want := range []string{"graft branch repair " + r.graph + " dup --keep", keep, retire} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("refusal %q does not name %q", err, want)
		}
	}
	if _, err := reader.ShowBranch(r.ctx, r.graph, "dup"); !errors.Is(err, outcome.ErrConflict) || !strings.Contains(err.Error(), "graft branch repair") {
		t.Fatalf("show with two live incarnations: %v, want conflict naming the repair", err)
	}

	res, err := r.gc.RepairBranch(r.ctx, client.RepairBranchRequest{Graph: r.graph, Branch: "dup", Keep: keep})
	if err != nil {
		t.Fatalf("repair: %v", err)
	}
	if res.Outcome != outcome.Done || res.Kept != keep || !slices.Equal(res.Retired, []string{retire}) {
		t.Fatalf("repair %+v, want done keeping %s and retiring %s", res, keep, retire)
	}

	recordHistory(t, r, client.RepairBranchWorkflowID(r.graph, "dup"), "", "repairbranch_done")
	branches, err := reader.ListBranches(r.ctx, r.graph)
	if err != nil {
		t.Fatalf("list after repair: %v", err)
	}
	var got []string
	for _, b := range branches {
		got = append(got, b.Branch+"="+b.Native)
		if b.Head == "" || b.Tables != 1 || b.HeadTime.IsZero() {
			t.Fatalf("branch info %+v lacks its head", b)
		}
	}
	if want := []string{"dup=" + keep, "main=" + r.headNative("main")}; !slices.Equal(got, want) {
		t.Fatalf("branches %v, want %v", got, want)
	}
	ref := r.refs("dup")[retire]
	if ref.State != format.RefRetired || ref.RetiredOp != res.OpID {
		t.Fatalf("ref of %s is %+v, want retired by %s", retire, ref, res.OpID)
	}
	// The retired ref is a fence: a late put of the live ref cannot land.
	if _, err := r.inner.Put(r.ctx, format.BranchRefKey(r.graph, retire), retireBytes, storage.PutOptions{IfNoneMatch: true}); !errors.Is(err, storage.ErrPreconditionFailed) {
		t.Fatalf("late put of the retired key: %v, want precondition failed", err)
	}
	// The ledger now names the kept incarnation live; the repair is recorded.
	if inc := r.incarnation(keep); inc.State != catalog.IncarnationLive || inc.OpID != res.OpID {
		t.Fatalf("witness of %s is %+v, want live under the repair", keep, inc)
	}
	if op := r.operation(res.OpID); op.Kind != catalog.OpDeleteBranch || op.State != catalog.OperationDone || op.Outcome != catalog.OutcomeDone {
		t.Fatalf("operation %+v, want delete_branch done/done", op)
	}
}

func TestRepairBranch_KeepNotLive_IsInvalidAndRetiresNothing(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.startWorker()
	a, _ := r.handWrittenIncarnation("dup")
	b, _ := r.handWrittenIncarnation("dup")
	_, err := r.gc.RepairBranch(r.ctx, client.RepairBranchRequest{Graph: r.graph, Branch: "dup", Keep: format.NativeName("dup", ulid.Make())})
	if !errors.Is(err, outcome.ErrInvalid) || !strings.Contains(err.Error(), a) || !strings.Contains(err.Error(), b) {
		t.Fatalf("repair keeping an unknown native: %v, want invalid naming the live ones", err)
	}
	if live := r.liveNatives("dup"); len(live) != 2 {
		t.Fatalf("live refs %v, want both untouched", live)
	}
	// Leave the graph as a repair would: the oracle holds every test to one live ref per name.
	if _, err := r.gc.RepairBranch(r.ctx, client.RepairBranchRequest{Graph: r.graph, Branch: "dup", Keep: a}); err != nil {
		t.Fatalf("repair: %v", err)
	}
}

func TestReader_ShowBranchAndGraph(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	reader := client.NewReader(r.inner)
	d, err := reader.ShowBranch(r.ctx, r.graph, "main")
	if err != nil {
		t.Fatal(err)
	}
	if d.Head != r.main.ID.String() || d.Native != r.headNative("main") || d.Ref.State != "live" || d.Ref.ETag == "" ||
		len(d.Pins) != 1 || d.Pins[0].Table != "t" || d.Pins[0].Version != r.main.Pins["t"].String() ||
		!slices.Equal(d.Parents, []string{r.main.Parents[0].String()}) {
		t.Fatalf("show main: %+v", d)
	}
	if _, err := reader.ShowBranch(r.ctx, r.graph, "nope"); !errors.Is(err, outcome.ErrNotFound) {
		t.Fatalf("show unknown branch: %v, want not_found", err)
	}
	if g, err := reader.Graph(r.ctx, r.graph); err != nil || g.Name != r.graph || g.DefaultBranch != "main" {
		t.Fatalf("graph: %+v, %v", g, err)
	}
	if _, err := reader.Graph(r.ctx, "no-such-graph"); !errors.Is(err, outcome.ErrNotFound) {
		t.Fatalf("unknown graph: %v, want not_found", err)
	}
	if _, err := reader.ListBranches(r.ctx, "no-such-graph"); !errors.Is(err, outcome.ErrNotFound) {
		t.Fatalf("list unknown graph: %v, want not_found", err)
	}
}
