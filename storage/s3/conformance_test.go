package s3

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/graftworks/graft/internal/testenv"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/storagetest"
)

// fakeS3 is an in-process gofakes3 server on 127.0.0.1.
type fakeS3 struct {
	backend *s3mem.Backend
	url     string
	buckets atomic.Int32
}

func startFakeS3(t *testing.T) *fakeS3 {
	t.Helper()
	backend := s3mem.New()
	faker := gofakes3.New(backend, gofakes3.WithLogger(gofakes3.DiscardLog()))
	srv := httptest.NewServer(faker.Server())
	t.Cleanup(srv.Close)
	return &fakeS3{backend: backend, url: srv.URL}
}

// newBucket creates a fresh, empty bucket.
func (f *fakeS3) newBucket(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("graft-test-%04d", f.buckets.Add(1))
	if err := f.backend.CreateBucket(name); err != nil {
		t.Fatalf("create bucket %s: %v", name, err)
	}
	return name
}

func (f *fakeS3) store(t *testing.T, bucket, prefix string) *Store {
	t.Helper()
	s, err := New(t.Context(), Config{
		Endpoint: f.url, Bucket: bucket, Prefix: prefix, PathStyle: true,
		AccessKeyID: "fake-key", SecretAccessKey: "fake-secret",
	})
	if err != nil {
		t.Fatalf("new store: %v", err)
	}
	return s
}

// serverStore returns a store on bucket of a shared S3 server (versitygw, MinIO).
func serverStore(t *testing.T, srv *testenv.S3Server, bucket, prefix string) *Store {
	t.Helper()
	s, err := New(t.Context(), Config{
		Endpoint: srv.Endpoint, Region: srv.Region, Bucket: bucket, Prefix: prefix, PathStyle: true,
		AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey,
	})
	if err != nil {
		t.Fatalf("new store: %v", err)
	}
	return s
}

func TestConformance(t *testing.T) {
	t.Run("gofakes3", func(t *testing.T) {
		fake := startFakeS3(t)
		storagetest.Run(t, func(t *testing.T) storage.Store {
			return fake.store(t, fake.newBucket(t), "")
		})
	})
	t.Run("gofakes3_prefix", func(t *testing.T) {
		// Each case's store shares its bucket with a neighbour under another
		// prefix holding an object; the suite's exact listings would fail if
		// the store ever saw or touched keys outside its prefix.
		fake := startFakeS3(t)
		storagetest.Run(t, func(t *testing.T) storage.Store {
			bucket := fake.newBucket(t)
			neighbour := fake.store(t, bucket, "tenants/b")
			if _, err := neighbour.Put(t.Context(), "graph.json", []byte("neighbour"), storage.PutOptions{IfNoneMatch: true}); err != nil {
				t.Fatalf("put neighbour object: %v", err)
			}
			return fake.store(t, bucket, "tenants/a")
		})
	})
	t.Run("versitygw", func(t *testing.T) {
		srv := testenv.VersityGW(t)
		storagetest.Run(t, func(t *testing.T) storage.Store {
			return serverStore(t, srv, srv.NewBucket(t), "")
		})
	})
	t.Run("minio", func(t *testing.T) {
		srv := testenv.MinIO(t)
		storagetest.Run(t, func(t *testing.T) storage.Store {
			return serverStore(t, srv, srv.NewBucket(t), "")
		})
	})
}

func TestConformance_Multipart(t *testing.T) {
	t.Run("gofakes3_prefix", func(t *testing.T) {
		// gofakes3 ignores If-None-Match on CompleteMultipartUpload.
		fake := startFakeS3(t)
		storagetest.RunMultipart(t, func(t *testing.T) storage.Store {
			return fake.store(t, fake.newBucket(t), "tenants/a")
		}, storagetest.MultipartOptions{NoConditionalComplete: true})
	})
	t.Run("versitygw", func(t *testing.T) {
		srv := testenv.VersityGW(t)
		storagetest.RunMultipart(t, func(t *testing.T) storage.Store {
			return serverStore(t, srv, srv.NewBucket(t), "")
		}, storagetest.MultipartOptions{})
	})
	t.Run("minio", func(t *testing.T) {
		// MinIO lists incomplete uploads only by one exact key.
		srv := testenv.MinIO(t)
		storagetest.RunMultipart(t, func(t *testing.T) storage.Store {
			return serverStore(t, srv, srv.NewBucket(t), "")
		}, storagetest.MultipartOptions{ExactKeyUploadListing: true})
	})
}

// TestPrefix_StoresSharingABucket_SeeOnlyTheirOwnKeys proves, on the real
// server, that a prefix isolates a store: same keys in two prefixes do not
// collide, listings and deletes stay inside the prefix, and the bucket holds
// the keys under "<prefix>/".
func TestPrefix_StoresSharingABucket_SeeOnlyTheirOwnKeys(t *testing.T) {
	srv := testenv.VersityGW(t)
	bucket := srv.NewBucket(t)
	a := serverStore(t, srv, bucket, "graphs/a")
	b := serverStore(t, srv, bucket, "graphs/b")
	root := serverStore(t, srv, bucket, "")
	ctx := t.Context()

	for _, k := range []string{"refs/main.json", "refs/dev.json"} {
		if _, err := a.Put(ctx, k, []byte("a:"+k), storage.PutOptions{IfNoneMatch: true}); err != nil {
			t.Fatalf("put a/%s: %v", k, err)
		}
	}
	// The same key in b is a different object: put-if-absent succeeds.
	if _, err := b.Put(ctx, "refs/main.json", []byte("b:refs/main.json"), storage.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatalf("put b/refs/main.json: %v", err)
	}

	if obj, err := b.Get(ctx, "refs/main.json"); err != nil || string(obj.Body) != "b:refs/main.json" {
		t.Fatalf("b get = %q, %v; want b's own bytes", obj.Body, err)
	}
	if _, err := b.Head(ctx, "refs/dev.json"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("b head of a key only a has: err = %v, want ErrNotFound", err)
	}
	requireListing(t, a, "", []string{"refs/dev.json", "refs/main.json"})
	requireListing(t, b, "", []string{"refs/main.json"})
	requireListing(t, root, "", []string{"graphs/a/refs/dev.json", "graphs/a/refs/main.json", "graphs/b/refs/main.json"})

	if err := b.DeleteBatch(ctx, []string{"refs/main.json", "refs/dev.json"}); err != nil {
		t.Fatalf("b delete batch: %v", err)
	}
	requireListing(t, a, "refs/", []string{"refs/dev.json", "refs/main.json"})
	requireListing(t, b, "", nil)
}

func requireListing(t *testing.T, s *Store, prefix string, want []string) {
	t.Helper()
	var got []string
	err := storage.ListAll(t.Context(), s, prefix, func(o storage.ObjectInfo) error {
		got = append(got, o.Key)
		return nil
	})
	if err != nil {
		t.Fatalf("list %q: %v", prefix, err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("list %q = %q, want %q", prefix, got, want)
	}
}

// closedEndpoint returns the URL of a 127.0.0.1 port nothing listens on.
func closedEndpoint(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

func TestPut_ClosedPort_IsAmbiguous(t *testing.T) {
	s := newTestStore(t, closedEndpoint(t), 5*time.Second)
	_, err := s.Put(t.Context(), "refs/a.json", []byte("x"), storage.PutOptions{IfNoneMatch: true})
	if storage.CodeOf(err) != storage.CodeAmbiguous || !errors.Is(err, storage.ErrAmbiguous) {
		t.Fatalf("err = %v, want ambiguous", err)
	}
	if err := s.Delete(t.Context(), "refs/a.json"); !errors.Is(err, storage.ErrAmbiguous) {
		t.Fatalf("delete err = %v, want ambiguous", err)
	}
}

func TestGet_ClosedPort_IsUnavailable(t *testing.T) {
	s := newTestStore(t, closedEndpoint(t), 5*time.Second)
	_, err := s.Get(t.Context(), "refs/a.json")
	if storage.CodeOf(err) != storage.CodeUnavailable || !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("err = %v, want unavailable", err)
	}
	if _, err := s.List(t.Context(), storage.ListOptions{}); !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("list err = %v, want unavailable", err)
	}
}

func TestPut_VersityIfNoneMatchOnExistingKey_IsPreconditionFailed412(t *testing.T) {
	requireIfNoneMatchOnExistingKey412(t, testenv.VersityGW(t))
}

func TestPut_MinIOIfNoneMatchOnExistingKey_IsPreconditionFailed412(t *testing.T) {
	requireIfNoneMatchOnExistingKey412(t, testenv.MinIO(t))
}

// requireIfNoneMatchOnExistingKey412 checks that srv answers a put-if-absent
// over an object with 412, never 409.
func requireIfNoneMatchOnExistingKey412(t *testing.T, srv *testenv.S3Server) {
	t.Helper()
	s := serverStore(t, srv, srv.NewBucket(t), "")
	if _, err := s.Put(t.Context(), "refs/a.json", []byte("first"), storage.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatalf("first put: %v", err)
	}
	_, err := s.Put(t.Context(), "refs/a.json", []byte("second"), storage.PutOptions{IfNoneMatch: true})
	var se *storage.Error
	if !errors.As(err, &se) || se.Code != storage.CodePreconditionFailed || se.Status != 412 {
		t.Fatalf("err = %v, want precondition_failed with HTTP 412", err)
	}
}

func TestPut_VersityIfMatchOnMissingKey_IsPreconditionFailed(t *testing.T) {
	requireIfMatchOnMissingKeyFailed(t, testenv.VersityGW(t))
}

func TestPut_MinIOIfMatchOnMissingKey_IsPreconditionFailed(t *testing.T) {
	requireIfMatchOnMissingKeyFailed(t, testenv.MinIO(t))
}

// requireIfMatchOnMissingKeyFailed checks that a put-if-match of a missing
// key is a failed condition on srv, which answers 404 NoSuchKey (versitygw,
// MinIO and AWS alike), not 412.
func requireIfMatchOnMissingKeyFailed(t *testing.T, srv *testenv.S3Server) {
	t.Helper()
	s := serverStore(t, srv, srv.NewBucket(t), "")
	_, err := s.Put(t.Context(), "refs/a.json", []byte("x"), storage.PutOptions{IfMatch: `"0123456789abcdef0123456789abcdef"`})
	var se *storage.Error
	if !errors.Is(err, storage.ErrPreconditionFailed) || !errors.As(err, &se) || se.Status != 404 || apiCode(se.Err) != codeNoSuchKey {
		t.Fatalf("err = %v, want ErrPreconditionFailed from a 404 NoSuchKey", err)
	}
	if _, err := s.Head(t.Context(), "refs/a.json"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("head after the failed put: %v, want ErrNotFound", err)
	}
}

func TestPut_VersityKeyUnderExistingObject_IsRefused(t *testing.T) {
	// versitygw's posix backend cannot hold both "a" and "a/b".
	srv := testenv.VersityGW(t)
	s := serverStore(t, srv, srv.NewBucket(t), "")
	if _, err := s.Put(t.Context(), "a", []byte("x"), storage.PutOptions{IfNoneMatch: true}); err != nil {
		t.Fatalf("put a: %v", err)
	}
	_, err := s.Put(t.Context(), "a/b", []byte("x"), storage.PutOptions{IfNoneMatch: true})
	if !errors.Is(err, storage.ErrRefused) {
		t.Fatalf("put a/b: err = %v, want ErrRefused", err)
	}
}

const wrongSecret = "graft-wrong-secret-must-never-appear"

func TestPut_VersityBadCredentials_IsRefusedAndHidesSecret(t *testing.T) {
	requireBadCredentialsRefused(t, testenv.VersityGW(t))
}

func TestPut_MinIOBadCredentials_IsRefusedAndHidesSecret(t *testing.T) {
	requireBadCredentialsRefused(t, testenv.MinIO(t))
}

// requireBadCredentialsRefused checks that srv refuses a put signed with a
// wrong secret (403), that a get is unavailable, and that no error shows the
// secret.
func requireBadCredentialsRefused(t *testing.T, srv *testenv.S3Server) {
	t.Helper()
	bucket := srv.NewBucket(t)
	s, err := New(t.Context(), Config{
		Endpoint: srv.Endpoint, Region: srv.Region, Bucket: bucket, PathStyle: true,
		AccessKeyID: srv.AccessKey, SecretAccessKey: wrongSecret,
	})
	if err != nil {
		t.Fatalf("new store: %v", err)
	}
	_, err = s.Put(t.Context(), "refs/a.json", []byte("x"), storage.PutOptions{IfNoneMatch: true})
	var se *storage.Error
	if !errors.As(err, &se) || se.Code != storage.CodeRefused || se.Status != 403 {
		t.Fatalf("err = %v, want refused with HTTP 403", err)
	}
	_, getErr := s.Get(t.Context(), "refs/a.json")
	if !errors.Is(getErr, storage.ErrUnavailable) {
		t.Fatalf("get err = %v, want ErrUnavailable", getErr)
	}
	for _, text := range []string{err.Error(), fmt.Sprintf("%+v", err), getErr.Error(), fmt.Sprintf("%+v", s)} {
		if strings.Contains(text, wrongSecret) {
			t.Fatalf("secret leaked into %q", text)
		}
	}
}

func TestErrors_TransportFailure_HideSecret(t *testing.T) {
	s, err := New(context.Background(), Config{
		Endpoint: closedEndpoint(t), Bucket: "bkt", PathStyle: true,
		AccessKeyID: "some-key", SecretAccessKey: wrongSecret, RequestTimeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatalf("new store: %v", err)
	}
	_, putErr := s.Put(t.Context(), "refs/a.json", []byte("x"), storage.PutOptions{IfNoneMatch: true})
	_, getErr := s.Get(t.Context(), "refs/a.json")
	if putErr == nil || getErr == nil {
		t.Fatalf("put err = %v, get err = %v, want both to fail", putErr, getErr)
	}
	for _, e := range []error{putErr, getErr} {
		if strings.Contains(e.Error(), wrongSecret) || strings.Contains(fmt.Sprintf("%+v", e), wrongSecret) {
			t.Fatalf("secret leaked into %q", e.Error())
		}
	}
}

func TestPut_VersityFailedConditionOnLargeBody_IsNeverSuccessOrRefused(t *testing.T) {
	requireFailedConditionOnLargeBody(t, testenv.VersityGW(t))
}

func TestPut_MinIOFailedConditionOnLargeBody_IsNeverSuccessOrRefused(t *testing.T) {
	requireFailedConditionOnLargeBody(t, testenv.MinIO(t))
}

// requireFailedConditionOnLargeBody checks that srv never takes or refuses a
// 4 MiB put whose condition fails. versitygw may answer by resetting the
// connection while the body is still being sent; the client then cannot know
// the outcome, so Ambiguous is as correct as 412.
func requireFailedConditionOnLargeBody(t *testing.T, srv *testenv.S3Server) {
	t.Helper()
	s := serverStore(t, srv, srv.NewBucket(t), "")
	const key = "tables/t/objects/big"
	big := make([]byte, 4<<20)
	first, err := s.Put(t.Context(), key, big, storage.PutOptions{IfNoneMatch: true})
	if err != nil {
		t.Fatalf("first put: %v", err)
	}
	other := slices.Clone(big)
	other[0] = 1
	for i := range 3 {
		_, err := s.Put(t.Context(), key, other, storage.PutOptions{IfNoneMatch: true})
		if c := storage.CodeOf(err); c != storage.CodePreconditionFailed && c != storage.CodeAmbiguous {
			t.Fatalf("attempt %d: put-if-absent err = %v, want precondition_failed or ambiguous", i, err)
		}
		_, err = s.Put(t.Context(), key, other, storage.PutOptions{IfMatch: `"0123456789abcdef0123456789abcdef"`})
		if c := storage.CodeOf(err); c != storage.CodePreconditionFailed && c != storage.CodeAmbiguous {
			t.Fatalf("attempt %d: put-if-match err = %v, want precondition_failed or ambiguous", i, err)
		}
	}
	head, err := s.Head(t.Context(), key)
	if err != nil || head.ETag != first.ETag {
		t.Fatalf("head = %+v, %v; want the first put's ETag %s", head, err, first.ETag)
	}
}

// TestListMultipart_MinIOListsOnlyByExactKey shows the behaviour the MinIO
// conformance run declares (storagetest.MultipartOptions.ExactKeyUploadListing):
// a prefix of several keys lists no upload, one exact key lists that key's, and
// the empty prefix lists every upload the server started since it began, in one
// page whatever the limit.
func TestListMultipart_MinIOListsOnlyByExactKey(t *testing.T) {
	srv := testenv.MinIO(t)
	s := serverStore(t, srv, srv.NewBucket(t), "")
	ctx := t.Context()
	keys := []string{"tables/t/objects/1", "tables/t/objects/2"}
	ids := map[string]string{}
	for _, k := range keys {
		id, err := s.CreateMultipart(ctx, k)
		if err != nil {
			t.Fatalf("create %s: %v", k, err)
		}
		ids[k] = id
		t.Cleanup(func() { _ = s.AbortMultipart(context.Background(), k, id) })
	}
	for _, prefix := range []string{"tables/", "tables/t/objects/"} {
		page, err := s.ListMultipart(ctx, storage.ListMultipartOptions{Prefix: prefix})
		if err != nil || len(page.Uploads) != 0 {
			t.Fatalf("list under %q = %+v, %v; want nothing", prefix, page, err)
		}
	}
	for _, k := range keys {
		page, err := s.ListMultipart(ctx, storage.ListMultipartOptions{Prefix: k})
		if err != nil || len(page.Uploads) != 1 || page.Uploads[0].UploadID != ids[k] || page.Truncated {
			t.Fatalf("list by %q = %+v, %v; want its upload %s", k, page, err, ids[k])
		}
	}
	page, err := s.ListMultipart(ctx, storage.ListMultipartOptions{Limit: 1})
	if err != nil || len(page.Uploads) != len(keys) || page.Truncated {
		t.Fatalf("list with no prefix and limit 1 = %+v, %v; want both uploads in one page", page, err)
	}
}

// TestCompleteMultipart_MinIORepeated_IsPreconditionFailed: MinIO answers a
// complete sent again after it succeeded with 412, as its put-if-absent sees
// the object the first made — the answer it gives when another object holds
// the key, so only reading the object tells the two apart.
func TestCompleteMultipart_MinIORepeated_IsPreconditionFailed(t *testing.T) {
	srv := testenv.MinIO(t)
	s := serverStore(t, srv, srv.NewBucket(t), "")
	const key = "tables/t/objects/again"
	id, err := s.CreateMultipart(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.UploadPart(t.Context(), key, id, 1, strings.NewReader("once"), 4)
	if err != nil {
		t.Fatal(err)
	}
	first, err := s.CompleteMultipart(t.Context(), key, id, []storage.Part{p})
	if err != nil {
		t.Fatalf("complete: %v", err)
	}
	_, err = s.CompleteMultipart(t.Context(), key, id, []storage.Part{p})
	var se *storage.Error
	if !errors.As(err, &se) || se.Code != storage.CodePreconditionFailed || se.Status != 412 {
		t.Fatalf("repeated complete: err = %v, want precondition_failed with HTTP 412", err)
	}
	if head, err := s.Head(t.Context(), key); err != nil || head.Size != 4 || head.ETag != first.ETag {
		t.Fatalf("head = %+v, %v; want the first complete's object, ETag %s", head, err, first.ETag)
	}
}
