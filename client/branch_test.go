package client

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/localfs"
)

var t0 = time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)

// newGraph returns a local store holding graph "sales" with main at its root.
func newGraph(t *testing.T) (storage.Store, graph.InitResult) {
	t.Helper()
	s, err := localfs.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	res, err := graph.Init(context.Background(), s, graph.InitParams{Graph: "sales", MainTree: ulid.Make(), Op: "op-init", Time: t0})
	if err != nil {
		t.Fatal(err)
	}
	return s, res
}

// addBranch writes a live incarnation of branch forked from source, as a create would.
func addBranch(t *testing.T, s storage.Store, branch, source string) string {
	t.Helper()
	ctx := context.Background()
	tree := ulid.Make()
	g, err := graph.Open(s, "sales")
	if err != nil {
		t.Fatal(err)
	}
	plan, err := g.CreateBranch(ctx, graph.ForkSpec{Branch: branch, Tree: tree, Source: source,
		Author: "ana", Message: "fork", Time: t0.Add(time.Minute), Op: "op-" + tree.String()})
	if err != nil {
		t.Fatal(err)
	}
	return plan.Ref.Native
}

func TestReader_ListBranches_ReturnsEachLiveBranchWithItsHead(t *testing.T) {
	s, init := newGraph(t)
	feature := addBranch(t, s, "feature/x", init.Root.ID.String())
	got, err := NewReader(s).ListBranches(context.Background(), "sales")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Branch != "feature/x" || got[0].Native != feature || got[1].Branch != "main" || got[1].Native != init.MainRef.Native {
		t.Fatalf("branches %+v", got)
	}
	if got[1].Head != init.Root.ID.String() || !got[1].HeadTime.Equal(t0) || got[1].Tables != 0 {
		t.Fatalf("main %+v, want its root commit at %s", got[1], t0)
	}
	if !strings.HasPrefix(got[0].Head, strings.TrimPrefix(feature, "feature/x.")) {
		t.Fatalf("feature head %s is not in its own tree %s", got[0].Head, feature)
	}
}

func TestReader_TwoLiveIncarnations_IsConflictNamingTheRepair(t *testing.T) {
	s, init := newGraph(t)
	a := addBranch(t, s, "dup", init.Root.ID.String())
	b := addBranch(t, s, "dup", init.Root.ID.String())
	r := NewReader(s)
	for what, err := range map[string]error{
		"list": func() error { _, err := r.ListBranches(context.Background(), "sales"); return err }(),
		"show": func() error { _, err := r.ShowBranch(context.Background(), "sales", "dup"); return err }(),
	} {
		if !errors.Is(err, outcome.ErrConflict) {
			t.Fatalf("%s: %v, want conflict", what, err)
		}
		for _, want := range []string{"graft branch repair sales dup --keep", a, b} {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("%s: %q does not name %q", what, err, want)
			}
		}
	}
}

func TestReader_BadNames_AreInvalid(t *testing.T) {
	s, _ := newGraph(t)
	r := NewReader(s)
	if _, err := r.Graph(context.Background(), "Bad Graph"); !errors.Is(err, outcome.ErrInvalid) {
		t.Fatalf("graph: %v, want invalid", err)
	}
	if _, err := r.ShowBranch(context.Background(), "sales", "a/../b"); !errors.Is(err, outcome.ErrInvalid) {
		t.Fatalf("branch: %v, want invalid", err)
	}
}

func TestReadError_StorageFailuresAreNotOutcomes(t *testing.T) {
	err := readError(storage.ErrUnavailable, "sales", "main")
	if _, ok := outcome.Of(err); ok || !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("unavailable store became %v", err)
	}
}
