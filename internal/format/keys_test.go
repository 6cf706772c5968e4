package format

import (
	"math"
	"sort"
	"strings"
	"testing"
)

func TestCommitKey_NewerSeqSortsFirst(t *testing.T) {
	seqs := []int64{0, 1, 9, 10, 11, 99, 100, 12345, math.MaxInt64 - 1, math.MaxInt64}
	keys := make([]string, len(seqs))
	for i, seq := range seqs {
		// A digest that falls as seq grows: the order is the seq's alone.
		keys[i] = CommitIDKey("g", CommitID{Tree: treeMain, Seq: seq, Digest: Digest{byte(255 - i)}})
	}
	sorted := append([]string(nil), keys...)
	sort.Strings(sorted)
	for i := range sorted {
		if want := keys[len(keys)-1-i]; sorted[i] != want {
			t.Fatalf("sorted[%d] = %s, want %s (descending seq)", i, sorted[i], want)
		}
	}
	for _, k := range keys {
		if !strings.HasPrefix(k, TreeCommitsPrefix("g", treeMain)) {
			t.Fatalf("key %s not under TreeCommitsPrefix", k)
		}
	}
}

func TestParseCommitKey_InvertsCommitIDKey(t *testing.T) {
	for _, seq := range []int64{0, 1, 64, math.MaxInt64} {
		id := CommitID{Tree: treeFeature, Seq: seq, Digest: Digest{0xab, byte(seq)}}
		key := CommitIDKey("sales", id)
		got, err := ParseCommitKey("sales", key)
		if err != nil || got != id {
			t.Fatalf("ParseCommitKey(%s) = %v, %v", key, got, err)
		}
	}
	const d = "-ab000000000000000000000000000000"
	for _, key := range []string{
		"other/trees/01J0000000000000000000MA1N/commits/9223372036854775807" + d + ".json",
		"sales/trees/01J0000000000000000000MA1N/commits/922337203685477580" + d + ".json",
		"sales/trees/01J0000000000000000000MA1N/commits/9223372036854775808" + d + ".json",
		"sales/trees/01J0000000000000000000MA1N/commits/922337203685477580x" + d + ".json",
		"sales/trees/01J0000000000000000000MA1N/commits/9223372036854775807" + d,
		"sales/trees/bad/commits/9223372036854775807" + d + ".json",
		"sales/trees/01J0000000000000000000MA1N/9223372036854775807" + d + ".json",
		"sales/trees/01J0000000000000000000MA1N/commits/9223372036854775807.json",
		"sales/trees/01J0000000000000000000MA1N/commits/9223372036854775807-00000000000000000000000000000000.json",
	} {
		if _, err := ParseCommitKey("sales", key); err == nil {
			t.Errorf("ParseCommitKey(%s) succeeded, want error", key)
		}
	}
}

func TestBranchRefKeys_ParseBackAndPrefixSelectsIncarnations(t *testing.T) {
	native := NativeName("feature/x", treeFeature)
	key := BranchRefKey("sales", native)
	if key != "sales/refs/branches/feature/x."+treeFeature.String()+".json" {
		t.Fatalf("BranchRefKey = %s", key)
	}
	got, err := ParseBranchRefKey("sales", key)
	if err != nil || got != native {
		t.Fatalf("ParseBranchRefKey = %q, %v", got, err)
	}
	if !strings.HasPrefix(key, BranchRefPrefix("sales", "feature/x")) {
		t.Fatalf("%s not under BranchRefPrefix", key)
	}
	if strings.HasPrefix(key, BranchRefPrefix("sales", "feature")) {
		t.Fatalf("%s under the prefix of another logical name", key)
	}
	for _, bad := range []string{"sales/refs/branches/main.json", "sales/refs/branches/main." + treeMain.String(), "sales/refs/tags/main." + treeMain.String() + ".json"} {
		if _, err := ParseBranchRefKey("sales", bad); err == nil {
			t.Errorf("ParseBranchRefKey(%s) succeeded, want error", bad)
		}
	}
}

func TestTagKey_ParsesBack(t *testing.T) {
	key := TagKey("sales", "release/v1")
	if name, err := ParseTagKey("sales", key); err != nil || name != "release/v1" {
		t.Fatalf("ParseTagKey(%s) = %q, %v", key, name, err)
	}
	if _, err := ParseTagKey("sales", "sales/refs/tags/a//b.json"); err == nil {
		t.Fatal("ParseTagKey accepted an invalid name")
	}
}

func TestUploadKey_ParsesBack_AndNamesItsObject(t *testing.T) {
	key := UploadKey("sales", "orders", objectA)
	if key != "sales/uploads/orders/"+objectA.String()+".json" {
		t.Fatalf("UploadKey = %s", key)
	}
	table, obj, err := ParseUploadKey("sales", key)
	if err != nil || table != "orders" || obj != objectA {
		t.Fatalf("ParseUploadKey(%s) = %q, %v, %v", key, table, obj, err)
	}
	if !strings.HasPrefix(key, UploadsPrefix("sales")) {
		t.Fatalf("%s not under UploadsPrefix", key)
	}
	g, table, obj, err := ParseObjectKey(ObjectKey("sales", "orders", objectA))
	if err != nil || g != "sales" || table != "orders" || obj != objectA {
		t.Fatalf("ParseObjectKey = %q, %q, %v, %v", g, table, obj, err)
	}
	for _, bad := range []string{
		"other/uploads/orders/" + objectA.String() + ".json",
		"sales/uploads/" + objectA.String() + ".json",
		"sales/uploads/Orders/" + objectA.String() + ".json",
		"sales/uploads/orders/" + objectA.String(),
		"sales/uploads/orders/x/" + objectA.String() + ".json",
		"sales/uploads/orders/" + strings.ToLower(objectA.String()) + ".json",
	} {
		if _, _, err := ParseUploadKey("sales", bad); err == nil {
			t.Errorf("ParseUploadKey(%s) succeeded, want error", bad)
		}
	}
	for _, bad := range []string{
		TableVersionKey("sales", "orders", versionA),
		"sales/tables/orders/objects/" + objectA.String() + "/x",
		"Sales/tables/orders/objects/" + objectA.String(),
		"a/b/tables/orders/objects/" + objectA.String(),
	} {
		if _, _, _, err := ParseObjectKey(bad); err == nil {
			t.Errorf("ParseObjectKey(%s) succeeded, want error", bad)
		}
	}
}

// No key may be another key's prefix followed by '/': some stores (versitygw
// on a POSIX file system, localfs) cannot hold both "a" and "a/b".
func TestKeys_NoKeyIsAnotherKeysDirectory(t *testing.T) {
	graph := "g"
	var keys []string
	logicals := []string{"a", "a/b", "a.b", "a.b/c", "x.json.y", "v1.0/rc", "main"}
	for _, l := range logicals {
		if err := ValidateBranchName(l); err != nil {
			t.Fatalf("fixture %q invalid: %v", l, err)
		}
		keys = append(keys, BranchRefKey(graph, NativeName(l, treeMain)), BranchRefKey(graph, NativeName(l, treeFeature)), TagKey(graph, l))
	}
	for _, table := range []string{"t", "t_1"} {
		keys = append(keys, TableVersionKey(graph, table, versionA), ObjectKey(graph, table, objectA), UploadKey(graph, table, objectA))
	}
	keys = append(keys, GraphKey(graph), CommitIDKey(graph, CommitID{Tree: treeMain, Seq: 0, Digest: Digest{1}}), CommitIDKey(graph, CommitID{Tree: treeMain, Seq: 1, Digest: Digest{2}}))
	for _, a := range keys {
		for _, b := range keys {
			if strings.HasPrefix(b, a+"/") {
				t.Errorf("key %s is a directory of key %s", a, b)
			}
		}
	}
}
