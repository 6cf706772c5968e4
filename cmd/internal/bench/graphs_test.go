package bench

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/memstore"
)

// graphs for the engine benchmarks and the flatness tests, built
// with internal/graph's API (docs/format.md), what `graft graph
// init` and the InitGraph workflow write: Init, then table versions
// (PutVersion over uploaded objects), commits (Append, or the append's own
// steps for long histories: appendMany) and branches (CreateBranch).

// graphFixture is a graph under construction, straight to its store.
type graphFixture struct {
	g *graph.Graph
	// at is the time written into every object, so a graph's bytes are a
	// function of its ids.
	at time.Time
	// ops numbers the operation ids of its commits.
	ops int
}

// initGraph initialises graph name on s: main's root commit,
// main's ref naming it, the graph record.
func initGraph(tb testing.TB, s storage.Store, name string) *graphFixture {
	tb.Helper()
	return initGraphAt(tb, s, name, ulid.Make(), time.Now().UTC().Truncate(time.Millisecond))
}

// initGraphAt is initGraph with main's tree and the graph's time given.
func initGraphAt(tb testing.TB, s storage.Store, name string, mainTree ulid.ULID, at time.Time) *graphFixture {
	tb.Helper()
	if _, err := graph.Init(context.Background(), s, graph.InitParams{Graph: name, MainTree: mainTree, Op: "init", Time: at, Author: "bench"}); err != nil {
		tb.Fatalf("init graph %s: %v", name, err)
	}
	g, err := graph.Open(s, name)
	if err != nil {
		tb.Fatal(err)
	}
	return &graphFixture{g: g, at: at}
}

// putVersion writes a one-object version of table: the object (its bytes
// body), then the version naming it. It returns the version's id.
func (b *graphFixture) putVersion(tb testing.TB, table string, body []byte) ulid.ULID {
	tb.Helper()
	ctx := context.Background()
	up, err := graph.UploadObject(ctx, b.g.S, b.g.Name, table, ulid.Make(), bytes.NewReader(body), int64(len(body)), graph.UploadOptions{})
	if err != nil {
		tb.Fatalf("upload object of %s: %v", table, err)
	}
	v, err := b.g.PutVersion(ctx, graph.VersionSpec{Table: table, VersionID: ulid.Make(), Put: []format.ManifestEntry{up.Entry}, Time: b.at, Op: "write"})
	if err != nil {
		tb.Fatalf("put version of %s: %v", table, err)
	}
	return v.Version.ID
}

// editVersion writes a version of table on version base: base's entries and one
// new object. It returns the version's id and its change from base.
func (b *graphFixture) editVersion(tb testing.TB, table string, base ulid.ULID) (ulid.ULID, graph.Change) {
	tb.Helper()
	ctx := context.Background()
	body := []byte("edit")
	up, err := graph.UploadObject(ctx, b.g.S, b.g.Name, table, ulid.Make(), bytes.NewReader(body), int64(len(body)), graph.UploadOptions{})
	if err != nil {
		tb.Fatalf("upload object of %s: %v", table, err)
	}
	v, err := b.g.PutVersion(ctx, graph.VersionSpec{Table: table, VersionID: ulid.Make(), Base: base, Put: []format.ManifestEntry{up.Entry}, Time: b.at, Op: "edit"})
	if err != nil {
		tb.Fatalf("put version of %s on %s: %v", table, base, err)
	}
	c, ok := graph.ChangeOf(v.Version)
	if !ok {
		tb.Fatalf("version %s of %s records no change from %s", v.Version.ID, table, base)
	}
	return v.Version.ID, c
}

// spec is a commit on branch setting pins (nil: a commit that changes
// nothing), with the next operation id.
func (b *graphFixture) spec(branch string, pins map[string]ulid.ULID) graph.CommitSpec {
	b.ops++
	return graph.CommitSpec{Branch: branch, SetPins: pins, Author: "bench", Message: "c", Time: b.at, Op: fmt.Sprintf("c%d", b.ops)}
}

// head reads branch's live incarnation and its head commit.
func (b *graphFixture) head(tb testing.TB, branch string) graph.Head {
	tb.Helper()
	h, err := b.g.BranchHead(context.Background(), branch)
	if err != nil {
		tb.Fatalf("head of %s: %v", branch, err)
	}
	return h
}

// commit appends one commit setting pins to branch (graph.Append: plan on
// the head the ref names, write, swap the ref).
func (b *graphFixture) commit(tb testing.TB, branch string, pins map[string]ulid.ULID) {
	tb.Helper()
	b.commitChanges(tb, branch, pins, nil)
}

// commitChanges is commit with the pins recording changes.
func (b *graphFixture) commitChanges(tb testing.TB, branch string, pins map[string]ulid.ULID, changes map[string]graph.Change) {
	tb.Helper()
	sp := b.spec(branch, pins)
	sp.Changes = changes
	if _, err := b.g.Append(context.Background(), sp); err != nil {
		tb.Fatalf("append to %s: %v", branch, err)
	}
}

// fork creates branch at the head of source (graph.CreateBranch: the fork
// commit naming the source's pins map as it stands, then the live ref).
func (b *graphFixture) fork(tb testing.TB, branch, source string) {
	tb.Helper()
	src := b.head(tb, source)
	if _, err := b.g.CreateBranch(context.Background(), graph.ForkSpec{Branch: branch, Tree: ulid.Make(), Source: src.Commit.ID.String(),
		Author: "bench", Message: "fork", Time: b.at, Op: fmt.Sprintf("fork-%s", branch)}); err != nil {
		tb.Fatalf("fork %s from %s: %v", branch, source, err)
	}
}

// appendWriters is how many commit puts appendMany sends at once.
const appendWriters = 16

// appendMany appends n commits that change nothing to branch, leaving the
// store exactly as n graph.Append calls would: the same commits, byte for
// byte, and the ref naming the last one. It runs the append's own steps —
// PlanAppendOn, WriteAppend, Publish — but plans each commit on the one
// planned before it instead of reading the head back, writes the commits
// appendWriters at a time (a commit is invisible until the ref names it, so
// their order does not matter), and swaps the ref once, from the version it
// read to the last commit. A history of 10,000 commits then costs 10,000
// puts in parallel and one swap, not 10,000 sequential appends of five
// requests each.
func (b *graphFixture) appendMany(tb testing.TB, branch string, n int) {
	tb.Helper()
	if n == 0 {
		return
	}
	ctx := context.Background()
	head := b.head(tb, branch)
	plans := make(chan graph.AppendPlan, appendWriters)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range appendWriters {
		wg.Go(func() {
			for p := range plans {
				if err := b.g.WriteAppend(ctx, p); err != nil {
					mu.Lock()
					firstErr = cmpErr(firstErr, err)
					mu.Unlock()
				}
			}
		})
	}
	var last graph.AppendPlan
	var err error
	for range n {
		last, err = b.g.PlanAppendOn(ctx, head, b.spec(branch, nil))
		if err != nil {
			break
		}
		plans <- last
		// The next commit's parent is this one; the ETag stays the one read,
		// so the last plan's swap replaces the ref as it is in the store.
		head.Commit = commitOf(last.Commit)
	}
	close(plans)
	wg.Wait()
	if err = cmpErr(err, firstErr); err != nil {
		tb.Fatalf("append %d commits to %s: %v", n, branch, err)
	}
	if _, err := b.g.Publish(ctx, last.Publish); err != nil {
		tb.Fatalf("publish the last of %d commits on %s: %v", n, branch, err)
	}
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// commitOf is a sealed commit as the graph package reads it.
func commitOf(c format.Commit) graph.Commit {
	return graph.Commit{ID: c.ID, Branch: c.Branch, Parents: c.Parents, Fork: c.Fork, Pins: c.Pins,
		Lineage: c.Lineage, RestoredFrom: c.RestoredFrom, Author: c.Author, Message: c.Message, Time: c.Time, Op: c.Op}
}

// buildGraph builds graph name on s: `tables` tables of one
// version each, committed to main, then depth commits after that one, so
// main's head is at seq depth+1. It returns the graph.
func buildGraph(tb testing.TB, s storage.Store, name string, depth, tables int) *graphFixture {
	tb.Helper()
	b := initGraph(tb, s, name)
	pins := map[string]ulid.ULID{}
	for i := range tables {
		table := fmt.Sprintf("t%03d", i)
		pins[table] = b.putVersion(tb, table, []byte("x"))
	}
	b.commit(tb, graph.DefaultBranch, pins)
	start := time.Now()
	b.appendMany(tb, graph.DefaultBranch, depth)
	if depth >= 1000 {
		tb.Logf("built %d commits of history on main in %s", depth, time.Since(start).Round(time.Millisecond))
	}
	return b
}

// TestAppendMany_StoresWhatAppendsStore proves appendMany is a faster way
// to the same graph: n commits by appendMany and n by graph.Append, from
// the same start, leave the same keys with the same bytes.
func TestAppendMany_StoresWhatAppendsStore(t *testing.T) {
	ctx := context.Background()
	tree, at := ulid.Make(), time.Now().UTC().Truncate(time.Millisecond)
	var stores [2]*memstore.Store
	for i := range stores {
		stores[i] = memstore.New()
		b := initGraphAt(t, stores[i], "g", tree, at)
		pins := map[string]ulid.ULID{"t": ulid.ULID{1}}
		b.commit(t, graph.DefaultBranch, pins)
		if i == 0 {
			b.appendMany(t, graph.DefaultBranch, 100)
		} else {
			for range 100 {
				b.commit(t, graph.DefaultBranch, nil)
			}
		}
		if h := b.head(t, graph.DefaultBranch); h.Commit.ID.Seq != 101 {
			t.Fatalf("head %s, want seq 101", h.Commit.ID)
		}
	}
	contents := func(s storage.Store) map[string]string {
		out := map[string]string{}
		err := storage.ListAll(ctx, s, "", func(o storage.ObjectInfo) error {
			obj, err := s.Get(ctx, o.Key)
			out[o.Key] = string(obj.Body)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	many, appends := contents(stores[0]), contents(stores[1])
	if len(many) != 104 { // graph record, main's ref, the root, 101 commits
		t.Fatalf("appendMany left %d objects, want 104", len(many))
	}
	if !maps.Equal(many, appends) {
		t.Fatalf("appendMany and graph.Append left different objects (%d and %d)", len(many), len(appends))
	}
}
