package graph

import (
	"context"
	"errors"
	"testing"

	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/faults"
)

func tagBody(t *testing.T, name, commit, op string) []byte {
	t.Helper()
	b, err := TagBytes(TagParams{Graph: "sales", Name: name, Commit: commit, Op: op, Time: t0})
	if err != nil {
		t.Fatalf("tag bytes: %v", err)
	}
	return b
}

func TestPutTag_SameCommitIsIdempotent_OtherCommitIsTaken(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	c1, c2 := treeMain.String()+"-1-aa000000000000000000000000000000", treeMain.String()+"-2-bb000000000000000000000000000000"
	first := tagBody(t, "release/1", c1, "op-1")
	for i, tc := range []struct {
		body []byte
		want TagPutOutcome
	}{
		{first, TagCreated}, // a new tag
		{first, TagCreated}, // the same create repeated: our bytes are there
		{tagBody(t, "release/1", c1, "op-2"), TagExists}, // another operation, same commit
		{tagBody(t, "release/1", c2, "op-3"), TagTaken},  // another commit under the name
	} {
		res, err := PutTag(ctx, s, "sales", tc.body)
		if err != nil || res.Outcome != tc.want {
			t.Fatalf("put %d: %+v, %v; want %s", i, res, err, tc.want)
		}
		if res.Tag.Op != "op-1" || res.Tag.Commit.String() != c1 {
			t.Fatalf("put %d: tag now %+v, want op-1's", i, res.Tag)
		}
	}
	entry, err := ReadTag(ctx, s, "sales", "release/1")
	if err != nil || entry.Tag.State != format.TagLive || entry.ETag == "" {
		t.Fatalf("read tag: %+v, %v", entry, err)
	}
	if _, err := ReadTag(ctx, s, "sales", "nope"); !errors.Is(err, ErrTagNotFound) {
		t.Fatalf("read missing tag: %v, want ErrTagNotFound", err)
	}
}

func TestRetireTag_AnswerLost_SettledAsOursAndLatePutOfLiveTagFails(t *testing.T) {
	ctx := context.Background()
	s := faults.Wrap(newStore(t))
	c1 := treeMain.String() + "-1-aa000000000000000000000000000000"
	live := tagBody(t, "v1", c1, "op-1")
	if _, err := PutTag(ctx, s, "sales", live); err != nil {
		t.Fatal(err)
	}
	entry, err := ReadTag(ctx, s, "sales", "v1")
	if err != nil {
		t.Fatal(err)
	}
	s.Add(faults.Rule{Op: faults.OpPut, KeyPrefix: format.TagsPrefix("sales"), Mode: faults.ApplyLoseAnswer, Times: 1})
	out, err := RetireTag(ctx, s, "sales", "v1", entry.ETag, "op-del")
	if err != nil || out != PutAlreadyOurs {
		t.Fatalf("retire: %v, %v; want settled as ours", out, err)
	}
	again, err := RetireTag(ctx, s, "sales", "v1", entry.ETag, "op-del")
	if err != nil || again != PutAlreadyOurs {
		t.Fatalf("retire repeated: %v, %v", again, err)
	}
	if _, err := RetireTag(ctx, s, "sales", "v1", entry.ETag, "op-other"); !errors.Is(err, ErrTagChanged) {
		t.Fatalf("retire by another operation: %v, want ErrTagChanged", err)
	}
	if _, err := s.Put(ctx, format.TagKey("sales", "v1"), live, storage.PutOptions{IfNoneMatch: true}); !errors.Is(err, storage.ErrPreconditionFailed) {
		t.Fatalf("late put of the live tag: %v, want precondition failed", err)
	}
	res, err := PutTag(ctx, s, "sales", tagBody(t, "v1", c1, "op-new"))
	if err != nil || res.Outcome != TagTaken || res.Tag.State != format.TagRetired {
		t.Fatalf("reuse of a retired name: %+v, %v; want taken by the retired tag", res, err)
	}
	tags, err := ListTags(ctx, s, "sales")
	if err != nil || len(tags) != 1 || tags[0].Tag.RetiredOp != "op-del" {
		t.Fatalf("list: %+v, %v", tags, err)
	}
}
