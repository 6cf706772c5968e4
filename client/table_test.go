package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/faults"
	"github.com/graftworks/graft/storage/localfs"
	"github.com/graftworks/graft/workflows"
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

// uploadFiles plans the files, then uploads them under their plan, as StartWriteTable
// does around its pin.
func uploadFiles(ctx context.Context, s storage.Store, graphName, table string, files []string, opts UploadOptions) ([]workflows.TableObject, error) {
	objs, err := planFiles(files)
	if err != nil {
		return nil, err
	}
	return objs, uploadPlanned(ctx, s, graphName, table, files, objs, opts)
}

// A file that changed between its hash and its upload is invalid, and none of its bytes
// are stored: not as one put, not as a multipart upload's completion.
func TestUploadPlanned_FileChangedSinceHashed_IsInvalidAndNothingStored(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts UploadOptions
	}{{"one put", UploadOptions{}}, {"multipart", UploadOptions{Threshold: 1024, PartSize: 1024}}} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := localfs.Open(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			fs := faults.Wrap(s)
			p := filepath.Join(t.TempDir(), "f")
			body := make([]byte, 3000)
			if err := os.WriteFile(p, body, 0o644); err != nil {
				t.Fatal(err)
			}
			plan, err := planFiles([]string{p})
			if err != nil {
				t.Fatal(err)
			}
			body[2999] = 1 // same size, other bytes
			if err := os.WriteFile(p, body, 0o644); err != nil {
				t.Fatal(err)
			}
			err = uploadPlanned(context.Background(), fs, "sales", "orders", []string{p}, plan, tc.opts)
			if !errors.Is(err, outcome.ErrInvalid) || !strings.Contains(err.Error(), "changed since it was hashed") {
				t.Fatalf("upload of a changed file: %v, want invalid", err)
			}
			id, _ := format.ParseULID(plan[0].ID)
			if _, err := s.Head(context.Background(), format.ObjectKey("sales", "orders", id)); !errors.Is(err, storage.ErrNotFound) {
				t.Fatalf("object of the changed file: %v, want not found", err)
			}
			if n := fs.Count(faults.OpCompleteMultipart).Sent + fs.CountMatching(faults.Rule{Op: faults.OpPut, KeyPrefix: format.TableObjectsPrefix("sales", "orders")}).Sent; n != 0 {
				t.Fatalf("%d object puts or completes sent, want none", n)
			}
		})
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
	objs, err := uploadFiles(context.Background(), s, "sales", "orders", files, UploadOptions{})
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

// A file above the upload threshold goes to a graph as a multipart upload of the
// configured part size — a dozen parts here — completed once, with the object's bytes and
// checksum; a file below it is one put.
func TestUploadFiles_BigFileInADozenParts_SmallFileOnePut(t *testing.T) {
	dir := t.TempDir()
	s, err := localfs.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	fs := faults.Wrap(s)
	big := make([]byte, 12*1024-7) // a dozen parts of 1 KiB, the last short
	for i := range big {
		big[i] = byte(i * 7)
	}
	files := []string{filepath.Join(dir, "big"), filepath.Join(dir, "small")}
	if err := os.WriteFile(files[0], big, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(files[1], []byte("small"), 0o644); err != nil {
		t.Fatal(err)
	}
	objs, err := uploadFiles(context.Background(), fs, "sales", "orders", files, UploadOptions{Threshold: 1024, PartSize: 1024})
	if err != nil {
		t.Fatal(err)
	}
	if n := fs.Count(faults.OpUploadPart).Sent; n != 12 {
		t.Fatalf("%d parts sent, want 12", n)
	}
	if n := fs.Count(faults.OpCompleteMultipart).Sent; n != 1 {
		t.Fatalf("%d completes, want 1", n)
	}
	for i, want := range [][]byte{big, []byte("small")} {
		id, err := format.ParseULID(objs[i].ID)
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.Get(context.Background(), format.ObjectKey("sales", "orders", id))
		sum := sha256.Sum256(want)
		if err != nil || string(got.Body) != string(want) || objs[i].Size != int64(len(want)) || objs[i].SHA256 != hex.EncodeToString(sum[:]) {
			t.Fatalf("object %d: %d bytes, %v; listed %+v", i, len(got.Body), err, objs[i])
		}
	}
}

func TestWriteTableRequest_BadUploadOptions_AreInvalid(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "a.bin")
	if err := os.WriteFile(file, []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, u := range map[string]UploadOptions{
		"negative part size":  {PartSize: -1},
		"negative threshold":  {Threshold: -1},
		"negative concurrent": {Concurrency: -2},
		"threshold too big":   {Threshold: 1 << 40},
	} {
		req := WriteTableRequest{Graph: "sales", Branch: "main", Table: "orders", Files: []string{file}, Upload: u}
		if err := req.Validate(); !errors.Is(err, outcome.ErrInvalid) {
			t.Errorf("%s: %v, want invalid", name, err)
		}
	}
}
