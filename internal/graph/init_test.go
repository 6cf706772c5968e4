package graph

import (
	"context"
	"errors"
	"maps"
	"testing"

	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage"
)

func TestInit_SameParamsInTwoStores_WritesIdenticalBytes(t *testing.T) {
	a, b := newStore(t), newStore(t)
	mustInit(t, a)
	mustInit(t, b)
	da, db := dump(t, a), dump(t, b)
	if len(da) != 3 {
		t.Fatalf("init wrote %d objects, want 3 (root commit, main ref, graph record): %v", len(da), da)
	}
	if !maps.Equal(da, db) {
		t.Fatalf("same params gave different stores:\n%v\n%v", da, db)
	}
}

func TestInit_WritesRootCommitMainRefAndGraphRecord(t *testing.T) {
	s := newStore(t)
	res := mustInit(t, s)
	if !res.Created {
		t.Fatal("first init reports Created = false")
	}
	ctx := context.Background()
	g, err := ReadGraph(ctx, s, "sales")
	if err != nil || g.DefaultBranch != "main" || g.Op != "op-init-1" || !g.CreatedAt.Equal(t0) {
		t.Fatalf("ReadGraph = %+v, %v", g, err)
	}
	b, err := ResolveBranch(ctx, s, "sales", "main")
	if err != nil || b.Native != "main."+treeMain.String() || b.Tree != treeMain || b.ETag == "" {
		t.Fatalf("ResolveBranch(main) = %+v, %v", b, err)
	}
	gr, _ := Open(s, "sales")
	h, err := gr.HeadOf(ctx, b)
	if head := h.Commit; err != nil || head.ID != res.Root.ID || head.ID.Seq != 0 || len(head.Parents) != 0 || head.Pins.Len() != 0 || head.Author != "ana" {
		t.Fatalf("HeadOf = %+v, %v", head, err)
	}
}

func TestInit_RerunSameParams_SucceedsWithoutWriting(t *testing.T) {
	s := newStore(t)
	mustInit(t, s)
	before := dump(t, s)
	c := &countingStore{Store: s}
	res, err := Init(context.Background(), c, initParams())
	if err != nil {
		t.Fatalf("re-run: %v", err)
	}
	if res.Created || c.puts.Load() != 0 {
		t.Fatalf("re-run: Created = %v after %d puts, want false after 0", res.Created, c.puts.Load())
	}
	if !maps.Equal(before, dump(t, s)) {
		t.Fatal("re-run changed the store")
	}
}

func TestInit_RerunAfterCrashBeforeGraphRecord_Completes(t *testing.T) {
	s := newStore(t)
	// The first run's graph record put is refused: root commit and ref exist.
	f := withFaults(s, &faultRule{match: keyHasSuffix("/graph.json"), mode: refuse, times: 1})
	if _, err := Init(context.Background(), f, initParams()); !errors.Is(err, storage.ErrRefused) {
		t.Fatalf("first run: %v, want ErrRefused", err)
	}
	res, err := Init(context.Background(), s, initParams())
	if err != nil || !res.Created {
		t.Fatalf("re-run: %+v, %v", res, err)
	}
	if n := len(dump(t, s)); n != 3 {
		t.Fatalf("store has %d objects, want 3", n)
	}
}

func TestInit_DifferentParamsOnExistingGraph_IsErrGraphExistsAndWritesNothing(t *testing.T) {
	s := newStore(t)
	mustInit(t, s)
	before := dump(t, s)
	p := initParams()
	p.MainTree, p.Op = treeMain2, "op-init-2"
	_, err := Init(context.Background(), s, p)
	if !errors.Is(err, ErrGraphExists) {
		t.Fatalf("error %v, want ErrGraphExists", err)
	}
	if !maps.Equal(before, dump(t, s)) {
		t.Fatal("conflicting init changed the store")
	}
}

func TestInit_LosesGraphRecordRace_FencesItsOwnMainRef(t *testing.T) {
	s := newStore(t)
	mustInit(t, s)
	// B's read of the graph record is stale (A's record lands just after it),
	// and so was its check of the prefix (PrefixChecked: A's keys landed after
	// it), so B writes its root commit and ref before losing the record.
	f := withFaults(s)
	f.hideKey, f.hideGets = format.GraphKey("sales"), 1
	p := initParams()
	p.MainTree, p.Op, p.PrefixChecked = treeMain2, "op-init-2", true
	_, err := Init(context.Background(), f, p)
	if !errors.Is(err, ErrGraphExists) {
		t.Fatalf("error %v, want ErrGraphExists", err)
	}
	obj, err := s.Get(context.Background(), format.BranchRefKey("sales", "main."+treeMain2.String()))
	if err != nil {
		t.Fatalf("read loser's ref: %v", err)
	}
	ref, err := format.DecodeBranchRef(obj.Body)
	if err != nil || ref.State != format.RefFence || ref.Reason != FenceReasonUnpublished || ref.Op != "op-init-2" {
		t.Fatalf("loser's ref = %+v, %v; want a fence with reason unpublished", ref, err)
	}
	b, err := ResolveBranch(context.Background(), s, "sales", "main")
	if err != nil || b.Tree != treeMain {
		t.Fatalf("main resolves to %+v, %v; want the winner's tree", b, err)
	}
}

func TestInit_EveryPutAppliedButAckLost_Succeeds(t *testing.T) {
	s := newStore(t)
	f := withFaults(s, &faultRule{match: func(string) bool { return true }, mode: applyThenAmbiguous, times: 3})
	if _, err := Init(context.Background(), f, initParams()); err != nil {
		t.Fatalf("init: %v", err)
	}
	want := newStore(t)
	mustInit(t, want)
	if !maps.Equal(dump(t, s), dump(t, want)) {
		t.Fatal("store differs from a fault-free init")
	}
}

func TestInit_RefPutLostTwice_ReissueSucceeds(t *testing.T) {
	s := newStore(t)
	f := withFaults(s, &faultRule{match: keyContains("/refs/branches/"), mode: ambiguousUnapplied, times: MaxPutAttempts - 1})
	c := &countingStore{Store: f}
	if _, err := Init(context.Background(), c, initParams()); err != nil {
		t.Fatalf("init: %v", err)
	}
	if got, want := c.puts.Load(), int64(3+MaxPutAttempts-1); got != want {
		t.Fatalf("init sent %d puts, want %d", got, want)
	}
	if _, err := ResolveBranch(context.Background(), s, "sales", "main"); err != nil {
		t.Fatalf("resolve main: %v", err)
	}
}

func TestInit_RefPutNeverLands_IsInDoubtMatchingErrAmbiguous(t *testing.T) {
	s := newStore(t)
	f := withFaults(s, &faultRule{match: keyContains("/refs/branches/"), mode: ambiguousUnapplied, times: MaxPutAttempts})
	_, err := Init(context.Background(), f, initParams())
	var d *InDoubtError
	if !errors.Is(err, storage.ErrAmbiguous) || !errors.As(err, &d) {
		t.Fatalf("error %v, want an *InDoubtError matching storage.ErrAmbiguous", err)
	}
	if d.Key != format.BranchRefKey("sales", "main."+treeMain.String()) || d.Attempts != MaxPutAttempts || len(d.Body) == 0 {
		t.Fatalf("InDoubtError = %+v", d)
	}
	if _, err := ReadGraph(context.Background(), s, "sales"); !errors.Is(err, ErrGraphNotFound) {
		t.Fatalf("graph record written after an in-doubt ref: %v", err)
	}
}

func TestInit_InvalidParams_AreErrInvalidWithoutRequests(t *testing.T) {
	cases := map[string]func(*InitParams){
		"Graph":    func(p *InitParams) { p.Graph = "Bad/Name" },
		"MainTree": func(p *InitParams) { p.MainTree = [16]byte{} },
		"Op":       func(p *InitParams) { p.Op = "" },
		"Time":     func(p *InitParams) { p.Time = p.Time.AddDate(-3000, 0, 0) },
		"Author":   func(p *InitParams) { p.Author = "line\nbreak" },
	}
	for field, mutate := range cases {
		c := &countingStore{Store: newStore(t)}
		p := initParams()
		mutate(&p)
		_, err := Init(context.Background(), c, p)
		var pe *ParamError
		if !errors.Is(err, ErrInvalid) || !errors.As(err, &pe) || pe.Field != field {
			t.Errorf("%s: error %v, want ParamError on %s", field, err, field)
		}
		if c.total() != 0 {
			t.Errorf("%s: %d requests sent for invalid params", field, c.total())
		}
	}
}
