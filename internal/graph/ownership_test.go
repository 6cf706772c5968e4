package graph

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/faults"
)

// A graph owns its whole prefix, and only its prefix (docs/format.md, *Ownership*).

func TestInit_PrefixHoldingAnotherToolsObject_IsErrPrefixTakenAndWritesNothing(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *faults.Store) {
		ctx := context.Background()
		for _, k := range []string{"sales/landed/part-0.csv", "sales/tables/t/objects/" + objID(1).String()} {
			if _, err := s.Put(ctx, k, []byte("another tool's"), storage.PutOptions{IfNoneMatch: true}); err != nil {
				t.Fatal(err)
			}
		}
		before := dump(t, s)
		_, err := Init(ctx, s, initParams())
		var taken *PrefixTakenError
		if !errors.Is(err, ErrPrefixTaken) || !errors.As(err, &taken) || taken.Key != "sales/landed/part-0.csv" {
			t.Fatalf("init = %v; want a *PrefixTakenError naming sales/landed/part-0.csv", err)
		}
		if n := s.Count(faults.OpPut).Sent; n != 2 { // the two objects the test put
			t.Fatalf("init sent %d puts", n-2)
		}
		if after := dump(t, s); !maps.Equal(before, after) {
			t.Fatalf("init changed the store: %v -> %v", before, after)
		}
	})
}

func TestInit_RerunAfterRefWrittenAndRecordRefused_OwnKeysAcceptedAndCompletes(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *faults.Store) {
		ctx := context.Background()
		remove := s.Add(faults.Rule{Op: faults.OpPut, KeyGlob: "sales/graph.json", Mode: faults.Refuse, Status: 403})
		if _, err := Init(ctx, s, initParams()); !errors.Is(err, storage.ErrRefused) {
			t.Fatalf("first run: %v; want refused at the graph record", err)
		}
		remove()
		if n := len(dump(t, s)); n != 2 {
			t.Fatalf("after the refused record the prefix holds %d keys, want the root commit and main's ref", n)
		}
		res, err := Init(ctx, s, initParams())
		if err != nil || !res.Created {
			t.Fatalf("re-run: %+v, %v; want created", res, err)
		}
		again, err := Init(ctx, s, initParams())
		if err != nil || again.Created || again.Root.ID != res.Root.ID {
			t.Fatalf("third run: %+v, %v; want the same graph, not created", again, err)
		}
	})
}

func TestImportEntries_KeyUnderAnotherGraph_IsInvalidBeforeAnyObjectRead(t *testing.T) {
	eachBackend(t, func(t *testing.T, s *faults.Store) {
		ctx := context.Background()
		other := initParams()
		other.Graph = "other"
		if _, err := Init(ctx, s, other); err != nil {
			t.Fatal(err)
		}
		// Not graft-shaped, but under a graph's prefix: that graph owns it.
		key := "other/landed/part-0.csv"
		if _, err := s.Put(ctx, key, []byte("x"), storage.PutOptions{IfNoneMatch: true}); err != nil {
			t.Fatal(err)
		}
		s.ResetCounts()
		_, err := ImportEntries(ctx, s, "sales", []ImportRef{{Key: "landing/fine.csv"}, {Key: key}})
		var pe *ParamError
		if !errors.Is(err, ErrInvalid) || !errors.As(err, &pe) || pe.Field != "Refs[1].Key" || !strings.Contains(err.Error(), "other/graph.json exists") {
			t.Fatalf("import = %v; want invalid Refs[1].Key naming the graph record", err)
		}
		if h := s.CountMatching(faults.Rule{Op: faults.OpHead, KeyGlob: key}).Sent; h != 0 {
			t.Fatalf("the refused key was HEADed %d times", h)
		}
	})
}

func TestImportEntries_GraftShapedKeyWhereNoGraphExists_IsInvalidWithoutARequest(t *testing.T) {
	s := &countingStore{Store: newStore(t)}
	for _, key := range []string{
		"nograph/tables/t/objects/" + objID(1).String(),
		"staging/nograph/chunks/abc.json",
		"nograph/graph.json",
		"sales/landed/x.csv", // the importing graph's own prefix
	} {
		_, err := ImportEntries(context.Background(), s, "sales", []ImportRef{{Key: key}})
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("import %s = %v; want invalid", key, err)
		}
	}
	if s.total() != 0 {
		t.Fatalf("%d requests sent for refused imports", s.total())
	}
}

func TestImportEntries_KeyUnderAGraphBelowAStorePrefix_IsInvalid(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	// Another deployment's graph, under its own store prefix in a shared bucket.
	if _, err := s.Put(ctx, "staging/other/graph.json", []byte("{}"), storage.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "staging/other/landed/x.csv", []byte("x"), storage.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := ImportEntries(ctx, s, "sales", []ImportRef{{Key: "staging/other/landed/x.csv"}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("import = %v; want invalid", err)
	}
	if _, err := s.Put(ctx, "staging/landed/y.csv", []byte("y"), storage.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := ImportEntries(ctx, s, "sales", []ImportRef{{Key: "staging/landed/y.csv"}}); err != nil {
		t.Fatalf("import of a key under no graph: %v", err)
	}
}
