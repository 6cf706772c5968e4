package graph

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage"
)

func tableParams() WriteTableParams {
	return WriteTableParams{
		Graph:     "sales",
		Table:     "orders",
		VersionID: versionA,
		// Deliberately out of ID order: the manifest sorts them.
		Objects: []ObjectInput{{ID: objectC, Body: []byte("ccc")}, {ID: objectA, Body: []byte("a")}, {ID: objectB, Body: nil}},
		Op:      "op-write-1",
		Time:    t0,
	}
}

func TestWriteTableVersion_WritesObjectsAndSortedManifest_ListedThroughACommit(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	mustInit(t, s)
	v, err := WriteTableVersion(ctx, s, tableParams())
	if err != nil {
		t.Fatalf("write: %v", err)
	}
	if len(v.Objects) != 3 || v.Objects[0].ID != objectA || v.Objects[1].ID != objectB || v.Objects[2].ID != objectC {
		t.Fatalf("manifest objects not sorted by id: %+v", v.Objects)
	}
	c, err := AppendCommit(ctx, s, appendParams(0, "pin orders"))
	if err != nil {
		t.Fatal(err)
	}
	counting := &countingStore{Store: s}
	refs, err := ListTableObjects(ctx, counting, "sales", c.ID.String(), "orders")
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	if counting.gets.Load() != 2 || counting.total() != 2 {
		t.Fatalf("ListTableObjects sent %d requests, want 2 GETs", counting.total())
	}
	bodies := map[ulid.ULID]string{objectA: "a", objectB: "", objectC: "ccc"}
	for _, r := range refs {
		obj, err := s.Get(ctx, r.Key)
		if err != nil {
			t.Fatalf("get %s: %v", r.Key, err)
		}
		sum := sha256.Sum256(obj.Body)
		if string(obj.Body) != bodies[r.ID] || r.Size != int64(len(obj.Body)) || r.SHA256 != hex.EncodeToString(sum[:]) || r.Key != format.ObjectKey("sales", "orders", r.ID) {
			t.Fatalf("object ref %+v does not describe %q", r, obj.Body)
		}
	}
}

func TestWriteTableVersion_Rerun_IsIdempotent(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	if _, err := WriteTableVersion(ctx, s, tableParams()); err != nil {
		t.Fatal(err)
	}
	before := dump(t, s)
	if _, err := WriteTableVersion(ctx, s, tableParams()); err != nil {
		t.Fatalf("re-run: %v", err)
	}
	if !maps.Equal(before, dump(t, s)) {
		t.Fatal("re-run changed the store")
	}
}

func TestWriteTableVersion_ObjectKeyHoldsOtherBytes_IsErrKeyTakenAndNoManifest(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	if _, err := s.Put(ctx, format.ObjectKey("sales", "orders", objectA), []byte("other"), storage.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	_, err := WriteTableVersion(ctx, s, tableParams())
	if !errors.Is(err, ErrKeyTaken) {
		t.Fatalf("error %v, want ErrKeyTaken", err)
	}
	if _, err := s.Get(ctx, format.TableVersionKey("sales", "orders", versionA)); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("manifest written over a failed object: %v", err)
	}
}

func TestWriteTableVersion_ObjectPutAckLost_Succeeds(t *testing.T) {
	s := newStore(t)
	f := withFaults(s, &faultRule{match: keyContains("/objects/"), mode: applyThenAmbiguous, times: 3})
	if _, err := WriteTableVersion(context.Background(), f, tableParams()); err != nil {
		t.Fatalf("write: %v", err)
	}
	if n := len(dump(t, s)); n != 4 {
		t.Fatalf("store has %d objects, want 4", n)
	}
}

func TestWriteTableVersion_TooManyObjects_IsTypedTooLargeWithoutRequests(t *testing.T) {
	p := tableParams()
	p.Objects = nil
	for i := 0; i <= format.MaxObjectsPerVersion; i++ {
		var id ulid.ULID
		id[0], id[14], id[15] = 1, byte(i>>8), byte(i)
		p.Objects = append(p.Objects, ObjectInput{ID: id})
	}
	c := &countingStore{Store: newStore(t)}
	_, err := WriteTableVersion(context.Background(), c, p)
	var tl *format.TooLargeError
	if !errors.Is(err, format.ErrTooLarge) || !errors.Is(err, ErrInvalid) || !errors.As(err, &tl) || tl.Limit != int64(format.MaxObjectsPerVersion) {
		t.Fatalf("error %v, want format.TooLargeError on objects", err)
	}
	if c.total() != 0 {
		t.Fatalf("%d requests sent", c.total())
	}
}

func TestWriteTableVersion_ObjectOverCap_IsErrObjectTooLarge(t *testing.T) {
	p := tableParams()
	p.Objects[1].Body = make([]byte, MaxDataObjectSize+1)
	c := &countingStore{Store: newStore(t)}
	if _, err := WriteTableVersion(context.Background(), c, p); !errors.Is(err, ErrObjectTooLarge) || c.total() != 0 {
		t.Fatalf("error %v after %d requests, want ErrObjectTooLarge after 0", err, c.total())
	}
}

func TestWriteTableVersion_DuplicateObjectID_IsErrInvalid(t *testing.T) {
	p := tableParams()
	p.Objects[1].ID = objectC
	var pe *ParamError
	if _, err := WriteTableVersion(context.Background(), newStore(t), p); !errors.As(err, &pe) || pe.Field != "Objects[1].ID" {
		t.Fatalf("error %v, want ParamError on Objects[1].ID", err)
	}
}

func TestReadObjectFile_ReadsBytes_AndOverCapIsErrObjectTooLarge(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "small")
	if err := os.WriteFile(small, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	in, err := ReadObjectFile(objectA, small)
	if err != nil || in.ID != objectA || string(in.Body) != "hello" {
		t.Fatalf("ReadObjectFile = %+v, %v", in, err)
	}
	big := filepath.Join(dir, "big")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	// Sparse: no disk is used.
	if err := f.Truncate(MaxDataObjectSize + 1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	_, err = ReadObjectFile(objectB, big)
	var tl *ObjectTooLargeError
	if !errors.Is(err, ErrObjectTooLarge) || !errors.As(err, &tl) || tl.Object != big || tl.Size != MaxDataObjectSize+1 {
		t.Fatalf("error %v, want ObjectTooLargeError naming the file", err)
	}
}

func TestListTableObjects_TableNotPinned_IsErrTableNotPinned(t *testing.T) {
	s := newStore(t)
	mustInit(t, s)
	if _, err := ListTableObjects(context.Background(), s, "sales", treeMain.String()+"-0", "orders"); !errors.Is(err, ErrTableNotPinned) {
		t.Fatalf("error %v, want ErrTableNotPinned", err)
	}
}

func TestListTableObjects_PinnedVersionMissing_IsErrVersionNotFound(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	mustInit(t, s)
	c, err := AppendCommit(ctx, s, appendParams(0, "pins a version never written"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ListTableObjects(ctx, s, "sales", c.ID.String(), "orders"); !errors.Is(err, ErrVersionNotFound) {
		t.Fatalf("error %v, want ErrVersionNotFound", err)
	}
}

func TestListTableObjects_ManifestOfAnotherVersion_IsErrMalformed(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	mustInit(t, s)
	if _, err := WriteTableVersion(ctx, s, tableParams()); err != nil {
		t.Fatal(err)
	}
	manifest := dump(t, s)[format.TableVersionKey("sales", "orders", versionA)]
	if _, err := s.Put(ctx, format.TableVersionKey("sales", "orders", versionB), []byte(manifest), storage.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	p := appendParams(0, "pins B")
	p.Pins = map[string]ulid.ULID{"orders": versionB}
	c, err := AppendCommit(ctx, s, p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ListTableObjects(ctx, s, "sales", c.ID.String(), "orders"); !errors.Is(err, format.ErrMalformed) {
		t.Fatalf("error %v, want format.ErrMalformed", err)
	}
}
