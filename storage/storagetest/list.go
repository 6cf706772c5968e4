package storagetest

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/graftworks/graft/storage"
)

// writers bounds the concurrency used to lay down fixtures.
const writers = 16

var listCases = []conformanceCase{
	{"List_1005KeysUnderPrefix_PagesInAscendingOrder", func(t *testing.T, s storage.Store) {
		const prefix = "list/items/"
		objects := map[string][]byte{}
		// Within the prefix, "a-b" < "a.b" < "a/b" in byte order, which is not
		// the order a directory walk yields by name ("a" < "a-b" < "a.b").
		inside := []string{prefix + "a-b", prefix + "a.b", prefix + "a/b"}
		for i := range 1005 - len(inside) {
			inside = append(inside, fmt.Sprintf("%sk%04d", prefix, i))
		}
		for _, k := range inside {
			objects[k] = []byte("body of " + k)
		}
		want := slices.Sorted(slices.Values(inside))
		// Decoys outside the prefix, including ones that share its string but
		// not its '/' boundary.
		decoys := []string{"list/item", "list/items-x/a", "list/items.json", "list/itemsz/b", "list/a", "other/list/items/k0001"}
		for _, k := range decoys {
			objects[k] = []byte("decoy " + k)
		}
		etags, err := PutMany(t.Context(), s, objects, writers)
		if err != nil {
			t.Fatalf("write fixtures: %v", err)
		}

		first := listPage(t, s, storage.ListOptions{Prefix: prefix})
		requireKeys(t, "first page", first, want[:1000])
		if !first.Truncated {
			t.Fatalf("first page of 1000 with 5 keys left: Truncated = false")
		}
		for _, o := range first.Objects {
			requireInfo(t, "list entry", o, o.Key, len(objects[o.Key]), etags[o.Key])
		}
		second := listPage(t, s, storage.ListOptions{Prefix: prefix, StartAfter: first.Objects[len(first.Objects)-1].Key})
		requireKeys(t, "second page", second, want[1000:])
		if second.Truncated {
			t.Fatalf("last page of 5: Truncated = true")
		}

		mid := listPage(t, s, storage.ListOptions{Prefix: prefix, StartAfter: want[499], Limit: 10})
		requireKeys(t, "page after an existing key", mid, want[500:510])
		if !mid.Truncated {
			t.Fatalf("page of 10 in the middle: Truncated = false")
		}
		between := listPage(t, s, storage.ListOptions{Prefix: prefix, StartAfter: prefix + "k0500a", Limit: 2})
		requireKeys(t, "page after a key between two keys", between, []string{prefix + "k0501", prefix + "k0502"})

		partial := listPage(t, s, storage.ListOptions{Prefix: prefix + "k09"})
		var wantPartial []string
		for _, k := range want {
			if strings.HasPrefix(k, prefix+"k09") {
				wantPartial = append(wantPartial, k)
			}
		}
		requireKeys(t, "prefix ending inside a segment", partial, wantPartial)
		if partial.Truncated {
			t.Fatalf("prefix ending inside a segment: Truncated = true for %d keys", len(wantPartial))
		}

		if all := Keys(t, s, prefix); !slices.Equal(all, want) {
			t.Fatalf("ListAll(%q) = %d keys %s, want %d keys %s", prefix, len(all), abbreviate(all), len(want), abbreviate(want))
		}
		everything := append(slices.Clone(want), decoys...)
		slices.Sort(everything)
		if all := Keys(t, s, ""); !slices.Equal(all, everything) {
			t.Fatalf("ListAll(\"\") = %d keys %s, want %d keys %s", len(all), abbreviate(all), len(everything), abbreviate(everything))
		}
	}},
	{"List_Limit1_ReturnsSmallestKey", func(t *testing.T, s storage.Store) {
		const prefix = "trees/main/commits/"
		objects := map[string][]byte{}
		for _, k := range []string{prefix + "0003.json", prefix + "0001.json", prefix + "0002.json", "trees/main/commits-old/0000.json", "trees/main/a.json"} {
			objects[k] = []byte(k)
		}
		if _, err := PutMany(t.Context(), s, objects, writers); err != nil {
			t.Fatalf("write fixtures: %v", err)
		}
		head := listPage(t, s, storage.ListOptions{Prefix: prefix, Limit: 1})
		requireKeys(t, "limit 1", head, []string{prefix + "0001.json"})
		if !head.Truncated {
			t.Fatalf("limit 1 of 3 keys: Truncated = false")
		}
		next := listPage(t, s, storage.ListOptions{Prefix: prefix, Limit: 1, StartAfter: head.Objects[0].Key})
		requireKeys(t, "limit 1 after the first key", next, []string{prefix + "0002.json"})
		empty := listPage(t, s, storage.ListOptions{Prefix: "trees/other/", Limit: 1})
		requireKeys(t, "limit 1 under a prefix with no keys", empty, nil)
		if empty.Truncated {
			t.Fatalf("empty listing: Truncated = true")
		}
	}},
}

// listPage lists one page and fails t on error.
func listPage(t *testing.T, s storage.Store, opts storage.ListOptions) storage.ListPage {
	t.Helper()
	page, err := s.List(t.Context(), opts)
	if err != nil {
		t.Fatalf("list %+v: %v", opts, err)
	}
	return page
}

// requireKeys fails t unless page holds exactly want, in order.
func requireKeys(t *testing.T, what string, page storage.ListPage, want []string) {
	t.Helper()
	got := make([]string, len(page.Objects))
	for i, o := range page.Objects {
		got[i] = o.Key
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s: got %d keys %s, want %d keys %s", what, len(got), abbreviate(got), len(want), abbreviate(want))
	}
}

// abbreviate shows the ends of a long key list.
func abbreviate(keys []string) string {
	if len(keys) <= 8 {
		return fmt.Sprintf("%q", keys)
	}
	return fmt.Sprintf("%q … %q", keys[:4], keys[len(keys)-4:])
}
