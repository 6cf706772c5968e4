package oracle_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/catalog/catalogtest"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/internal/oracle"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/localfs"
)

// The oracle on the local directory store and the real Postgres ledger (an isolated
// schema per test): a healthy graph has no violation, and each promise the oracle checks
// is broken once, on purpose, and reported under its own rule.

// workflows is a fake WorkflowStatus: the workflow ids in closed are closed.
type workflows struct{ closed map[string]bool }

func (w workflows) WorkflowClosed(_ context.Context, id string) (bool, error) {
	return w.closed[id], nil
}

// fixture is a healthy graph and its ledger: main with a table version of "orders" (two
// data objects), a branch "feature" forked from main's head, a tag "v1" on main's head,
// and a table write still running that pins its new, uncommitted version of "orders".
type fixture struct {
	t        *testing.T
	ctx      context.Context
	store    *localfs.Store
	cat      *catalog.Catalog
	graph    string
	g        *graph.Graph
	main     graph.Commit // main's head: pins orders at v1
	feature  graph.Commit // feature's fork commit, the head of its tree
	native   string       // feature's native name
	v1       version
	v2       version // the running write's version, pinned, not committed
	runningW string  // the running write's operation id
	wfs      workflows
	reported []oracle.ReportedCommit
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	dir := t.TempDir()
	s, err := localfs.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, ctx: ctx, store: s, cat: catalogtest.Open(t), graph: "sales",
		wfs: workflows{closed: map[string]bool{}}}
	now := time.Now().UTC().Truncate(time.Millisecond)

	if _, err := f.cat.GraphInsert(ctx, catalog.GraphInsertParams{Name: f.graph, Locator: "file://" + dir}); err != nil {
		t.Fatal(err)
	}
	f.op("init-1", catalog.OpInitGraph, catalog.OutcomeDone, nil)
	if _, err := graph.Init(ctx, s, graph.InitParams{Graph: f.graph, MainTree: ulid.Make(), Op: "init-1", Time: now}); err != nil {
		t.Fatal(err)
	}
	if f.g, err = graph.Open(s, f.graph); err != nil {
		t.Fatal(err)
	}

	f.v1 = f.version("orders", "write-1", "id,qty\n1,3\n", "id,qty\n2,5\n")
	res, err := f.g.Append(ctx, graph.CommitSpec{Branch: "main", SetPins: map[string]ulid.ULID{"orders": f.v1.ID}, Author: "ana",
		Message: "orders", Time: now.Add(time.Second), Op: "write-1"})
	if err != nil {
		t.Fatal(err)
	}
	if f.main, err = f.g.Commit(ctx, res.Plan.Commit.ID); err != nil {
		t.Fatal(err)
	}
	f.op("write-1", catalog.OpWriteTable, catalog.OutcomeDone, nil)
	f.reported = append(f.reported, oracle.ReportedCommit{Branch: "main", Commit: f.main.ID.String()})

	f.op("create-1", catalog.OpCreateBranch, "", nil)
	f.feature, f.native = f.branch("feature", "create-1")
	if _, err := f.cat.IncarnationInsert(ctx, catalog.IncarnationInsertParams{Graph: f.graph, Logical: "feature",
		Native: f.native, Tree: f.feature.ID.Tree.String(), OpID: "create-1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.cat.IncarnationSetState(ctx, catalog.IncarnationSetStateParams{Graph: f.graph, Native: f.native,
		From: catalog.IncarnationIntent, To: catalog.IncarnationLive}); err != nil {
		t.Fatal(err)
	}
	f.finish("create-1", catalog.OutcomeCreated)

	f.op("tag-1", catalog.OpTag, catalog.OutcomeCreated, nil)
	body, err := graph.TagBytes(graph.TagParams{Graph: f.graph, Name: "v1", Commit: f.main.ID.String(), Op: "tag-1", Time: now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := graph.PutTag(ctx, s, f.graph, body); err != nil {
		t.Fatal(err)
	}

	// A write in flight: its version and objects are written and pinned, its commit not yet.
	f.runningW = "write-2"
	f.v2 = f.version("orders", f.runningW, "id,qty\n3,8\n")
	pins := []catalog.Pin{{Kind: catalog.ObjectTableVersion, Key: format.TableVersionKey(f.graph, "orders", f.v2.ID)}}
	for _, o := range f.v2.Objects {
		pins = append(pins, catalog.Pin{Kind: catalog.ObjectData, Key: format.ObjectKey(f.graph, "orders", o)})
	}
	pins = append(pins, catalog.Pin{Kind: catalog.ObjectCommit, Key: format.CommitIDKey(f.graph, f.main.ID)})
	f.op(f.runningW, catalog.OpWriteTable, "", pins)
	return f
}

// op records an operation with workflow id "wf-"+id, holding pins, finished with out
// unless out is "".
func (f *fixture) op(id string, kind catalog.OperationKind, out catalog.Outcome, pins []catalog.Pin) {
	f.t.Helper()
	if _, err := f.cat.OperationInsert(f.ctx, catalog.OperationInsertParams{ID: id, Kind: kind, Graph: f.graph,
		WorkflowID: "wf-" + id, RunID: "run-" + id, Owner: "run-" + id}); err != nil {
		f.t.Fatal(err)
	}
	if len(pins) > 0 {
		if err := f.cat.PinsRegister(f.ctx, catalog.PinsRegisterParams{OpID: id, Pins: pins}); err != nil {
			f.t.Fatal(err)
		}
	}
	if out != "" {
		f.finish(id, out)
	}
}

func (f *fixture) finish(id string, out catalog.Outcome) {
	f.t.Helper()
	if _, err := f.cat.OperationFinish(f.ctx, catalog.OperationFinishParams{ID: id, Outcome: out}); err != nil {
		f.t.Fatal(err)
	}
}

// version is a table version the fixture wrote: its id and its data objects, in order.
type version struct {
	ID      ulid.ULID
	Objects []ulid.ULID
}

// version writes a version of table with one data object per body.
func (f *fixture) version(table, op string, bodies ...string) version {
	f.t.Helper()
	var v version
	var entries []format.ManifestEntry
	for _, b := range bodies {
		id := ulid.Make()
		sum := sha256.Sum256([]byte(b))
		if _, err := graph.PutIfAbsent(f.ctx, f.store, format.ObjectKey(f.graph, table, id), []byte(b)); err != nil {
			f.t.Fatal(err)
		}
		entries = append(entries, format.ManifestEntry{Name: id.String(), Object: id, Size: int64(len(b)), SHA256: hex.EncodeToString(sum[:])})
		v.Objects = append(v.Objects, id)
	}
	v.ID = ulid.Make()
	if _, err := f.g.PutVersion(f.ctx, graph.VersionSpec{Table: table, VersionID: v.ID, Put: entries, Op: op,
		Time: time.Now().UTC().Truncate(time.Millisecond)}); err != nil {
		f.t.Fatal(err)
	}
	return v
}

// branch forks a new tree of logical from main's head and puts its live ref.
func (f *fixture) branch(logical, op string) (graph.Commit, string) {
	f.t.Helper()
	plan, err := f.g.CreateBranch(f.ctx, graph.ForkSpec{Branch: logical, Tree: ulid.Make(), Source: f.main.ID.String(),
		Author: "ana", Message: "fork", Time: time.Now().UTC().Truncate(time.Millisecond), Op: op})
	if err != nil {
		f.t.Fatal(err)
	}
	fork, err := f.g.Commit(f.ctx, plan.Commit.ID)
	if err != nil {
		f.t.Fatal(err)
	}
	return fork, plan.Ref.Native
}

// sql runs a statement on the ledger's schema, to construct a state no catalog call makes.
func (f *fixture) sql(stmt string, args ...any) {
	f.t.Helper()
	if err := f.cat.InTx(f.ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(f.ctx, stmt, args...)
		return err
	}); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) delete(key string) {
	f.t.Helper()
	if err := f.store.Delete(f.ctx, key); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) overwrite(key string, body []byte) {
	f.t.Helper()
	if _, err := f.store.Put(f.ctx, key, body, storage.PutOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) config() oracle.Config {
	return oracle.Config{Store: f.store, Catalog: f.cat, Graph: f.graph, Workflows: f.wfs, Reported: f.reported,
		Names: []string{"main", "feature", "never-used"}}
}

// rules runs the oracle and returns the rules of its violations, sorted.
func (f *fixture) rules(cfg oracle.Config) ([]string, []oracle.Violation) {
	f.t.Helper()
	vs, err := oracle.Check(f.ctx, cfg)
	if err != nil {
		f.t.Fatalf("oracle could not run: %v", err)
	}
	var rules []string
	for _, v := range vs {
		rules = append(rules, v.Rule)
	}
	sort.Strings(rules)
	return rules, vs
}

// expect checks that the oracle reports exactly the rules want (sorted), each once.
func (f *fixture) expect(cfg oracle.Config, want ...string) []oracle.Violation {
	f.t.Helper()
	got, vs := f.rules(cfg)
	sort.Strings(want)
	if !slices.Equal(got, want) {
		f.t.Fatalf("violations %v, want rules %v:\n%v", got, want, oracle.Error(vs))
	}
	return vs
}

func detailOf(vs []oracle.Violation, rule string) string {
	for _, v := range vs {
		if v.Rule == rule {
			return v.Detail
		}
	}
	return ""
}

func TestOracle_HealthyGraphWithBranchTagAndTableVersion_NoViolation(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	if vs, err := oracle.Check(f.ctx, f.config()); err != nil || len(vs) != 0 {
		t.Fatalf("healthy graph: %v, %v", err, oracle.Error(vs))
	}
}

func TestOracle_TwoLiveRefsOfOneName_IsOneLiveIncarnation(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	_, second := f.branch("feature", "create-2")
	// Storage has two live incarnations of feature; the ledger knows one, so the name is
	// not reusable either (the ledger's and storage's live incarnations disagree).
	vs := f.expect(f.config(), "one-live-incarnation", "name-reusable")
	if d := detailOf(vs, "one-live-incarnation"); !strings.Contains(d, f.native) || !strings.Contains(d, second) {
		t.Fatalf("detail %q does not name both %s and %s", d, f.native, second)
	}
}

func TestOracle_TableVersionALiveCommitPinsDeleted_IsPinnedVersion(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.delete(format.TableVersionKey(f.graph, "orders", f.v1.ID))
	vs := f.expect(f.config(), "pinned-version")
	if d := detailOf(vs, "pinned-version"); !strings.Contains(d, f.v1.ID.String()) {
		t.Fatalf("detail %q does not name version %s", d, f.v1.ID)
	}
}

func TestOracle_DataObjectALiveCommitPinsDeleted_IsDataObject(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	key := format.ObjectKey(f.graph, "orders", f.v1.Objects[1])
	f.delete(key)
	vs := f.expect(f.config(), "data-object")
	if d := detailOf(vs, "data-object"); !strings.Contains(d, key) || !strings.Contains(d, "missing") {
		t.Fatalf("detail %q does not say %s is missing", d, key)
	}
}

func TestOracle_KeyAnInFlightOperationPinsDeleted_IsPinnedKey(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	key := format.ObjectKey(f.graph, "orders", f.v2.Objects[0])
	f.delete(key)
	vs := f.expect(f.config(), "pinned-key")
	if d := detailOf(vs, "pinned-key"); !strings.Contains(d, key) || !strings.Contains(d, f.runningW) {
		t.Fatalf("detail %q does not name %s and %s", d, key, f.runningW)
	}
}

func TestOracle_DataObjectWithOtherBytesOfItsSize_IsDataObjectByChecksum(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	key := format.ObjectKey(f.graph, "orders", f.v1.Objects[0])
	f.overwrite(key, []byte("id,qty\n1,4\n")) // same length, other bytes
	vs := f.expect(f.config(), "data-object")
	if d := detailOf(vs, "data-object"); !strings.Contains(d, "sha256") {
		t.Fatalf("detail %q does not name the checksum", d)
	}
}

func TestOracle_DataObjectOfAnotherSize_IsDataObjectBySize(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	key := format.ObjectKey(f.graph, "orders", f.v1.Objects[0])
	f.overwrite(key, []byte("id,qty\n1,30\n"))
	vs := f.expect(f.config(), "data-object")
	if d := detailOf(vs, "data-object"); !strings.Contains(d, "bytes") {
		t.Fatalf("detail %q does not name the sizes", d)
	}
}

func TestOracle_ReportedDoneCommitNotOnItsBranch_IsReportedCommit(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	cfg := f.config()
	// main's head reported done on feature: not in feature's tree.
	cfg.Reported = append(cfg.Reported, oracle.ReportedCommit{Branch: "feature", Commit: f.main.ID.String()})
	f.expect(cfg, "reported-commit")
	// A commit of feature's tree above its head: reported done, never landed.
	cfg = f.config()
	above := format.CommitID{Tree: f.feature.ID.Tree, Seq: 1}
	cfg.Reported = append(cfg.Reported, oracle.ReportedCommit{Branch: "feature", Commit: above.String()})
	vs := f.expect(cfg, "reported-commit")
	if d := detailOf(vs, "reported-commit"); !strings.Contains(d, above.String()) {
		t.Fatalf("detail %q does not name %s", d, above)
	}
}

func TestOracle_DoneOperationStillHoldingPins_IsPinsOfEndedOperation(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	// The running write's row says done while its pins stay held: what a finish that
	// forgot to release them would leave (OperationFinish releases in the same
	// transaction, so the break is made in SQL).
	f.sql(`UPDATE operations SET state = 'done', outcome = 'done', finished_at = now() WHERE id = $1`, f.runningW)
	vs := f.expect(f.config(), "pins-of-ended-operation", "pins-of-ended-operation", "pins-of-ended-operation")
	if d := detailOf(vs, "pins-of-ended-operation"); !strings.Contains(d, f.runningW) {
		t.Fatalf("detail %q does not name %s", d, f.runningW)
	}
}

func TestOracle_WitnessUnsettledWhoseOperationEnded_IsWitnessOfEndedOperation(t *testing.T) {
	t.Parallel()
	for _, state := range []catalog.IncarnationState{catalog.IncarnationIntent, catalog.IncarnationCloned, catalog.IncarnationInDoubt} {
		t.Run(string(state), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			opID := "create-" + string(state)
			f.op(opID, catalog.OpCreateBranch, "", nil)
			native := format.NativeName("stuck", ulid.Make())
			if _, err := f.cat.IncarnationInsert(f.ctx, catalog.IncarnationInsertParams{Graph: f.graph, Logical: "stuck",
				Native: native, OpID: opID}); err != nil {
				t.Fatal(err)
			}
			if state != catalog.IncarnationIntent {
				if _, err := f.cat.IncarnationSetState(f.ctx, catalog.IncarnationSetStateParams{Graph: f.graph, Native: native,
					From: catalog.IncarnationIntent, To: state}); err != nil {
					t.Fatal(err)
				}
			}
			// Before its operation ends an unsettled witness is fine.
			f.expect(f.config())
			f.finish(opID, catalog.OutcomeFailed)
			// Ended, the witness is left unsettled — and it blocks the name for good.
			vs := f.expect(f.config(), "witness-of-ended-operation", "name-reusable")
			if d := detailOf(vs, "witness-of-ended-operation"); !strings.Contains(d, native) || !strings.Contains(d, string(state)) {
				t.Fatalf("detail %q does not name %s in %s", d, native, state)
			}
		})
	}
}

func TestOracle_RunningOperationWhoseWorkflowIsClosed_IsUnfinishedOperationClosedWorkflow(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.wfs.closed["wf-"+f.runningW] = true
	vs := f.expect(f.config(), "unfinished-operation-closed-workflow")
	if d := detailOf(vs, "unfinished-operation-closed-workflow"); !strings.Contains(d, f.runningW) {
		t.Fatalf("detail %q does not name %s", d, f.runningW)
	}
	// Without a WorkflowStatus (before the reconciler ran) it is not checked.
	cfg := f.config()
	cfg.Workflows = nil
	f.expect(cfg)
	// An operation recorded in doubt is unfinished too.
	f.sql(`UPDATE operations SET state = 'in_doubt' WHERE id = $1`, f.runningW)
	f.expect(f.config(), "unfinished-operation-closed-workflow")
}

func TestOracle_NameLiveInTheLedgerButNotInStorage_IsNameReusable(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	// feature's ref is retired in storage (a delete), but the ledger still says live: a
	// new create of feature is refused by the ledger while storage has no branch.
	b, err := graph.ResolveBranch(f.ctx, f.store, f.graph, "feature")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := graph.RetireRef(f.ctx, f.store, f.graph, f.native, b.ETag, "delete-1"); err != nil {
		t.Fatal(err)
	}
	vs := f.expect(f.config(), "name-reusable")
	if d := detailOf(vs, "name-reusable"); !strings.Contains(d, "feature") || !strings.Contains(d, f.native) {
		t.Fatalf("detail %q does not name feature through %s", d, f.native)
	}
}

func TestOracle_LiveTagNamingADeletedCommit_IsRootCommit(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	// A deleted branch whose fork commit a tag keeps: the tag is its only retention root.
	fork, native := f.branch("old", "create-old")
	body, err := graph.TagBytes(graph.TagParams{Graph: f.graph, Name: "keep", Commit: fork.ID.String(), Op: "tag-2",
		Time: time.Now().UTC().Truncate(time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := graph.PutTag(f.ctx, f.store, f.graph, body); err != nil {
		t.Fatal(err)
	}
	b, err := graph.ResolveBranch(f.ctx, f.store, f.graph, "old")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := graph.RetireRef(f.ctx, f.store, f.graph, native, b.ETag, "delete-old"); err != nil {
		t.Fatal(err)
	}
	f.expect(f.config())
	f.delete(format.CommitIDKey(f.graph, fork.ID))
	vs := f.expect(f.config(), "root-commit")
	if d := detailOf(vs, "root-commit"); !strings.Contains(d, "tag keep") || !strings.Contains(d, fork.ID.String()) {
		t.Fatalf("detail %q does not name tag keep and %s", d, fork.ID)
	}
}
