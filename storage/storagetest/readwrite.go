package storagetest

import (
	"bytes"
	"testing"
	"time"

	"github.com/graftworks/graft/storage"
)

var readWriteCases = []conformanceCase{
	{"Get_MissingKey_IsNotFound", func(t *testing.T, s storage.Store) {
		requireCode(t, errOf(s.Get(t.Context(), "missing/key.json")), storage.CodeNotFound, "get missing key")
	}},
	{"Head_MissingKey_IsNotFound", func(t *testing.T, s storage.Store) {
		requireCode(t, errOf(s.Head(t.Context(), "missing/key.json")), storage.CodeNotFound, "head missing key")
	}},
	{"Put_ThenGetHeadList_AgreeOnBytesSizeETag", func(t *testing.T, s storage.Store) {
		const key = "roundtrip/dir/object.bin"
		body := make([]byte, 4096)
		for i := range body {
			body[i] = byte(i * 7)
		}
		before := time.Now()
		put := mustPut(t, s, key, body, storage.PutOptions{IfNoneMatch: true})

		head, err := s.Head(t.Context(), key)
		if err != nil {
			t.Fatalf("head: %v", err)
		}
		requireInfo(t, "head", head, key, len(body), put.ETag)
		// Generous bounds: a server clock may be skewed a little, and some
		// backends keep whole seconds only.
		if head.LastModified.Before(before.Add(-time.Hour)) || head.LastModified.After(time.Now().Add(time.Hour)) {
			t.Fatalf("head LastModified = %v, want near %v", head.LastModified, before)
		}

		obj := mustGet(t, s, key)
		if !bytes.Equal(obj.Body, body) {
			t.Fatalf("get body differs from the bytes put (%d bytes, want %d)", len(obj.Body), len(body))
		}
		requireInfo(t, "get", obj.ObjectInfo, key, len(body), put.ETag)
		if !obj.LastModified.Equal(head.LastModified) {
			t.Fatalf("get LastModified = %v, head says %v", obj.LastModified, head.LastModified)
		}

		page := listPage(t, s, storage.ListOptions{Prefix: "roundtrip/"})
		if len(page.Objects) != 1 || page.Truncated {
			t.Fatalf("list = %d objects (truncated %v), want exactly 1", len(page.Objects), page.Truncated)
		}
		requireInfo(t, "list entry", page.Objects[0], key, len(body), put.ETag)
	}},
	{"Put_EmptyBody_RoundTrips", func(t *testing.T, s storage.Store) {
		const key = "empty/object"
		put := mustPut(t, s, key, nil, storage.PutOptions{IfNoneMatch: true})
		obj := mustGet(t, s, key)
		requireInfo(t, "get", obj.ObjectInfo, key, 0, put.ETag)
		if len(obj.Body) != 0 {
			t.Fatalf("get body = %d bytes, want 0", len(obj.Body))
		}
	}},
	{"Put_Unconditional_OverwritesAndChangesETag", func(t *testing.T, s storage.Store) {
		const key = "overwrite/object"
		first := mustPut(t, s, key, []byte("first"), storage.PutOptions{})
		second := mustPut(t, s, key, []byte("second"), storage.PutOptions{})
		if second.ETag == first.ETag {
			t.Fatalf("ETag unchanged (%q) after overwriting with different bytes", first.ETag)
		}
		requireObject(t, s, key, "second", second.ETag)
	}},
}

// requireInfo fails t unless info names key, size and etag and has a time.
func requireInfo(t *testing.T, what string, info storage.ObjectInfo, key string, size int, etag string) {
	t.Helper()
	if info.Key != key || info.Size != int64(size) || info.ETag != etag || info.LastModified.IsZero() {
		t.Fatalf("%s = {Key:%q Size:%d ETag:%q LastModified:%v}, want {Key:%q Size:%d ETag:%q} and a time",
			what, info.Key, info.Size, info.ETag, info.LastModified, key, size, etag)
	}
}
