package storagetest

import (
	"strings"
	"testing"

	"github.com/graftworks/graft/storage"
)

var keyCases = []conformanceCase{
	{"InvalidKey_GetPutHeadDelete_AreInvalidKeyAndWriteNothing", func(t *testing.T, s storage.Store) {
		ctx := t.Context()
		for _, k := range invalidKeys {
			if k.name == "too_long" && len(k.key) <= storage.MaxKeyLen {
				t.Fatalf("too_long key is %d bytes, not over MaxKeyLen %d", len(k.key), storage.MaxKeyLen)
			}
			requireCode(t, errOf(s.Get(ctx, k.key)), storage.CodeInvalidKey, "get "+k.name)
			requireCode(t, errOf(s.Head(ctx, k.key)), storage.CodeInvalidKey, "head "+k.name)
			requireCode(t, errOf(s.Put(ctx, k.key, []byte("x"), storage.PutOptions{IfNoneMatch: true})), storage.CodeInvalidKey, "put-if-absent "+k.name)
			requireCode(t, errOf(s.Put(ctx, k.key, []byte("x"), storage.PutOptions{})), storage.CodeInvalidKey, "put "+k.name)
			requireCode(t, s.Delete(ctx, k.key), storage.CodeInvalidKey, "delete "+k.name)
		}
		if keys := Keys(t, s, ""); len(keys) != 0 {
			t.Fatalf("store holds %q after only invalid puts, want nothing", keys)
		}
	}},
}

// invalidKeys are keys that break one rule of storage.ValidateKey each.
var invalidKeys = []struct{ name, key string }{
	{"empty", ""},
	{"leading_slash", "/graph.json"},
	{"trailing_slash", "refs/"},
	{"dotdot_segment", "refs/../graph.json"},
	{"dot_segment", "refs/./graph.json"},
	{"empty_segment", "refs//graph.json"},
	// Short segments, so only the total length is over the limit.
	{"too_long", strings.Repeat("abcdefghi/", storage.MaxKeyLen/10) + "abcdefghij"},
	{"control_character", "refs/a\x01b"},
	{"backslash", `refs\graph.json`},
}
