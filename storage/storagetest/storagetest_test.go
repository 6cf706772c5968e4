package storagetest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/localfs"
)

func TestPutMany_WritesEveryObjectAndReturnsItsETag(t *testing.T) {
	s, err := localfs.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	objects := map[string][]byte{}
	for i := range 50 {
		objects[fmt.Sprintf("many/%02d", i)] = fmt.Appendf(nil, "body %d", i)
	}
	etags, err := PutMany(t.Context(), s, objects, 4)
	if err != nil {
		t.Fatalf("put many: %v", err)
	}
	if len(etags) != len(objects) {
		t.Fatalf("got %d ETags, want %d", len(etags), len(objects))
	}
	for key, body := range objects {
		obj, err := s.Get(t.Context(), key)
		if err != nil || string(obj.Body) != string(body) || obj.ETag != etags[key] {
			t.Fatalf("get %s = {Body:%q ETag:%q}, %v; want {Body:%q ETag:%q}", key, obj.Body, obj.ETag, err, body, etags[key])
		}
	}
}

func TestPutMany_ExistingKey_ReturnsPreconditionFailed(t *testing.T) {
	s, err := localfs.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(t.Context(), "many/taken", []byte("first"), storage.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	_, err = PutMany(t.Context(), s, map[string][]byte{"many/taken": []byte("second"), "many/free": []byte("x")}, 2)
	if !errors.Is(err, storage.ErrPreconditionFailed) {
		t.Fatalf("err = %v, want ErrPreconditionFailed", err)
	}
}

func TestCheckCode_RejectsNilForeignAndMismatchedErrors(t *testing.T) {
	notFound := &storage.Error{Op: "get", Code: storage.CodeNotFound}
	cases := []struct {
		name    string
		err     error
		wantBad bool
	}{
		{"nil", nil, true},
		{"foreign error", context.Canceled, true},
		{"bare sentinel", storage.ErrNotFound, true},
		{"other code", &storage.Error{Op: "get", Code: storage.CodeUnavailable}, true},
		{"matching", notFound, false},
		{"wrapped matching", fmt.Errorf("read ref: %w", notFound), false},
	}
	for _, c := range cases {
		if problem := checkCode(c.err, storage.CodeNotFound); (problem != nil) != c.wantBad {
			t.Errorf("%s: checkCode = %v, want a problem: %v", c.name, problem, c.wantBad)
		}
	}
}
