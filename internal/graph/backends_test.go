package graph

import (
	"context"
	"fmt"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/graftworks/graft/internal/testenv"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/faults"
	"github.com/graftworks/graft/storage/memstore"
	"github.com/graftworks/graft/storage/s3"
)

// TestMain stops the versitygw server the backend matrix starts.
func TestMain(m *testing.M) { testenv.Main(m) }

// backend opens a fresh, empty store.
type backend struct {
	name string
	open func(t testing.TB) storage.Store
}

var fakeBuckets atomic.Int32

// backends are the stores every graph test runs against: the local
// directory, the in-memory store, an in-process S3 fake (gofakes3) and the
// real S3 server (versitygw).
func backends() []backend {
	return []backend{
		{"localfs", func(t testing.TB) storage.Store { return newStore(t) }},
		{"memstore", func(t testing.TB) storage.Store { return memstore.New() }},
		{"gofakes3", func(t testing.TB) storage.Store {
			mem := s3mem.New()
			srv := httptest.NewServer(gofakes3.New(mem, gofakes3.WithLogger(gofakes3.DiscardLog())).Server())
			t.Cleanup(srv.Close)
			bucket := fmt.Sprintf("graph-%04d", fakeBuckets.Add(1))
			if err := mem.CreateBucket(bucket); err != nil {
				t.Fatal(err)
			}
			st, err := s3.New(context.Background(), s3.Config{Endpoint: srv.URL, Bucket: bucket, PathStyle: true, AccessKeyID: "k", SecretAccessKey: "s"})
			if err != nil {
				t.Fatal(err)
			}
			return st
		}},
		{"versitygw", func(t testing.TB) storage.Store { return serverStore(t, testenv.VersityGW(t)) }},
	}
}

// eachBackend runs fn against every backend, each wrapped in a fault store
// with no rules (so fn can add some).
func eachBackend(t *testing.T, fn func(t *testing.T, s *faults.Store)) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) { fn(t, faults.Wrap(b.open(t))) })
	}
}

// serverStore is a store on a fresh bucket of the shared S3 server srv.
func serverStore(t testing.TB, srv *testenv.S3Server) storage.Store {
	st, err := s3.New(context.Background(), s3.Config{Endpoint: srv.Endpoint, Region: srv.Region, Bucket: srv.NewBucket(t),
		PathStyle: true, AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	return st
}
