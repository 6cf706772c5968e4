package workflows_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/storage/faults"
)

// writeFiles writes each body to a file of its own and returns the paths.
func writeFiles(t *testing.T, bodies ...string) []string {
	t.Helper()
	dir := t.TempDir()
	var paths []string
	for i, b := range bodies {
		p := filepath.Join(dir, "part-"+strconv.Itoa(i)+".bin")
		if err := os.WriteFile(p, []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	return paths
}

func sha256Of(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// treePuts selects commit puts of the rig's graph.
func (r *rig) treePuts() faults.Rule {
	return faults.Rule{Op: faults.OpPut, KeyPrefix: r.graph + "/trees/"}
}

func TestWriteTable_TwoFiles_BranchHeadPinsTheNewVersion(t *testing.T) {
	r := runningRig(t)
	res, err := r.gc.WriteTable(r.ctx, r.inner, client.WriteTableRequest{
		Graph: r.graph, Branch: "main", Table: "u", Files: writeFiles(t, "alpha", "beta-beta"), Author: "ana", Message: "two parts",
	})
	if err != nil {
		t.Fatalf("write table: %v", err)
	}
	if res.Outcome != outcome.Done || res.Objects != 2 || res.Bytes != int64(len("alpha")+len("beta-beta")) || res.Version == "" {
		t.Fatalf("result %+v", res)
	}
	head := r.headOf("main")
	if head.ID.String() != res.Commit || head.Parents[0] != r.main.ID || head.Author != "ana" || head.Message != "two parts" {
		t.Fatalf("head %+v, want commit %s on top of %s", head, res.Commit, r.main.ID)
	}
	if head.Pins["u"].String() != res.Version || head.Pins["t"] != r.main.Pins["t"] {
		t.Fatalf("head pins %v, want u=%s and t kept at %s", head.Pins, res.Version, r.main.Pins["t"])
	}
	objs, err := graph.ListTableObjects(r.ctx, r.inner, r.graph, head.ID.String(), "u")
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 2 {
		t.Fatalf("version lists %d objects, want 2", len(objs))
	}
	sums := map[string]bool{sha256Of("alpha"): true, sha256Of("beta-beta"): true}
	for _, o := range objs {
		if !sums[o.SHA256] {
			t.Fatalf("object %+v has an unexpected checksum", o)
		}
		if _, err := r.inner.Head(r.ctx, o.Key); err != nil {
			t.Fatalf("object %s: %v", o.Key, err)
		}
	}
	if op := r.operation(res.OpID); op.Kind != catalog.OpWriteTable || op.State != catalog.OperationDone || op.Outcome != catalog.OutcomeDone {
		t.Fatalf("operation %+v, want write_table done/done", op)
	}
	pins, err := r.cat.PinsList(r.ctx, catalog.PinsListParams{Graph: r.graph})
	if err != nil || len(pins) != 0 {
		t.Fatalf("pins held after the write: %+v, %v", pins, err)
	}
}

func TestWriteTable_StaleExpectedHead_IsConflictAndHeadUnchanged(t *testing.T) {
	r := runningRig(t)
	stale := r.main.Parents[0].String() // main's root: one commit behind
	res, err := r.gc.WriteTable(r.ctx, r.inner, client.WriteTableRequest{
		Graph: r.graph, Branch: "main", Table: "u", Files: writeFiles(t, "x"), ExpectedHead: stale,
	})
	if !errors.Is(err, outcome.ErrConflict) || res.Outcome != outcome.Conflict || res.Commit != "" {
		t.Fatalf("write with stale head: %+v, %v; want conflict", res, err)
	}
	recordHistory(t, r, client.WriteTableWorkflowID(r.graph, "main", res.OpID), "", "writetable_stale_head_conflict")
	if head := r.headOf("main"); head.ID != r.main.ID {
		t.Fatalf("head moved to %s", head.ID)
	}
	if op := r.operation(res.OpID); op.State != catalog.OperationDone || op.Outcome != catalog.OutcomeConflict {
		t.Fatalf("operation %+v, want done/conflict", op)
	}
	// The current head as expected head succeeds.
	if _, err := r.gc.WriteTable(r.ctx, r.inner, client.WriteTableRequest{
		Graph: r.graph, Branch: "main", Table: "u", Files: writeFiles(t, "x"), ExpectedHead: r.main.ID.String(),
	}); err != nil {
		t.Fatalf("write with current head: %v", err)
	}
}

func TestWriteTable_CommitAnswerLost_CommittedExactlyOnce(t *testing.T) {
	r := runningRig(t)
	rule := r.treePuts()
	rule.Mode, rule.Times = faults.ApplyLoseAnswer, 1
	r.store.Add(rule)
	res, err := r.gc.WriteTable(r.ctx, r.inner, client.WriteTableRequest{Graph: r.graph, Branch: "main", Table: "u", Files: writeFiles(t, "x")})
	if err != nil || res.Outcome != outcome.Done {
		t.Fatalf("write: %+v, %v; want done", res, err)
	}
	recordHistory(t, r, client.WriteTableWorkflowID(r.graph, "main", res.OpID), "", "writetable_lost_ack")
	if n := r.store.CountMatching(r.treePuts()).Sent; n != 1 {
		t.Fatalf("%d commit puts sent, want 1 (the lost answer is settled by read-back)", n)
	}
	head := r.headOf("main")
	if head.ID.String() != res.Commit || head.ID.Seq != r.main.ID.Seq+1 {
		t.Fatalf("head %s, want %s exactly one commit after %s", head.ID, res.Commit, r.main.ID)
	}
	if commits := r.treeCommits(r.headNative("main")); len(commits) != 3 { // root, table t, table u
		t.Fatalf("main's tree holds %d commits, want 3", len(commits))
	}
}

func TestWriteTable_CommitPutsNeverAnswered_InDoubtThenSettled(t *testing.T) {
	r := runningRig(t)
	rule := r.treePuts()
	rule.Mode, rule.Times = faults.FailBeforeSend, 3 // every put of the first PutCommit
	r.faultThenSettleSlowly(rule)
	h, err := r.gc.StartWriteTable(r.ctx, r.inner, client.WriteTableRequest{Graph: r.graph, Branch: "main", Table: "u", Files: writeFiles(t, "x")})
	if err != nil {
		t.Fatal(err)
	}
	res, err := h.Wait(r.ctx)
	var oe *outcome.Error
	if !errors.Is(err, outcome.ErrInDoubt) || !errors.As(err, &oe) || oe.OpID != h.OpID || res.Outcome != outcome.InDoubt {
		t.Fatalf("wait: %+v, %v; want in_doubt with operation %s", res, err, h.OpID)
	}
	if op := r.operation(h.OpID); op.State != catalog.OperationInDoubt && op.State != catalog.OperationDone {
		t.Fatalf("operation state %s, want in_doubt (or done once settled)", op.State)
	}
	final, err := h.WaitFinal(r.ctx)
	if err != nil || final.Outcome != outcome.Done || final.SettleAttempts < 1 {
		t.Fatalf("final: %+v, %v; want done after a settle re-issue", final, err)
	}
	recordHistory(t, r, h.WorkflowID, h.RunID, "writetable_in_doubt_settled")
	if head := r.headOf("main"); head.ID.String() != final.Commit || head.ID.Seq != r.main.ID.Seq+1 {
		t.Fatalf("head %s, want %s", head.ID, final.Commit)
	}
	if op := r.operation(h.OpID); op.State != catalog.OperationDone || op.Outcome != catalog.OutcomeDone {
		t.Fatalf("operation %+v, want done/done", op)
	}
}

func TestWriteTable_SameIdempotencyKeyTwice_AttachesAndUploadsNothing(t *testing.T) {
	r := runningRig(t)
	req := client.WriteTableRequest{Graph: r.graph, Branch: "main", Table: "u", Files: writeFiles(t, "x"), IdempotencyKey: randomName("k-")}
	first, err := r.gc.WriteTable(r.ctx, r.inner, req)
	if err != nil {
		t.Fatal(err)
	}
	counting := faults.Wrap(r.inner)
	second, err := r.gc.WriteTable(r.ctx, counting, req)
	if err != nil {
		t.Fatal(err)
	}
	if second.Commit != first.Commit || second.Version != first.Version {
		t.Fatalf("second %+v, want the first's result %+v", second, first)
	}
	if n := counting.Count(faults.OpPut).Attempted; n != 0 {
		t.Fatalf("second request uploaded %d objects, want none", n)
	}
}

func TestWriteTable_UnknownBranch_IsNotFoundBeforeUpload(t *testing.T) {
	r := runningRig(t)
	counting := faults.Wrap(r.inner)
	_, err := r.gc.WriteTable(r.ctx, counting, client.WriteTableRequest{Graph: r.graph, Branch: "nope", Table: "u", Files: writeFiles(t, "x")})
	if !errors.Is(err, outcome.ErrNotFound) {
		t.Fatalf("write to unknown branch: %v, want not_found", err)
	}
	if n := counting.Count(faults.OpPut).Attempted; n != 0 {
		t.Fatalf("%d puts sent, want none", n)
	}
}

// headNative returns the native name of branch's live incarnation.
func (r *rig) headNative(branch string) string {
	r.t.Helper()
	b, err := graph.ResolveBranch(r.ctx, r.inner, r.graph, branch)
	if err != nil {
		r.t.Fatalf("resolve %s: %v", branch, err)
	}
	return b.Native
}
