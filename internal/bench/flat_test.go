package bench

import (
	"context"
	"maps"
	"testing"

	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/storage/faults"
	"github.com/graftworks/graft/storage/memstore"
	"github.com/graftworks/graft/workflows"
)

// deepHistory is the long history the flatness tests compare with depth 0:
// issue 13 asks for request counts at depth 10,000 equal to depth 0's. The
// graphs are built on the in-memory store, where 10,000 commits take a
// moment; request counts do not depend on the store (the depth-0 and -64
// tests above run the same operations on the local store and versitygw).
const deepHistory = 10_000

// TestRequests_CreateMergeHeadRead_SameAtDepth10000AsAt0 proves a create
// (through the engine), a three-way merge (through the engine) and a head
// read cost the same object-store requests at depth 10,000 as at depth 0,
// in graphs of 121 tables.
func TestRequests_CreateMergeHeadRead_SameAtDepth10000AsAt0(t *testing.T) {
	type counts map[string]map[faults.Op]int
	at := map[int]counts{}
	for _, depth := range []int{0, deepHistory} {
		cs := newCreateStackOn(t, memstore.New(), depth, mergeTables)
		got := counts{}

		cs.store.ResetCounts()
		if err := cs.createEngine(context.Background()); err != nil {
			t.Fatalf("depth %d: create: %v", depth, err)
		}
		got["create"] = target{Store: cs.store}.sent()

		b, err := graph.ResolveBranch(context.Background(), cs.store, cs.graph, graph.DefaultBranch)
		if err != nil {
			t.Fatal(err)
		}
		cs.store.ResetCounts()
		head, err := graph.ReadHead(context.Background(), cs.store, cs.graph, b.Tree)
		if err != nil {
			t.Fatalf("depth %d: read head: %v", depth, err)
		}
		if want := int64(depth + 1); head.ID.Seq != want { // the table commit, then depth more
			t.Fatalf("depth %d: head %s, want seq %d", depth, head.ID, want)
		}
		got["read head"] = target{Store: cs.store}.sent()

		ms := newMergeStackFrom(t, cs)
		source := ms.prepare(t, depth, 8)
		cs.store.ResetCounts()
		ms.mergeOnce(t, source, 8)
		got["merge"] = target{Store: cs.store}.sent()
		at[depth] = got
	}
	for op, want := range map[string]int{"create": SuccessPathRequests, "read head": ReadHeadLists + ReadHeadGets, "merge": MergeSuccessPathRequests} {
		if !maps.Equal(at[0][op], at[deepHistory][op]) {
			t.Errorf("%s sent %v at depth 0 but %v at depth %d", op, at[0][op], at[deepHistory][op], deepHistory)
		}
		if n := sum(at[deepHistory][op]); n != want {
			t.Errorf("%s sent %d requests at depth %d (%v), want %d", op, n, deepHistory, at[deepHistory][op], want)
		}
	}
}

// TestRequests_Create_SameAt121TablesAsAt4 proves a create through the
// engine costs the same requests, kind by kind, in a graph of 121 tables as
// in one of 4: no table is read or copied.
func TestRequests_Create_SameAt121TablesAsAt4(t *testing.T) {
	at := map[int]map[faults.Op]int{}
	for _, tables := range []int{4, 121} {
		cs := newCreateStackOn(t, memstore.New(), 0, tables)
		cs.store.ResetCounts()
		if err := cs.createEngine(context.Background()); err != nil {
			t.Fatal(err)
		}
		at[tables] = target{Store: cs.store}.sent()
	}
	if !maps.Equal(at[4], at[121]) {
		t.Fatalf("create sent %v at 4 tables but %v at 121", at[4], at[121])
	}
	if n := sum(at[121]); n != SuccessPathRequests {
		t.Fatalf("create sent %d requests, want %d", n, SuccessPathRequests)
	}
}

func sum(m map[faults.Op]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// TestClientWait_OneStartAndOneLongPollPerOperation proves the client's wait
// path is one call: a create, a delete and a merge through the client each
// send one StartWorkflowExecution (eager: the first workflow task comes back
// with it) and one GetWorkflowExecutionHistory (the long poll for the close
// event), and no status query or description — those begin only after
// Options.PollInterval, which no operation here outlasts.
func TestClientWait_OneStartAndOneLongPollPerOperation(t *testing.T) {
	ms := newMergeStackFrom(t, newCreateStackOn(t, memstore.New(), 0, mergeTables))
	ctx := context.Background()
	want := map[string]int{"StartWorkflowExecution": 1, "GetWorkflowExecutionHistory": 1, "QueryWorkflow": 0, "DescribeWorkflowExecution": 0}
	pool := &names{}
	if err := ms.createNamed(pool)(ctx); err != nil {
		t.Fatal(err)
	}
	source := ms.prepareUnmoved(t, 8)
	for _, op := range []struct {
		name string
		run  func() error
	}{
		{"create", func() error { return ms.createEngine(ctx) }},
		{"delete", func() error { return ms.deleteEngine(pool)(ctx) }},
		{"merge", func() error { return ms.mergeEngine(source, workflows.OutcomeAdopted) }},
	} {
		ms.rpcs.take()
		if err := op.run(); err != nil {
			t.Fatalf("%s: %v", op.name, err)
		}
		got := ms.rpcs.take()
		for method, n := range want {
			if got[method] != n {
				t.Errorf("%s sent %d %s, want %d (all: %v)", op.name, got[method], method, n, got)
			}
		}
		t.Logf("%s: %d workflow task completions; all RPCs %v", op.name, got["RespondWorkflowTaskCompleted"], got)
	}
}

// The ledger's round trips on the success path (docs/benchmarks.md, "Where
// the time goes"): transactions (each a WAL flush at commit) and statements
// (each a round trip to Postgres, BEGIN and COMMIT included).
const (
	// CreateLedgerTransactions: prepare (claim, pins, witness), clone (the
	// cloned witness), the ref's pending write, then its live witness and the
	// finish together.
	CreateLedgerTransactions = 4
	CreateLedgerStatements   = 27
	// DeleteLedgerTransactions: the prepare's (the claim, the witness
	// lookup), the pending write, the retired witness, the finish.
	DeleteLedgerTransactions = 5
	DeleteLedgerStatements   = 19
	// MergeLedgerTransactions: those of the plan (its claim and pins among
	// them), the pending write and the finish with its pin release, in a
	// graph of 121 tables.
	MergeLedgerTransactions = 4
	MergeLedgerStatements   = 19
)

// TestLedger_RoundTripsPerOperation_Constant proves what a create, a delete
// and a merge through the engine cost the ledger, at 4 and 121 tables: the
// same transactions and statements whatever the table count (the pins of
// 121 tables go in one statement and out in one).
func TestLedger_RoundTripsPerOperation_Constant(t *testing.T) {
	for _, tables := range []int{4, mergeTables} {
		cs := newCreateStackOn(t, memstore.New(), 0, tables)
		ctx := context.Background()
		pool := &names{}
		if err := cs.createNamed(pool)(ctx); err != nil {
			t.Fatal(err)
		}
		type want struct{ tx, stmts int64 }
		check := func(op string, w want, run func() error) {
			t.Helper()
			before := cs.cat.Stats()
			if err := run(); err != nil {
				t.Fatalf("%s: %v", op, err)
			}
			got := cs.cat.Stats().Sub(before)
			if got.Transactions != w.tx || got.Statements != w.stmts {
				t.Errorf("%d tables: %s cost the ledger %d transactions and %d statements, want %d and %d",
					tables, op, got.Transactions, got.Statements, w.tx, w.stmts)
			}
		}
		check("create", want{CreateLedgerTransactions, CreateLedgerStatements}, func() error { return cs.createEngine(ctx) })
		check("delete", want{DeleteLedgerTransactions, DeleteLedgerStatements}, func() error { return cs.deleteEngine(pool)(ctx) })
		if tables == mergeTables {
			ms := newMergeStackFrom(t, cs)
			source := ms.prepareUnmoved(t, 8)
			check("merge", want{MergeLedgerTransactions, MergeLedgerStatements}, func() error { return ms.mergeEngine(source, workflows.OutcomeAdopted) })
		}
	}
}
