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

// deepHistory is the long history the flatness tests and benchmarks compare
// with depth 0: the targets ask for request counts, and times, at depth
// 10,000 equal to depth 0's (time within 1.2 ×). The tests build their
// graphs on the in-memory store; request counts do not depend on the store
// (the depth-0 and -64 tests run the same operations on the local store and
// versitygw). The benchmarks build it on the local store (appendMany: a few
// seconds).
const deepHistory = 10_000

// TestRequests_CreateMergeHeadRead_SameAtDepth10000AsAt0 proves a create
// (through the engine), a three-way merge (through the engine, with 10,000
// commits on each side of the fork) and a head read — of main's known
// incarnation, and from its name — cost the same object-store requests at
// depth 10,000 as at depth 0, in graphs of 121 tables.
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

		// A head read: main's ref, then the commit it names
		// (graph.Graph.RefHead, on a graph opened afresh: no chunk cache).
		native := cs.built.head(t, graph.DefaultBranch).Native
		g, err := graph.Open(cs.store, cs.graph)
		if err != nil {
			t.Fatal(err)
		}
		cs.store.ResetCounts()
		_, head, err := g.RefHead(context.Background(), native)
		if err != nil {
			t.Fatalf("depth %d: read head: %v", depth, err)
		}
		if want := int64(depth + 1); head.ID.Seq != want { // the table commit, then depth more
			t.Fatalf("depth %d: head %s, want seq %d", depth, head.ID, want)
		}
		got["read head"] = target{Store: cs.store}.sent()
		// From the name: main's refs listed, its ref, the commit it names.
		cs.store.ResetCounts()
		found, err := g.BranchHead(context.Background(), graph.DefaultBranch)
		if err != nil || found.Commit.ID != head.ID {
			t.Fatalf("depth %d: find head: %v %v, want %s", depth, found.Commit.ID, err, head.ID)
		}
		got["find head"] = target{Store: cs.store}.sent()

		ms := newMergeStackFrom(t, cs)
		source := ms.prepare(t, depth, 8)
		cs.store.ResetCounts()
		ms.mergeOnce(t, source, 8)
		got["merge"] = target{Store: cs.store}.sent()
		at[depth] = got
	}
	for op, want := range map[string]int{"create": SuccessPathRequests, "read head": ReadHeadGets,
		"find head": HeadDiscoveryLists + HeadDiscoveryGets, "merge": MergeSuccessPathRequests} {
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
	// The start is answered with the workflow's first task (EagerStarts): the operation
	// runs on this worker without a trip through matching.
	want := map[string]int{"StartWorkflowExecution": 1, EagerStarts: 1, "GetWorkflowExecutionHistory": 1, "QueryWorkflow": 0, "DescribeWorkflowExecution": 0}
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
// the time goes"), on a graph: commits that wait for Postgres to
// flush its WAL (catalog.Stats.Flushes: what a commit costs in time here),
// transactions (explicit ones, and statements sent outside one, reads
// included) and round trips (catalog.Stats.Statements: each statement, BEGIN
// and COMMIT included, or each batch of statements pipelined together).
// Each operation records the write it is about to send in the transaction
// of the step before it, and the commits after its effect — the finish, a
// create's live witness, a delete's retired witness — do not wait for the
// flush (catalog.InTxRecoverable; docs/operations.md, "The ledger's
// commits"). Pins go in one pipelined round trip with the checks before
// them (the operation's row, the graph's lock, the condemned keys), and a
// finish's update in one with the graph's lock, its pins' release in one
// with their prune.
const (
	// Create: one flushed commit, the prepare's (BEGIN, the claim, the
	// source commit's pin, the intent witness — the name's lock, its prefix
	// check, a savepoint and the insert, one round trip — and the ref put as
	// the pending write, COMMIT: 6 round trips), after a lookup of main's
	// open incarnation (one SELECT: the ref to read first); the clone
	// records nothing; the write reads the row back (one SELECT) and, once
	// the ref landed, records the live witness and the finish in one
	// recoverable transaction of 6. The same at 121 tables: a
	// create pins the source commit alone (docs/format.md, "Branch create").
	CreateLedgerFlushes      = 1
	CreateLedgerTransactions = 4
	CreateLedgerStatements   = 14
	// Delete: one flushed commit, the prepare's claim with the retire as its
	// pending write (BEGIN, the insert, the pending write, COMMIT), after
	// three reads (one SELECT each): the operation's row (a pending write of
	// an earlier run of it means a retire may have been sent: every ref is
	// read then), the name's open incarnation (the ref to read first) and
	// its witness; the write reads the row back (one SELECT) and records the
	// retired witness in a recoverable transaction (5); the finish is
	// recoverable too (7: BEGIN, the row lock, SET LOCAL
	// synchronous_commit, the witnesses' lookup, the graph lock with the
	// update, the pins' release and prune, COMMIT).
	DeleteLedgerFlushes      = 1
	DeleteLedgerTransactions = 7
	DeleteLedgerStatements   = 20
	// Merge: one flushed commit — once the plan is made, the transaction
	// pinning what the merge commit newly names (versions, chunks, the
	// commit) with the publish as the pending write, which also flushes the
	// claim made before it with the pins of the two heads and the base
	// (recoverable: an unprotected target's merge goes on to a synchronous
	// commit either way) — after reads of a pending write of its own, of each
	// branch's open incarnation and of the target's rule
	// (docs/merge-restore-tags.md, "Protected branches"; one SELECT each); the
	// write reads the row back (one SELECT); the finish is recoverable. The
	// same at 121 tables as at 4: each pin set goes in one statement.
	MergeLedgerFlushes      = 1
	MergeLedgerTransactions = 8
	MergeLedgerStatements   = 20
)

// DeleteSuccessPathRequests is what a branch delete costs in object-store
// requests on a graph: GET the ref of the incarnation the ledger
// names as the name's open one (storage confirms it live; the head is the
// one the ref names, not read), LIST the graph's tags (none here, so no
// GET), then the retire (graph.RetireRef): GET the ref and swap it to the
// retired ref (PUT, If-Match). 2 GETs, 1 LIST, 1 PUT.
const DeleteSuccessPathRequests = 4

// TestLedger_RoundTripsPerOperation_Constant proves what a create, a delete
// and a merge through the engine cost the ledger, at 4 and 121 tables: the
// same transactions and statements whatever the table count (each set of
// pins goes in one statement and out in one). It checks a delete's
// object-store requests too (DeleteSuccessPathRequests), at both sizes.
func TestLedger_RoundTripsPerOperation_Constant(t *testing.T) {
	for _, tables := range []int{4, mergeTables} {
		cs := newCreateStackOn(t, memstore.New(), 0, tables)
		ctx := context.Background()
		pool := &names{}
		if err := cs.createNamed(pool)(ctx); err != nil {
			t.Fatal(err)
		}
		type want struct{ flushes, tx, stmts int64 }
		check := func(op string, w want, run func() error) {
			t.Helper()
			before := cs.cat.Stats()
			if err := run(); err != nil {
				t.Fatalf("%s: %v", op, err)
			}
			got := cs.cat.Stats().Sub(before)
			if got.Flushes != w.flushes || got.Transactions != w.tx || got.Statements != w.stmts {
				t.Errorf("%d tables: %s cost the ledger %d flushed commits, %d transactions and %d statements, want %d, %d and %d",
					tables, op, got.Flushes, got.Transactions, got.Statements, w.flushes, w.tx, w.stmts)
			}
		}
		check("create", want{CreateLedgerFlushes, CreateLedgerTransactions, CreateLedgerStatements}, func() error { return cs.createEngine(ctx) })
		cs.store.ResetCounts()
		check("delete", want{DeleteLedgerFlushes, DeleteLedgerTransactions, DeleteLedgerStatements}, func() error { return cs.deleteEngine(pool)(ctx) })
		if n := totalRequests(cs.store); n != DeleteSuccessPathRequests {
			t.Errorf("%d tables: delete sent %d requests (%v), want %d", tables, n, cs.store.Counts(), DeleteSuccessPathRequests)
		}
		if tables == mergeTables {
			ms := newMergeStackFrom(t, cs)
			source := ms.prepareUnmoved(t, 8)
			check("merge", want{MergeLedgerFlushes, MergeLedgerTransactions, MergeLedgerStatements}, func() error { return ms.mergeEngine(source, workflows.OutcomeAdopted) })
		}
	}
}
