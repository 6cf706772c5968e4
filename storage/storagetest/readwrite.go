package storagetest

import (
	"bytes"
	"testing"
	"time"

	"github.com/graftworks/graft/storage"
)

var readWriteCases = []conformanceCase{
	{"Get_MissingKey_IsNotFound", testGetMissingKeyIsNotFound},
	{"Head_MissingKey_IsNotFound", testHeadMissingKeyIsNotFound},
	{"Put_ThenGetHeadList_AgreeOnBytesSizeETag", testPutThenGetHeadListAgree},
	{"Put_EmptyBody_RoundTrips", testPutEmptyBodyRoundTrips},
	{"Put_Unconditional_OverwritesAndChangesETag", testPutUnconditionalOverwrites},
}

func testGetMissingKeyIsNotFound(t *testing.T, s storage.Store) {
	_, err := s.Get(t.Context(), "missing/key.json")
	requireCode(t, err, storage.CodeNotFound, "get missing key")
}

func testHeadMissingKeyIsNotFound(t *testing.T, s storage.Store) {
	_, err := s.Head(t.Context(), "missing/key.json")
	requireCode(t, err, storage.CodeNotFound, "head missing key")
}

func testPutThenGetHeadListAgree(t *testing.T, s storage.Store) {
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
	if head.Key != key || head.Size != int64(len(body)) || head.ETag != put.ETag {
		t.Fatalf("head = {Key:%q Size:%d ETag:%q}, want {Key:%q Size:%d ETag:%q}",
			head.Key, head.Size, head.ETag, key, len(body), put.ETag)
	}
	if head.LastModified.IsZero() {
		t.Fatalf("head LastModified is zero")
	}
	// Generous bounds: a server clock may be skewed a little, and some
	// backends keep whole seconds only.
	if head.LastModified.Before(before.Add(-time.Hour)) || head.LastModified.After(time.Now().Add(time.Hour)) {
		t.Fatalf("head LastModified = %v, want near %v", head.LastModified, before)
	}

	obj := mustGet(t, s, key)
	if !bytes.Equal(obj.Body, body) {
		t.Fatalf("get body differs from the bytes put (%d bytes, want %d)", len(obj.Body), len(body))
	}
	if obj.Key != key || obj.Size != int64(len(body)) || obj.ETag != put.ETag {
		t.Fatalf("get = {Key:%q Size:%d ETag:%q}, want {Key:%q Size:%d ETag:%q}",
			obj.Key, obj.Size, obj.ETag, key, len(body), put.ETag)
	}
	if !obj.LastModified.Equal(head.LastModified) {
		t.Fatalf("get LastModified = %v, head says %v", obj.LastModified, head.LastModified)
	}

	page, err := s.List(t.Context(), storage.ListOptions{Prefix: "roundtrip/"})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if len(page.Objects) != 1 || page.Truncated {
		t.Fatalf("list = %d objects (truncated %v), want exactly 1", len(page.Objects), page.Truncated)
	}
	if got := page.Objects[0]; got.Key != key || got.Size != int64(len(body)) || got.ETag != put.ETag {
		t.Fatalf("list entry = {Key:%q Size:%d ETag:%q}, want {Key:%q Size:%d ETag:%q}",
			got.Key, got.Size, got.ETag, key, len(body), put.ETag)
	}
}

func testPutEmptyBodyRoundTrips(t *testing.T, s storage.Store) {
	const key = "empty/object"
	put := mustPut(t, s, key, nil, storage.PutOptions{IfNoneMatch: true})
	obj := mustGet(t, s, key)
	if len(obj.Body) != 0 || obj.Size != 0 || obj.ETag != put.ETag {
		t.Fatalf("get = {len(Body):%d Size:%d ETag:%q}, want {0 0 %q}", len(obj.Body), obj.Size, obj.ETag, put.ETag)
	}
}

func testPutUnconditionalOverwrites(t *testing.T, s storage.Store) {
	const key = "overwrite/object"
	first := mustPut(t, s, key, []byte("first"), storage.PutOptions{})
	second := mustPut(t, s, key, []byte("second"), storage.PutOptions{})
	if second.ETag == first.ETag {
		t.Fatalf("ETag unchanged (%q) after overwriting with different bytes", first.ETag)
	}
	obj := mustGet(t, s, key)
	if string(obj.Body) != "second" || obj.ETag != second.ETag {
		t.Fatalf("get = {Body:%q ETag:%q}, want {Body:%q ETag:%q}", obj.Body, obj.ETag, "second", second.ETag)
	}
}
