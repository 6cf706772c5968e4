package format

import (
	"slices"
	"testing"

	"github.com/oklog/ulid/v2"
)

func TestGraftShaped_EveryKeyGraftWrites_AtAnyDepth(t *testing.T) {
	tree := ulid.MustParse("01J0000000000000000000MA1N")
	obj := ulid.MustParse("01J0000000000000000000DATA")
	keys := []string{
		GraphKey("b"),
		TableVersionKey("b", "t", obj),
		ObjectKey("b", "t", obj),
		TableChunksPrefix("b", "t") + "abc.json",
		CommitIDKey("b", CommitID{Tree: tree, Seq: 3, Digest: Digest{1}}),
		ChunksPrefix("b") + "abc.json",
		BranchRefKey("b", NativeName("main", tree)),
		"b/refs/tags/v1.json",
		UploadKey("b", "t", obj),
	}
	for _, k := range keys {
		for _, at := range []string{"", "staging/", "a/b/c/"} {
			if shape, ok := GraftShaped(at + k); !ok || shape == "" {
				t.Errorf("GraftShaped(%q) = %q, %v; want a shape", at+k, shape, ok)
			}
		}
	}
}

func TestGraftShaped_OtherKeys_AreNot(t *testing.T) {
	for _, k := range []string{
		"landed/part-0.csv",
		"graph.json",               // no graph segment before it
		"tables/t/objects/x",       // no graph segment before tables
		"b/tables/t/objects",       // nothing under objects
		"b/tables/t/data/x",        // not a kind graft writes
		"b/trees",                  // nothing under trees
		"warehouse/b/graph.json.1", // not the record's name
		"b/tablesx/t/objects/x",
		"b/uploads/t/x.parquet", // data files under an uploads directory
		"b/uploads/x.json",      // no table segment
	} {
		if shape, ok := GraftShaped(k); ok {
			t.Errorf("GraftShaped(%q) = %q; want none", k, shape)
		}
	}
}

func TestGraphPrefixesOf_EveryPrefixAGraphNameEnds(t *testing.T) {
	got := GraphPrefixesOf("staging/sales/landed/Part-0.csv")
	want := []string{"staging/", "staging/sales/", "staging/sales/landed/"}
	if !slices.Equal(got, want) {
		t.Fatalf("GraphPrefixesOf = %v, want %v", got, want)
	}
	// A segment that is no graph name (upper case) is no graph's prefix.
	if got := GraphPrefixesOf("Landing/x.csv"); len(got) != 0 {
		t.Fatalf("GraphPrefixesOf(Landing/x.csv) = %v, want none", got)
	}
}
