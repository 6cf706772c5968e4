package activities

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/localfs"
)

func (c treeClass) String() string {
	switch c {
	case treeLive:
		return "live"
	case treeCondemnable:
		return "condemnable"
	case treeInFlight:
		return "in_flight"
	case treeUnsettled:
		return "unsettled"
	case treeNeedsFence:
		return "needs_fence"
	}
	return fmt.Sprintf("treeClass(%d)", int(c))
}

func TestClassifyTree_EveryCombinationOfRefAndWitness(t *testing.T) {
	tree := ulid.Make()
	native := format.NativeName("feature/x", tree)
	ref := func(s format.RefState) format.BranchRef { return format.BranchRef{State: s, Native: native} }
	witness := func(s catalog.IncarnationState) *catalog.Incarnation {
		return &catalog.Incarnation{Native: native, Tree: tree.String(), State: s, OpID: "op1"}
	}
	cases := []struct {
		name string
		f    treeFacts
		want treeClass
	}{
		{"live ref", treeFacts{Refs: []format.BranchRef{ref(format.RefLive)}}, treeLive},
		{"live ref beats an in-doubt witness", treeFacts{Refs: []format.BranchRef{ref(format.RefLive)}, Witness: witness(catalog.IncarnationInDoubt)}, treeLive},
		{"live ref beside a fence of another name", treeFacts{Refs: []format.BranchRef{ref(format.RefFence), ref(format.RefLive)}}, treeLive},
		{"retired ref", treeFacts{Refs: []format.BranchRef{ref(format.RefRetired)}, Witness: witness(catalog.IncarnationRetired)}, treeCondemnable},
		{"fence, no witness", treeFacts{Refs: []format.BranchRef{ref(format.RefFence)}}, treeCondemnable},
		{"fence, witness unpublished", treeFacts{Refs: []format.BranchRef{ref(format.RefFence)}, Witness: witness(catalog.IncarnationUnpublished)}, treeCondemnable},
		{"fence, witness still in doubt", treeFacts{Refs: []format.BranchRef{ref(format.RefFence)}, Witness: witness(catalog.IncarnationInDoubt)}, treeInFlight},
		{"no ref, witness intent", treeFacts{Witness: witness(catalog.IncarnationIntent)}, treeInFlight},
		{"no ref, witness cloned", treeFacts{Witness: witness(catalog.IncarnationCloned)}, treeInFlight},
		{"no ref, witness in doubt", treeFacts{Witness: witness(catalog.IncarnationInDoubt)}, treeInFlight},
		{"no ref, witness live contradicts storage", treeFacts{Witness: witness(catalog.IncarnationLive)}, treeUnsettled},
		{"no ref, witness retired contradicts storage", treeFacts{Witness: witness(catalog.IncarnationRetired)}, treeUnsettled},
		{"no ref, witness unpublished", treeFacts{Witness: witness(catalog.IncarnationUnpublished)}, treeNeedsFence},
		{"no ref, no witness", treeFacts{}, treeNeedsFence},
		{"unreadable ref", treeFacts{RefUnreadable: true, Refs: []format.BranchRef{ref(format.RefLive)}}, treeUnsettled},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got, why := classifyTree(c.f); got != c.want {
				t.Fatalf("classifyTree = %s (%s), want %s", got, why, c.want)
			}
		})
	}
}

func TestPinSet_ExactAndPrefixPinsConflictLikeTheLedger(t *testing.T) {
	s := newPinSet([]catalog.PinRecord{{Key: "g/tables/t/versions/A.json"}, {Key: "g/trees/T/"}})
	cases := map[string]bool{
		"g/tables/t/versions/A.json":  true,
		"g/tables/t/versions/B.json":  false,
		"g/trees/T/commits/0001.json": true,
		"g/trees/U/commits/0001.json": false,
		"g/trees/":                    true, // a prefix covering a pin
		"g/tables/t/versions/A.jso":   false,
	}
	for key, want := range cases {
		if got := s.pinned(key); got != want {
			t.Errorf("pinned(%q) = %v, want %v", key, got, want)
		}
	}
}

func TestParseKeys_AcceptOnlyCanonicalNames(t *testing.T) {
	id := ulid.Make().String()
	vp, op := "g/tables/t/versions/", "g/tables/t/objects/"
	for _, c := range []struct {
		prefix, suffix string
		bad            []string
	}{
		{vp, ".json", []string{vp + id, vp + id + ".json.tmp", vp + "x.json", op + id + ".json"}},
		{op, "", []string{op + id + "/x", op + "lower" + id[5:], vp + id}},
	} {
		if got, ok := parseIDKey(c.prefix, c.suffix, c.prefix+id+c.suffix); !ok || got.String() != id {
			t.Fatalf("parseIDKey(%q, canonical) = %v, %v", c.prefix, got, ok)
		}
		for _, bad := range c.bad {
			if _, ok := parseIDKey(c.prefix, c.suffix, bad); ok {
				t.Errorf("parseIDKey(%q) accepted %q", c.prefix, bad)
			}
		}
	}
}

func TestListTables_FindsEveryTableWithOneListPerTable(t *testing.T) {
	ctx := context.Background()
	s, err := localfs.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	counted := &countingStore{inner: s}
	// "t" sorts after "t-x" and before "t0" and "ta": the skip must not lose any of them.
	tables := []string{"_z", "a", "t", "t-x", "t0", "ta"}
	for _, table := range tables {
		for i := range 3 {
			key := format.ObjectKey("g", table, ulid.Make())
			if i == 0 {
				key = format.TableVersionKey("g", table, ulid.Make())
			}
			if _, err := s.Put(ctx, key, []byte("x"), storage.PutOptions{IfNoneMatch: true}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := s.Put(ctx, "g/trees/"+ulid.Make().String()+"/commits/1.json", []byte("x"), storage.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := listTables(ctx, counted, "g")
	if err != nil {
		t.Fatalf("listTables: %v", err)
	}
	// Key order, not name order: "t-x/" sorts before "t/".
	want := []string{"_z", "a", "t-x", "t", "t0", "ta"}
	if !slices.Equal(got, want) {
		t.Fatalf("listTables = %v, want %v", got, want)
	}
	if lists := counted.requests().List; lists != int64(len(tables)+1) {
		t.Fatalf("%d LISTs, want one per table and a last empty one (%d)", lists, len(tables)+1)
	}
}
