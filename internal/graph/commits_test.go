package graph

import (
	"context"
	"errors"
	"maps"
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage"
)

func TestAppendCommit_SameParamsInTwoStores_WritesIdenticalBytes(t *testing.T) {
	a, b := newStore(t), newStore(t)
	for _, s := range []storage.Store{a, b} {
		mustInit(t, s)
		if _, err := AppendCommit(context.Background(), s, appendParams(0, "first")); err != nil {
			t.Fatalf("append: %v", err)
		}
	}
	key := format.CommitKey("sales", treeMain, 1)
	da, db := dump(t, a), dump(t, b)
	if da[key] == "" || da[key] != db[key] {
		t.Fatalf("commit bytes differ or missing:\n%s\n%s", da[key], db[key])
	}
}

func TestAppendCommit_OnHead_WritesChildWithInheritedLineage(t *testing.T) {
	s := newStore(t)
	mustInit(t, s)
	c, err := AppendCommit(context.Background(), s, appendParams(0, "first"))
	if err != nil {
		t.Fatalf("append: %v", err)
	}
	want := format.CommitID{Tree: treeMain, Seq: 1}
	if c.ID != want || len(c.Parents) != 1 || c.Parents[0] != (format.CommitID{Tree: treeMain, Seq: 0}) || c.Pins["orders"] != versionA {
		t.Fatalf("commit = %+v", c)
	}
	head, err := ReadHead(context.Background(), s, "sales", treeMain)
	if err != nil || head.ID != want || head.Message != "first" {
		t.Fatalf("head = %+v, %v", head, err)
	}
}

func TestAppendCommit_StaleExpectedHead_IsErrStaleHead(t *testing.T) {
	s := newStore(t)
	mustInit(t, s)
	if _, err := AppendCommit(context.Background(), s, appendParams(0, "theirs")); err != nil {
		t.Fatalf("append: %v", err)
	}
	_, err := AppendCommit(context.Background(), s, appendParams(0, "ours, on a stale head"))
	var stale *StaleHeadError
	if !errors.Is(err, ErrStaleHead) || !errors.As(err, &stale) {
		t.Fatalf("error %v, want *StaleHeadError", err)
	}
	if stale.Expected != (format.CommitID{Tree: treeMain, Seq: 0}) || stale.Key != format.CommitKey("sales", treeMain, 1) {
		t.Fatalf("StaleHeadError = %+v", stale)
	}
	head, _ := ReadHead(context.Background(), s, "sales", treeMain)
	if head.Message != "theirs" {
		t.Fatalf("head message %q, want the winner's", head.Message)
	}
}

func TestAppendCommit_OlderNonHeadExpected_IsErrStaleHead(t *testing.T) {
	s := newStore(t)
	mustInit(t, s)
	for seq := int64(0); seq < 3; seq++ {
		if _, err := AppendCommit(context.Background(), s, appendParams(seq, "c")); err != nil {
			t.Fatalf("append %d: %v", seq, err)
		}
	}
	p := appendParams(1, "late")
	if _, err := AppendCommit(context.Background(), s, p); !errors.Is(err, ErrStaleHead) {
		t.Fatalf("error %v, want ErrStaleHead", err)
	}
}

func TestAppendCommit_RerunSameParams_SucceedsWithoutSecondCommit(t *testing.T) {
	s := newStore(t)
	mustInit(t, s)
	first, err := AppendCommit(context.Background(), s, appendParams(0, "once"))
	if err != nil {
		t.Fatalf("append: %v", err)
	}
	again, err := AppendCommit(context.Background(), s, appendParams(0, "once"))
	if err != nil || again.ID != first.ID {
		t.Fatalf("re-run = %v, %v; want the same commit", again.ID, err)
	}
	if n := keysUnder(dump(t, s), format.TreeCommitsPrefix("sales", treeMain)); n != 2 {
		t.Fatalf("tree has %d commits, want 2", n)
	}
}

func TestAppendCommit_PutAppliedButAckLost_SucceedsWithoutSecondCommit(t *testing.T) {
	s := newStore(t)
	mustInit(t, s)
	f := withFaults(s, &faultRule{match: keyContains("/commits/"), mode: applyThenAmbiguous, times: 1})
	c := &countingStore{Store: f}
	got, err := AppendCommit(context.Background(), c, appendParams(0, "ack lost"))
	if err != nil {
		t.Fatalf("append: %v", err)
	}
	if c.puts.Load() != 1 {
		t.Fatalf("sent %d puts, want 1 (settled by read-back)", c.puts.Load())
	}
	head, err := ReadHead(context.Background(), s, "sales", treeMain)
	if err != nil || head.ID != got.ID || head.Message != "ack lost" {
		t.Fatalf("head = %+v, %v", head, err)
	}
	if n := keysUnder(dump(t, s), format.TreeCommitsPrefix("sales", treeMain)); n != 2 {
		t.Fatalf("tree has %d commits, want 2", n)
	}
}

func TestAppendCommit_PutLost_ReissueSucceeds(t *testing.T) {
	s := newStore(t)
	mustInit(t, s)
	f := withFaults(s, &faultRule{match: keyContains("/commits/"), mode: ambiguousUnapplied, times: 1})
	c := &countingStore{Store: f}
	if _, err := AppendCommit(context.Background(), c, appendParams(0, "lost once")); err != nil {
		t.Fatalf("append: %v", err)
	}
	if c.puts.Load() != 2 {
		t.Fatalf("sent %d puts, want 2 (the lost one and its re-issue)", c.puts.Load())
	}
	head, err := ReadHead(context.Background(), s, "sales", treeMain)
	if err != nil || head.Message != "lost once" {
		t.Fatalf("head = %+v, %v", head, err)
	}
}

func TestAppendCommit_PutNeverLands_IsInDoubtAndSettleAppendLandsIt(t *testing.T) {
	s := newStore(t)
	mustInit(t, s)
	f := withFaults(s, &faultRule{match: keyContains("/commits/"), mode: ambiguousUnapplied, times: MaxPutAttempts})
	_, err := AppendCommit(context.Background(), f, appendParams(0, "in doubt"))
	var d *InDoubtError
	if !errors.Is(err, storage.ErrAmbiguous) || !errors.As(err, &d) || d.Commit == nil || d.Graph != "sales" {
		t.Fatalf("error %v, want *InDoubtError with the commit", err)
	}
	if d.Commit.ID != (format.CommitID{Tree: treeMain, Seq: 1}) {
		t.Fatalf("in-doubt commit %v", d.Commit.ID)
	}
	got, err := SettleAppend(context.Background(), s, d.Graph, *d.Commit)
	if err != nil || got.ID != d.Commit.ID {
		t.Fatalf("settle = %v, %v", got.ID, err)
	}
	obj, err := s.Get(context.Background(), d.Key)
	if err != nil || string(obj.Body) != string(d.Body) {
		t.Fatalf("settled bytes differ from the in-doubt bytes: %v", err)
	}
}

func TestSettleAppend_AnotherCommitTookTheSeq_IsErrStaleHead(t *testing.T) {
	s := newStore(t)
	mustInit(t, s)
	f := withFaults(s, &faultRule{match: keyContains("/commits/"), mode: ambiguousUnapplied, times: MaxPutAttempts})
	_, err := AppendCommit(context.Background(), f, appendParams(0, "in doubt"))
	var d *InDoubtError
	if !errors.As(err, &d) {
		t.Fatalf("error %v, want *InDoubtError", err)
	}
	if _, err := AppendCommit(context.Background(), s, appendParams(0, "another writer")); err != nil {
		t.Fatalf("other append: %v", err)
	}
	if _, err := SettleAppend(context.Background(), s, d.Graph, *d.Commit); !errors.Is(err, ErrStaleHead) {
		t.Fatalf("settle: %v, want ErrStaleHead", err)
	}
}

func TestAppendCommit_Refused_ReturnsAfterOnePut(t *testing.T) {
	s := newStore(t)
	mustInit(t, s)
	f := withFaults(s, &faultRule{match: keyContains("/commits/"), mode: refuse, times: 1})
	c := &countingStore{Store: f}
	_, err := AppendCommit(context.Background(), c, appendParams(0, "refused"))
	if !errors.Is(err, storage.ErrRefused) || c.puts.Load() != 1 {
		t.Fatalf("error %v after %d puts, want ErrRefused after 1", err, c.puts.Load())
	}
}

func TestAppendCommit_ReadsOnlyTheExpectedHead(t *testing.T) {
	s := newStore(t)
	mustInit(t, s)
	c := &countingStore{Store: s}
	if _, err := AppendCommit(context.Background(), c, appendParams(0, "x")); err != nil {
		t.Fatalf("append: %v", err)
	}
	if c.gets.Load() != 1 || c.puts.Load() != 1 || c.total() != 2 {
		t.Fatalf("append sent %d gets, %d puts, %d requests; want 1, 1, 2", c.gets.Load(), c.puts.Load(), c.total())
	}
}

func TestAppendCommit_InvalidParams_AreErrInvalidWithoutRequests(t *testing.T) {
	cases := map[string]func(*AppendParams){
		"Graph":        func(p *AppendParams) { p.Graph = "" },
		"Branch":       func(p *AppendParams) { p.Branch = "a//b" },
		"ExpectedHead": func(p *AppendParams) { p.ExpectedHead = treeFeature.String() + "-0" },
		"MergedParent": func(p *AppendParams) { p.MergedParent = treeMain.String() + "-0" },
		"RestoredFrom": func(p *AppendParams) { p.RestoredFrom = "nope" },
		"Op":           func(p *AppendParams) { p.Op = "has space" },
		"Time":         func(p *AppendParams) { p.Time = p.Time.AddDate(-3000, 0, 0) },
		"Author":       func(p *AppendParams) { p.Author = "" },
		"Pins":         func(p *AppendParams) { p.Pins = map[string]ulid.ULID{"Bad Table": versionA} },
		"Message":      func(p *AppendParams) { p.Message = "nul\x00" },
	}
	for field, mutate := range cases {
		c := &countingStore{Store: newStore(t)}
		p := appendParams(0, "x")
		mutate(&p)
		_, err := AppendCommit(context.Background(), c, p)
		var pe *ParamError
		if !errors.Is(err, ErrInvalid) || !errors.As(err, &pe) {
			t.Errorf("%s: error %v, want ParamError", field, err)
			continue
		}
		if pe.Field != field || c.total() != 0 {
			t.Errorf("%s: ParamError on %s after %d requests", field, pe.Field, c.total())
		}
	}
}

func TestAppendCommit_WrongBranchForTree_IsErrInvalid(t *testing.T) {
	s := newStore(t)
	mustInit(t, s)
	p := appendParams(0, "x")
	p.Branch = "feature"
	var pe *ParamError
	if _, err := AppendCommit(context.Background(), s, p); !errors.As(err, &pe) || pe.Field != "Branch" {
		t.Fatalf("error %v, want ParamError on Branch", err)
	}
}

func TestAppendCommit_ExpectedHeadMissing_IsErrCommitNotFound(t *testing.T) {
	s := newStore(t)
	mustInit(t, s)
	if _, err := AppendCommit(context.Background(), s, appendParams(5, "x")); !errors.Is(err, ErrCommitNotFound) {
		t.Fatalf("error %v, want ErrCommitNotFound", err)
	}
}

func TestForkAndMerge_LineageRecordsAncestorTrees(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	mustInit(t, s)
	m1, err := AppendCommit(ctx, s, appendParams(0, "main 1"))
	if err != nil {
		t.Fatal(err)
	}
	fork, err := ForkCommit(ctx, s, ForkParams{Graph: "sales", Tree: treeFeature, Branch: "feature/x", Source: m1.ID.String(), Author: "bo", Message: "fork", Time: t0, Op: "op-fork-1"})
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	if fork.ID != (format.CommitID{Tree: treeFeature, Seq: 0}) || !maps.Equal(fork.Pins, m1.Pins) ||
		!maps.Equal(fork.Lineage, map[ulid.ULID]int64{treeMain: 1}) {
		t.Fatalf("fork commit = %+v", fork)
	}
	f1, err := AppendCommit(ctx, s, AppendParams{Graph: "sales", Tree: treeFeature, Branch: "feature/x", ExpectedHead: fork.ID.String(),
		Pins: map[string]ulid.ULID{"orders": versionB}, Author: "bo", Message: "feature 1", Time: t0, Op: "op-f-1"})
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(f1.Lineage, fork.Lineage) {
		t.Fatalf("append lineage %v, want the parent's %v", f1.Lineage, fork.Lineage)
	}
	m2, err := AppendCommit(ctx, s, appendParams(1, "main 2"))
	if err != nil {
		t.Fatal(err)
	}
	p := appendParams(2, "merge feature")
	p.MergedParent = f1.ID.String()
	p.Pins = map[string]ulid.ULID{"orders": versionB}
	merge, err := AppendCommit(ctx, s, p)
	if err != nil {
		t.Fatalf("merge: %v", err)
	}
	if len(merge.Parents) != 2 || merge.Parents[0] != m2.ID || merge.Parents[1] != f1.ID {
		t.Fatalf("merge parents = %v", merge.Parents)
	}
	// feature's lineage held main:1, which drops out (main is the merge's own tree).
	if !maps.Equal(merge.Lineage, map[ulid.ULID]int64{treeFeature: 1}) {
		t.Fatalf("merge lineage = %v, want {feature: 1}", merge.Lineage)
	}
	// A second fork of the same tree with other bytes is a taken key.
	_, err = ForkCommit(ctx, s, ForkParams{Graph: "sales", Tree: treeFeature, Branch: "feature/x", Source: m2.ID.String(), Author: "bo", Message: "fork", Time: t0, Op: "op-fork-2"})
	if !errors.Is(err, ErrKeyTaken) {
		t.Fatalf("second fork: %v, want ErrKeyTaken", err)
	}
}
