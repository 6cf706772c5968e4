package oracle_test

import (
	"context"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/internal/catalog/catalogtest"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/internal/oracle"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/localfs"
)

// at is the time of every commit the oracle tests write.
var at = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// newChainGraph makes graph "g" on a fresh local store.
func newChainGraph(t *testing.T) (storage.Store, *graph.Graph, graph.InitResult) {
	t.Helper()
	s, err := localfs.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	init, err := graph.Init(context.Background(), s, graph.InitParams{Graph: "g", MainTree: ulid.Make(), Op: "op-init", Time: at})
	if err != nil {
		t.Fatal(err)
	}
	g, err := graph.Open(s, "g")
	if err != nil {
		t.Fatal(err)
	}
	return s, g, init
}

func rules(vs []oracle.Violation) map[string]int {
	out := map[string]int{}
	for _, v := range vs {
		out[v.Rule]++
	}
	return out
}

// The oracle's two chain checks on a graph: a commit reported done that is not reached
// from its branch's head by first parents is a violation, and so is a commit key whose bytes
// changed between two checks that share CommitDigests.
func TestCheck_ReportedOffTheChainAndRefilledKey_AreViolations(t *testing.T) {
	ctx := context.Background()
	s, g, init := newChainGraph(t)
	cat := catalogtest.Open(t)
	on, err := g.Append(ctx, graph.CommitSpec{Branch: "main", Author: "t", Message: "on main", Time: at, Op: "op-1"})
	if err != nil {
		t.Fatal(err)
	}
	// A plan whose swap never landed: its commit is stored but is not on main.
	head, err := g.BranchHead(ctx, "main")
	if err != nil {
		t.Fatal(err)
	}
	off, err := g.PlanAppendOn(ctx, head, graph.CommitSpec{Branch: "main", Author: "t", Message: "lost", Time: at, Op: "op-2"})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.WriteAppend(ctx, off); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Append(ctx, graph.CommitSpec{Branch: "main", Author: "t", Message: "won", Time: at, Op: "op-3"}); err != nil {
		t.Fatal(err)
	}
	digests := map[string]string{}
	cfg := oracle.Config{Store: s, Catalog: cat, Graph: "g", CommitDigests: digests, Reported: []oracle.ReportedCommit{
		{Branch: "main", Commit: on.Plan.Commit.ID.String()}, {Branch: "main", Commit: off.Commit.ID.String()}}}
	vs, err := oracle.Check(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := rules(vs); got["reported-commit"] != 1 || len(vs) != 1 {
		t.Fatalf("violations %v; want exactly the off-chain reported commit", vs)
	}
	// Refill main's root key with other bytes (as a put into an emptied key would).
	key := format.CommitIDKey("g", init.Root.ID)
	obj, err := s.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, key, append(obj.Body, ' '), storage.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	cfg.Reported = nil
	vs, err = oracle.Check(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := rules(vs); got["commit-bytes-stable"] != 1 {
		t.Fatalf("violations %v; want commit-bytes-stable for %s", vs, key)
	}
}

// A live ref naming a head commit that is gone (soak, localfs seed 1002188: a swap that
// landed after a sweep reclaimed the commit it names) is a violation — found, not an
// error that leaves the seed unjudged — even when a commit reported on that branch makes
// the check read the head a second time.
func TestCheck_LiveRefHeadGone_IsAViolationNotAnError(t *testing.T) {
	ctx := context.Background()
	s, g, _ := newChainGraph(t)
	first, err := g.Append(ctx, graph.CommitSpec{Branch: "main", Author: "t", Message: "first", Time: at, Op: "op-1"})
	if err != nil {
		t.Fatal(err)
	}
	second, err := g.Append(ctx, graph.CommitSpec{Branch: "main", Author: "t", Message: "second", Time: at, Op: "op-2"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, format.CommitIDKey("g", second.Plan.Commit.ID)); err != nil {
		t.Fatal(err)
	}
	vs, err := oracle.Check(ctx, oracle.Config{Store: s, Catalog: catalogtest.Open(t), Graph: "g",
		Reported: []oracle.ReportedCommit{{Branch: "main", Commit: first.Plan.Commit.ID.String()}}})
	if err != nil {
		t.Fatalf("check: %v; want the missing head reported as a violation", err)
	}
	if got := rules(vs); got["root-commit"] == 0 || got["reported-commit"] == 0 {
		t.Fatalf("violations %v; want the live ref's missing head (root-commit) and the unreadable head of the reported commit's branch", vs)
	}
}
