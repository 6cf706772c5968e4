package faults_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/graftworks/graft/internal/testenv"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/faults"
	"github.com/graftworks/graft/storage/localfs"
	"github.com/graftworks/graft/storage/s3"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// backend opens a fresh, empty store for one test.
type backend struct {
	name string
	open func(t *testing.T) storage.Store
}

// backends are the stores every fault case runs against.
var backends = []backend{
	{"localfs", openLocalFS},
	{"versitygw", openVersityGW},
}

func openLocalFS(t *testing.T) storage.Store {
	t.Helper()
	st, err := localfs.Open(t.TempDir())
	if err != nil {
		t.Fatalf("open local store: %v", err)
	}
	return st
}

func openVersityGW(t *testing.T) storage.Store {
	t.Helper()
	srv := testenv.VersityGW(t)
	st, err := s3.New(context.Background(), s3.Config{
		Endpoint:        srv.Endpoint,
		Region:          srv.Region,
		Bucket:          srv.NewBucket(t),
		PathStyle:       true,
		AccessKeyID:     srv.AccessKey,
		SecretAccessKey: srv.SecretKey,
	})
	if err != nil {
		t.Fatalf("open s3 store: %v", err)
	}
	return st
}

// requireInjected fails t unless err is an injected *storage.Error with the
// given op, key, code and status, naming the rule that injected it.
func requireInjected(t *testing.T, err error, op faults.Op, key string, code storage.Code, status int, rule string) {
	t.Helper()
	var se *storage.Error
	if !errors.As(err, &se) {
		t.Fatalf("err = %v (%T), want *storage.Error", err, err)
	}
	if se.Op != string(op) || se.Key != key || se.Code != code || se.Status != status {
		t.Fatalf("err = {Op %q Key %q Code %v Status %d}, want {Op %q Key %q Code %v Status %d}: %v",
			se.Op, se.Key, se.Code, se.Status, op, key, code, status, err)
	}
	if !errors.Is(err, faults.ErrInjected) {
		t.Fatalf("err = %v, want it to match faults.ErrInjected", err)
	}
	if !strings.Contains(err.Error(), `rule "`+rule+`"`) {
		t.Fatalf("err = %v, want it to name rule %q", err, rule)
	}
}

// requireAbsent fails t unless key is missing from st.
func requireAbsent(t *testing.T, st storage.Store, key string) {
	t.Helper()
	_, err := st.Head(context.Background(), key)
	if !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("head %q: err = %v, want ErrNotFound", key, err)
	}
}

// requireBody fails t unless st holds body at key.
func requireBody(t *testing.T, st storage.Store, key, body string) storage.Object {
	t.Helper()
	obj, err := st.Get(context.Background(), key)
	if err != nil {
		t.Fatalf("get %q: %v", key, err)
	}
	if string(obj.Body) != body {
		t.Fatalf("get %q = %q, want %q", key, obj.Body, body)
	}
	return obj
}

// putIfAbsent is the put graft makes for refs and commits.
func putIfAbsent(st storage.Store, key, body string) (storage.PutResult, error) {
	return st.Put(context.Background(), key, []byte(body), storage.PutOptions{IfNoneMatch: true})
}
