package activities

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/catalog/catalogtest"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/storage/memstore"
)

// The tests in this file hold the claim behind catalog.InTxRecoverable: a transaction that
// commits without waiting for the WAL flush records only what the reconciler derives again,
// so losing it in a crash of Postgres leaves the ledger as a worker that stopped between
// the operation's last write and its finish would, and the reconciler settles the same end.
// They run on the in-memory store with a real ledger; the loss is simulated by putting the
// operation's rows back as they were before the lost transaction.

// closedWorkflows tells the reconciler every workflow has closed.
type closedWorkflows struct{}

func (closedWorkflows) WorkflowClosed(context.Context, string) (bool, error) { return true, nil }

// ledgerSnapshot holds an operation's rows: its operations row, its witnesses and its pins.
type ledgerSnapshot struct{ op, incs, pins []byte }

func snapshotLedger(t *testing.T, cat *catalog.Catalog, opID string) ledgerSnapshot {
	t.Helper()
	var s ledgerSnapshot
	err := cat.InTx(context.Background(), func(tx pgx.Tx) error {
		for _, q := range []struct {
			sql string
			out *[]byte
		}{
			{`SELECT to_jsonb(o) FROM operations o WHERE id = $1`, &s.op},
			{`SELECT coalesce(jsonb_agg(i), '[]') FROM incarnations i WHERE op_id = $1`, &s.incs},
			{`SELECT coalesce(jsonb_agg(p), '[]') FROM op_pins p WHERE op_id = $1`, &s.pins},
		} {
			if err := tx.QueryRow(context.Background(), q.sql, opID).Scan(q.out); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("snapshot the ledger: %v", err)
	}
	return s
}

// restoreLedger puts an operation's rows back as snapshotted: what the ledger holds after
// a crash of Postgres lost every transaction of the operation committed since.
func restoreLedger(t *testing.T, cat *catalog.Catalog, opID string, s ledgerSnapshot) {
	t.Helper()
	err := cat.InTx(context.Background(), func(tx pgx.Tx) error {
		ctx := context.Background()
		for _, q := range []string{
			`DELETE FROM op_pins WHERE op_id = $1`,
			`DELETE FROM incarnations WHERE op_id = $1`,
			`DELETE FROM operations WHERE id = $1`,
		} {
			if _, err := tx.Exec(ctx, q, opID); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `INSERT INTO operations SELECT * FROM jsonb_populate_record(NULL::operations, $1)`, s.op); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO incarnations SELECT * FROM jsonb_populate_recordset(NULL::incarnations, $1)`, s.incs); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO op_pins SELECT * FROM jsonb_populate_recordset(NULL::op_pins, $1)`, s.pins)
		return err
	})
	if err != nil {
		t.Fatalf("restore the ledger: %v", err)
	}
}

// clonedCreate inits graph g and runs a create of "feature" (operation op-create, run
// run-1) up to its ref put: prepared, its pending write recorded, its tree cloned.
func clonedCreate(t *testing.T) (*Activities, *catalog.Catalog, *memstore.Store, Owner, PrepareCreateResult) {
	t.Helper()
	ctx := context.Background()
	cat := catalogtest.Open(t)
	store := memstore.New()
	a := &Activities{Store: store, Catalog: cat, Workflows: closedWorkflows{}}
	if _, err := graph.Init(ctx, store, graph.InitParams{Graph: "g", MainTree: ulid.Make(), Op: "init", Time: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	owner := Owner{OpID: "op-create", Run: "run-1"}
	prep, err := a.PrepareCreate(ctx, PrepareCreateInput{OpID: owner.OpID, Graph: "g", Branch: "feature", Time: time.Now().UTC(),
		Attempt: 1, WorkflowID: "wf-create", RunID: owner.Run})
	if err != nil || prep.Outcome != "" || prep.RefSpec == nil {
		t.Fatalf("prepare: %+v, %v", prep, err)
	}
	if op, _ := cat.OperationGet(ctx, catalog.OperationGetParams{ID: owner.OpID}); len(op.Pending) == 0 {
		t.Fatal("prepare did not record the ref put as the operation's pending write")
	}
	clone, err := a.CloneTree(ctx, CloneInput{Owner: owner, Graph: "g", Native: prep.Native, ForkID: prep.ForkID, ForkBytes: prep.ForkBytes, ForkChunks: prep.ForkChunks})
	if err != nil || clone.State != CloneCommitted {
		t.Fatalf("clone: %+v, %v", clone, err)
	}
	return a, cat, store, owner, prep
}

// reconcileOne runs a reconcile pass of graph g and wants it to settle one operation
// with want.
func reconcileOne(t *testing.T, a *Activities, want outcome.Outcome) {
	t.Helper()
	res, err := a.Reconcile(context.Background(), ReconcileInput{Run: "rec-1", Graph: "g"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Settled) != 1 || res.Settled[0].Outcome != want {
		t.Fatalf("reconciled %+v, want one operation settled %s", res.Settled, want)
	}
}

func TestCreate_LiveWitnessAndFinishLostInACrash_ReconcilerFinishesItCreated(t *testing.T) {
	ctx := context.Background()
	a, cat, store, owner, prep := clonedCreate(t)
	before := snapshotLedger(t, cat, owner.OpID)
	v, err := a.Write(ctx, WriteInput{Owner: owner, Spec: *prep.RefSpec, PendingRecorded: true})
	if err != nil || v.State != Landed || !v.Recorded {
		t.Fatalf("write: %+v, %v", v, err)
	}
	// The crash: the live witness and the finish (one recoverable commit) are lost.
	restoreLedger(t, cat, owner.OpID, before)

	reconcileOne(t, a, outcome.Created)
	op, _ := cat.OperationGet(ctx, catalog.OperationGetParams{ID: owner.OpID})
	inc, _ := cat.IncarnationGetByNative(ctx, catalog.IncarnationGetByNativeParams{Graph: "g", Native: prep.Native})
	pins, _ := cat.PinsList(ctx, catalog.PinsListParams{Graph: "g"})
	if op.State != catalog.OperationDone || op.Outcome != catalog.OutcomeCreated || inc.State != catalog.IncarnationLive || len(pins) != 0 {
		t.Fatalf("after the reconciler: operation %s/%s, witness %s, %d pins; want done/created, live, none", op.State, op.Outcome, inc.State, len(pins))
	}
	b, err := graph.ResolveBranch(ctx, store, "g", "feature")
	if err != nil || b.Native != prep.Native {
		t.Fatalf("resolve feature: %+v, %v", b, err)
	}
}

func TestDelete_RetireWitnessAndFinishLostInACrash_ReconcilerFinishesItDeleted(t *testing.T) {
	ctx := context.Background()
	a, cat, store, create, prep := clonedCreate(t)
	if v, err := a.Write(ctx, WriteInput{Owner: create, Spec: *prep.RefSpec, PendingRecorded: true}); err != nil || v.State != Landed {
		t.Fatalf("create's ref: %+v, %v", v, err)
	}

	del := Owner{OpID: "op-delete", Run: "run-2"}
	dp, err := a.PrepareDeleteBranch(ctx, PrepareDeleteBranchInput{OpID: del.OpID, Graph: "g", Branch: "feature", WorkflowID: "wf-delete", RunID: del.Run})
	if err != nil || dp.Outcome != "" || !dp.PendingRecorded {
		t.Fatalf("prepare delete: %+v, %v", dp, err)
	}
	before := snapshotLedger(t, cat, del.OpID)
	witnessBefore, _ := cat.IncarnationGetByNative(ctx, catalog.IncarnationGetByNativeParams{Graph: "g", Native: prep.Native})
	v, err := a.Write(ctx, WriteInput{Owner: del, Spec: dp.Spec, PendingRecorded: true})
	if err != nil || v.State != Landed {
		t.Fatalf("retire: %+v, %v", v, err)
	}
	if _, err := a.Finish(ctx, FinishInput{Owner: del, Kind: catalog.OpDeleteBranch, Graph: "g", Branch: "feature", Outcome: outcome.Deleted}); err != nil {
		t.Fatal(err)
	}
	// The crash loses the retired witness and the finish, both recoverable commits.
	restoreLedger(t, cat, del.OpID, before)
	if err := cat.InTx(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE incarnations SET state = $2, settled_at = $3, updated_at = $4 WHERE native = $1`,
			prep.Native, string(witnessBefore.State), witnessBefore.SettledAt, witnessBefore.UpdatedAt)
		return err
	}); err != nil {
		t.Fatal(err)
	}

	reconcileOne(t, a, outcome.Deleted)
	op, _ := cat.OperationGet(ctx, catalog.OperationGetParams{ID: del.OpID})
	inc, _ := cat.IncarnationGetByNative(ctx, catalog.IncarnationGetByNativeParams{Graph: "g", Native: prep.Native})
	if op.Outcome != catalog.OutcomeDeleted || inc.State != catalog.IncarnationRetired {
		t.Fatalf("after the reconciler: operation %s, witness %s; want deleted, retired", op.Outcome, inc.State)
	}
	obj, err := store.Get(ctx, format.BranchRefKey("g", prep.Native))
	if err != nil {
		t.Fatal(err)
	}
	if ref, err := format.DecodeBranchRef(obj.Body); err != nil || ref.State != format.RefRetired || ref.RetiredOp != del.OpID {
		t.Fatalf("ref %+v, %v; want retired by %s", ref, err, del.OpID)
	}
}

// finishDerivable is what decides whether a finish may commit without the WAL flush: only
// when the reconciler would find the pending write landed and record the same outcome.
func TestFinishDerivable_OnlyTheLandedOutcomeOfAPendingWrite(t *testing.T) {
	spec, _ := json.Marshal(WriteSpec{Kind: WriteRef, Graph: "g", Landed: outcome.Created})
	for _, c := range []struct {
		pending []byte
		out     outcome.Outcome
		want    bool
	}{
		{spec, outcome.Created, true},
		{spec, outcome.Unpublished, false},
		{spec, outcome.Conflict, false},
		{spec, "", false},
		{nil, outcome.Invalid, false},
		{nil, outcome.Created, false},
	} {
		if got := finishDerivable(catalog.Operation{Pending: c.pending}, c.out); got != c.want {
			t.Errorf("pending %s, outcome %q: derivable %v, want %v", c.pending, c.out, got, c.want)
		}
	}
}
