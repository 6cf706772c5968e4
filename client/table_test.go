package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage"
)

func TestStartWriteTable_BadRequests_AreInvalidBeforeAnyRequest(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "a.bin")
	if err := os.WriteFile(file, []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	ok := WriteTableRequest{Graph: "sales", Branch: "main", Table: "orders", Files: []string{file}}
	cases := map[string]func(*WriteTableRequest){
		"bad graph":        func(r *WriteTableRequest) { r.Graph = "Sales!" },
		"bad branch":       func(r *WriteTableRequest) { r.Branch = "a//b" },
		"bad table":        func(r *WriteTableRequest) { r.Table = "Orders" },
		"no files":         func(r *WriteTableRequest) { r.Files = nil },
		"missing file":     func(r *WriteTableRequest) { r.Files = []string{filepath.Join(dir, "nope")} },
		"directory":        func(r *WriteTableRequest) { r.Files = []string{dir} },
		"bad head":         func(r *WriteTableRequest) { r.ExpectedHead = "head" },
		"bad key":          func(r *WriteTableRequest) { r.IdempotencyKey = "has space" },
		"control in msg":   func(r *WriteTableRequest) { r.Message = "a\x00b" },
		"newline in autho": func(r *WriteTableRequest) { r.Author = "a\nb" },
	}
	// No Temporal client and no store: an invalid request must not reach either.
	c := New(nil, Options{})
	for name, mutate := range cases {
		req := ok
		mutate(&req)
		if _, err := c.StartWriteTable(context.Background(), nil, req); !errors.Is(err, outcome.ErrInvalid) {
			t.Errorf("%s: %v, want invalid", name, err)
		}
	}
}

func TestUploadFiles_PutsEachFileUnderAFreshObjectKey(t *testing.T) {
	s, _ := newGraph(t)
	dir := t.TempDir()
	bodies := []string{"first", "second!"}
	var files []string
	for i, b := range bodies {
		p := filepath.Join(dir, string(rune('a'+i)))
		if err := os.WriteFile(p, []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
	}
	objs, err := uploadFiles(context.Background(), s, "sales", "orders", files)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range objs {
		id, err := format.ParseULID(o.ID)
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.Get(context.Background(), format.ObjectKey("sales", "orders", id))
		if err != nil || string(got.Body) != bodies[i] {
			t.Fatalf("object %d: %q, %v; want %q", i, got.Body, err, bodies[i])
		}
		sum := sha256.Sum256([]byte(bodies[i]))
		if o.Size != int64(len(bodies[i])) || o.SHA256 != hex.EncodeToString(sum[:]) {
			t.Fatalf("object %d listed as %+v", i, o)
		}
	}
	if objs[0].ID == objs[1].ID {
		t.Fatal("two files got one object id")
	}
	var n int
	_ = storage.ListAll(context.Background(), s, format.TableObjectsPrefix("sales", "orders"), func(storage.ObjectInfo) error { n++; return nil })
	if n != 2 {
		t.Fatalf("%d objects stored, want 2", n)
	}
}
