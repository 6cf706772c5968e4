package s3

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/graftworks/graft/storage"
)

// fakeAPI records what the store asks of S3 and answers from canned values.
type fakeAPI struct {
	calls int

	get      *awss3.GetObjectInput
	head     *awss3.HeadObjectInput
	put      *awss3.PutObjectInput
	putBody  []byte
	list     *awss3.ListObjectsV2Input
	del      *awss3.DeleteObjectInput
	delBatch *awss3.DeleteObjectsInput
	// optFns holds the per-call option functions of the last call.
	optFns []func(*awss3.Options)

	getOut      *awss3.GetObjectOutput
	headOut     *awss3.HeadObjectOutput
	putOut      *awss3.PutObjectOutput
	listOut     *awss3.ListObjectsV2Output
	delBatchOut *awss3.DeleteObjectsOutput
	err         error
}

var _ API = (*fakeAPI)(nil)

func (f *fakeAPI) GetObject(_ context.Context, in *awss3.GetObjectInput, optFns ...func(*awss3.Options)) (*awss3.GetObjectOutput, error) {
	f.calls++
	f.get, f.optFns = in, optFns
	return f.getOut, f.err
}

func (f *fakeAPI) HeadObject(_ context.Context, in *awss3.HeadObjectInput, optFns ...func(*awss3.Options)) (*awss3.HeadObjectOutput, error) {
	f.calls++
	f.head, f.optFns = in, optFns
	return f.headOut, f.err
}

func (f *fakeAPI) PutObject(_ context.Context, in *awss3.PutObjectInput, optFns ...func(*awss3.Options)) (*awss3.PutObjectOutput, error) {
	f.calls++
	f.put, f.optFns = in, optFns
	body, err := io.ReadAll(in.Body)
	if err != nil {
		return nil, err
	}
	f.putBody = body
	return f.putOut, f.err
}

func (f *fakeAPI) ListObjectsV2(_ context.Context, in *awss3.ListObjectsV2Input, optFns ...func(*awss3.Options)) (*awss3.ListObjectsV2Output, error) {
	f.calls++
	f.list, f.optFns = in, optFns
	return f.listOut, f.err
}

func (f *fakeAPI) DeleteObject(_ context.Context, in *awss3.DeleteObjectInput, optFns ...func(*awss3.Options)) (*awss3.DeleteObjectOutput, error) {
	f.calls++
	f.del, f.optFns = in, optFns
	if f.err != nil {
		return nil, f.err
	}
	return &awss3.DeleteObjectOutput{}, nil
}

func (f *fakeAPI) DeleteObjects(_ context.Context, in *awss3.DeleteObjectsInput, optFns ...func(*awss3.Options)) (*awss3.DeleteObjectsOutput, error) {
	f.calls++
	f.delBatch, f.optFns = in, optFns
	if f.err != nil {
		return nil, f.err
	}
	if f.delBatchOut == nil {
		return &awss3.DeleteObjectsOutput{}, nil
	}
	return f.delBatchOut, nil
}

// attemptsAfter applies the recorded per-call options to client-wide
// options allowing 3 attempts and returns how many attempts the call gets.
func attemptsAfter(optFns []func(*awss3.Options)) int {
	o := awss3.Options{RetryMaxAttempts: 3, Retryer: retry.NewStandard()}
	for _, fn := range optFns {
		fn(&o)
	}
	return o.Retryer.MaxAttempts()
}

func TestPut_IfNoneMatch_SendsIfNoneMatchStarOnly(t *testing.T) {
	f := &fakeAPI{putOut: &awss3.PutObjectOutput{ETag: aws.String(`"e1"`)}}
	s := NewFromClient(f, "bkt", "tenant/one")
	res, err := s.Put(t.Context(), "refs/main.json", []byte("body"), storage.PutOptions{IfNoneMatch: true})
	if err != nil {
		t.Fatalf("put: %v", err)
	}
	if res.ETag != `"e1"` {
		t.Fatalf("ETag = %q, want the server's %q", res.ETag, `"e1"`)
	}
	in := f.put
	if got := aws.ToString(in.IfNoneMatch); got != "*" {
		t.Fatalf("IfNoneMatch = %q, want %q", got, "*")
	}
	if in.IfMatch != nil {
		t.Fatalf("IfMatch = %q, want unset", *in.IfMatch)
	}
	if aws.ToString(in.Bucket) != "bkt" || aws.ToString(in.Key) != "tenant/one/refs/main.json" {
		t.Fatalf("bucket/key = %q/%q, want bkt/tenant/one/refs/main.json", aws.ToString(in.Bucket), aws.ToString(in.Key))
	}
	if aws.ToInt64(in.ContentLength) != 4 || string(f.putBody) != "body" {
		t.Fatalf("body = %q (ContentLength %d), want %q (4)", f.putBody, aws.ToInt64(in.ContentLength), "body")
	}
}

func TestPut_IfMatch_SendsIfMatchETagVerbatimOnly(t *testing.T) {
	f := &fakeAPI{putOut: &awss3.PutObjectOutput{ETag: aws.String(`"e2"`)}}
	s := NewFromClient(f, "bkt", "")
	if _, err := s.Put(t.Context(), "graph.json", []byte("v2"), storage.PutOptions{IfMatch: `"e1"`}); err != nil {
		t.Fatalf("put: %v", err)
	}
	if got := aws.ToString(f.put.IfMatch); got != `"e1"` {
		t.Fatalf("IfMatch = %q, want %q", got, `"e1"`)
	}
	if f.put.IfNoneMatch != nil {
		t.Fatalf("IfNoneMatch = %q, want unset", *f.put.IfNoneMatch)
	}
	if aws.ToString(f.put.Key) != "graph.json" {
		t.Fatalf("key = %q, want graph.json (no store prefix)", aws.ToString(f.put.Key))
	}
}

func TestPut_NoCondition_SendsNoConditionalHeader(t *testing.T) {
	f := &fakeAPI{putOut: &awss3.PutObjectOutput{ETag: aws.String(`"e1"`)}}
	s := NewFromClient(f, "bkt", "")
	if _, err := s.Put(t.Context(), "data/x", []byte("x"), storage.PutOptions{}); err != nil {
		t.Fatalf("put: %v", err)
	}
	if f.put.IfMatch != nil || f.put.IfNoneMatch != nil {
		t.Fatalf("IfMatch = %v, IfNoneMatch = %v, want both unset", f.put.IfMatch, f.put.IfNoneMatch)
	}
}

func TestPut_BothConditions_IsInvalidArgumentWithoutRequest(t *testing.T) {
	f := &fakeAPI{}
	s := NewFromClient(f, "bkt", "")
	_, err := s.Put(t.Context(), "graph.json", []byte("x"), storage.PutOptions{IfNoneMatch: true, IfMatch: `"e1"`})
	if !errors.Is(err, storage.ErrInvalidArgument) {
		t.Fatalf("err = %v, want ErrInvalidArgument", err)
	}
	if f.calls != 0 {
		t.Fatalf("%d requests sent, want none", f.calls)
	}
}

func TestWrites_MakeOneAttempt_ReadsKeepClientRetries(t *testing.T) {
	f := &fakeAPI{
		putOut:  &awss3.PutObjectOutput{ETag: aws.String(`"e1"`)},
		getOut:  &awss3.GetObjectOutput{Body: io.NopCloser(strings.NewReader(""))},
		headOut: &awss3.HeadObjectOutput{},
		listOut: &awss3.ListObjectsV2Output{},
	}
	s := NewFromClient(f, "bkt", "")
	ctx := t.Context()
	writes := map[string]func() error{
		"put-if-absent": func() error {
			_, err := s.Put(ctx, "k", nil, storage.PutOptions{IfNoneMatch: true})
			return err
		},
		"put-if-match": func() error {
			_, err := s.Put(ctx, "k", nil, storage.PutOptions{IfMatch: `"e1"`})
			return err
		},
		"put":          func() error { _, err := s.Put(ctx, "k", nil, storage.PutOptions{}); return err },
		"delete":       func() error { return s.Delete(ctx, "k") },
		"delete_batch": func() error { return s.DeleteBatch(ctx, []string{"k"}) },
	}
	for name, do := range writes {
		if err := do(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if n := attemptsAfter(f.optFns); n != 1 {
			t.Errorf("%s gets %d attempts, want 1", name, n)
		}
	}
	reads := map[string]func() error{
		"get":  func() error { _, err := s.Get(ctx, "k"); return err },
		"head": func() error { _, err := s.Head(ctx, "k"); return err },
		"list": func() error { _, err := s.List(ctx, storage.ListOptions{}); return err },
	}
	for name, do := range reads {
		if err := do(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if n := attemptsAfter(f.optFns); n != 3 {
			t.Errorf("%s gets %d attempts, want the client's 3", name, n)
		}
	}
}

func TestPut_ResponseWithoutETag_IsAmbiguous(t *testing.T) {
	f := &fakeAPI{putOut: &awss3.PutObjectOutput{}}
	s := NewFromClient(f, "bkt", "")
	_, err := s.Put(t.Context(), "refs/a.json", []byte("x"), storage.PutOptions{IfNoneMatch: true})
	if !errors.Is(err, storage.ErrAmbiguous) {
		t.Fatalf("err = %v, want ErrAmbiguous", err)
	}
}

func TestPut_ContextDoneBeforeSend_IsAmbiguousWithoutRequest(t *testing.T) {
	f := &fakeAPI{}
	s := NewFromClient(f, "bkt", "")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := s.Put(ctx, "refs/a.json", []byte("x"), storage.PutOptions{IfNoneMatch: true})
	if !errors.Is(err, storage.ErrAmbiguous) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want ErrAmbiguous matching context.Canceled", err)
	}
	_, err = s.Get(ctx, "refs/a.json")
	if !errors.Is(err, storage.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Fatalf("get err = %v, want ErrUnavailable matching context.Canceled", err)
	}
	if f.calls != 0 {
		t.Fatalf("%d requests sent, want none", f.calls)
	}
}

func TestGet_ReturnsBodyAndQuotedETag(t *testing.T) {
	mod := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f := &fakeAPI{getOut: &awss3.GetObjectOutput{
		Body:          io.NopCloser(strings.NewReader("hello")),
		ETag:          aws.String(`"5d41402abc4b2a76b9719d911017c592"`),
		LastModified:  aws.Time(mod),
		ContentLength: aws.Int64(5),
	}}
	s := NewFromClient(f, "bkt", "tenant")
	obj, err := s.Get(t.Context(), "a/b")
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	want := storage.ObjectInfo{Key: "a/b", Size: 5, ETag: `"5d41402abc4b2a76b9719d911017c592"`, LastModified: mod}
	if obj.ObjectInfo != want || string(obj.Body) != "hello" {
		t.Fatalf("get = %+v %q, want %+v %q", obj.ObjectInfo, obj.Body, want, "hello")
	}
	if aws.ToString(f.get.Key) != "tenant/a/b" {
		t.Fatalf("key on the wire = %q, want tenant/a/b", aws.ToString(f.get.Key))
	}
}

func TestList_MapsOptionsAndStripsStorePrefix(t *testing.T) {
	f := &fakeAPI{listOut: &awss3.ListObjectsV2Output{
		Contents: []types.Object{
			{Key: aws.String("tenant/refs/b"), Size: aws.Int64(1), ETag: aws.String(`"x"`)},
			{Key: aws.String("tenant/refs/c"), Size: aws.Int64(2), ETag: aws.String(`"y"`)},
		},
		IsTruncated: aws.Bool(true),
	}}
	s := NewFromClient(f, "bkt", "tenant")
	page, err := s.List(t.Context(), storage.ListOptions{Prefix: "refs/", StartAfter: "refs/a", Limit: 2})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	in := f.list
	if aws.ToString(in.Prefix) != "tenant/refs/" || aws.ToString(in.StartAfter) != "tenant/refs/a" || aws.ToInt32(in.MaxKeys) != 2 {
		t.Fatalf("request = {Prefix:%q StartAfter:%q MaxKeys:%d}, want {tenant/refs/ tenant/refs/a 2}",
			aws.ToString(in.Prefix), aws.ToString(in.StartAfter), aws.ToInt32(in.MaxKeys))
	}
	if len(page.Objects) != 2 || page.Objects[0].Key != "refs/b" || page.Objects[1].Key != "refs/c" || !page.Truncated {
		t.Fatalf("page = %+v, want refs/b, refs/c, truncated", page)
	}
	if page.Objects[1].Size != 2 || page.Objects[1].ETag != `"y"` {
		t.Fatalf("entry = %+v, want Size 2 ETag %q", page.Objects[1], `"y"`)
	}
}

func TestList_NoStorePrefix_SendsOnlyWhatWasAsked(t *testing.T) {
	f := &fakeAPI{listOut: &awss3.ListObjectsV2Output{}}
	s := NewFromClient(f, "bkt", "")
	if _, err := s.List(t.Context(), storage.ListOptions{}); err != nil {
		t.Fatalf("list: %v", err)
	}
	if f.list.Prefix != nil || f.list.StartAfter != nil || aws.ToInt32(f.list.MaxKeys) != 1000 {
		t.Fatalf("request = {Prefix:%v StartAfter:%v MaxKeys:%d}, want {nil nil 1000}", f.list.Prefix, f.list.StartAfter, aws.ToInt32(f.list.MaxKeys))
	}
}

func TestList_LimitOutOfRange_IsInvalidArgument(t *testing.T) {
	f := &fakeAPI{}
	s := NewFromClient(f, "bkt", "")
	for _, limit := range []int{-1, 1001} {
		if _, err := s.List(t.Context(), storage.ListOptions{Limit: limit}); !errors.Is(err, storage.ErrInvalidArgument) {
			t.Errorf("limit %d: err = %v, want ErrInvalidArgument", limit, err)
		}
	}
	if f.calls != 0 {
		t.Fatalf("%d requests sent, want none", f.calls)
	}
}

func TestDelete_MissingKey404_IsSuccess(t *testing.T) {
	f := &fakeAPI{err: apiError("DeleteObject", 404, "NoSuchKey")}
	s := NewFromClient(f, "bkt", "")
	if err := s.Delete(t.Context(), "gone"); err != nil {
		t.Fatalf("delete: %v, want nil (deletes are idempotent)", err)
	}
}

func TestDeleteBatch_SendsQuietPrefixedDedupedKeys(t *testing.T) {
	f := &fakeAPI{}
	s := NewFromClient(f, "bkt", "p")
	if err := s.DeleteBatch(t.Context(), []string{"a", "b", "a"}); err != nil {
		t.Fatalf("delete batch: %v", err)
	}
	d := f.delBatch.Delete
	if !aws.ToBool(d.Quiet) || len(d.Objects) != 2 || aws.ToString(d.Objects[0].Key) != "p/a" || aws.ToString(d.Objects[1].Key) != "p/b" {
		t.Fatalf("request = %+v, want quiet delete of p/a, p/b", d)
	}
}

func TestDeleteBatch_PerKeyErrors_AreBatchErrorNamingEachKey(t *testing.T) {
	f := &fakeAPI{delBatchOut: &awss3.DeleteObjectsOutput{Errors: []types.Error{
		{Key: aws.String("p/a"), Code: aws.String("AccessDenied"), Message: aws.String("no")},
		{Key: aws.String("p/b"), Code: aws.String("InternalError"), Message: aws.String("oops")},
		{Key: aws.String("p/c"), Code: aws.String("NoSuchKey")},
	}}}
	s := NewFromClient(f, "bkt", "p")
	err := s.DeleteBatch(t.Context(), []string{"a", "b", "c", "d"})
	var be *storage.BatchError
	if !errors.As(err, &be) {
		t.Fatalf("err = %v (%T), want *storage.BatchError", err, err)
	}
	if len(be.Failed) != 2 {
		t.Fatalf("failed = %v, want exactly a and b", be.Failed)
	}
	if !errors.Is(be.Failed["a"], storage.ErrRefused) {
		t.Errorf("a: %v, want ErrRefused", be.Failed["a"])
	}
	if !errors.Is(be.Failed["b"], storage.ErrAmbiguous) {
		t.Errorf("b: %v, want ErrAmbiguous", be.Failed["b"])
	}
}

func TestDeleteBatch_TooManyOrInvalidKeys_SendsNothing(t *testing.T) {
	f := &fakeAPI{}
	s := NewFromClient(f, "bkt", "")
	keys := make([]string, storage.MaxBatchDelete+1)
	for i := range keys {
		keys[i] = "k/" + strings.Repeat("x", i%7+1)
	}
	if err := s.DeleteBatch(t.Context(), keys); !errors.Is(err, storage.ErrInvalidArgument) {
		t.Fatalf("1001 keys: err = %v, want ErrInvalidArgument", err)
	}
	if err := s.DeleteBatch(t.Context(), []string{"ok", "bad//key"}); !errors.Is(err, storage.ErrInvalidKey) {
		t.Fatalf("invalid key: err = %v, want ErrInvalidKey", err)
	}
	if err := s.DeleteBatch(t.Context(), nil); err != nil {
		t.Fatalf("no keys: err = %v, want nil", err)
	}
	if f.calls != 0 {
		t.Fatalf("%d requests sent, want none", f.calls)
	}
}

func TestPut_KeyTooLongWithPrefix_IsInvalidKeyWithoutRequest(t *testing.T) {
	f := &fakeAPI{}
	s := NewFromClient(f, "bkt", "tenant")
	key := strings.Repeat("k", storage.MaxKeyLen-3) // valid alone, too long with "tenant/"
	_, err := s.Put(t.Context(), key, nil, storage.PutOptions{IfNoneMatch: true})
	if !errors.Is(err, storage.ErrInvalidKey) {
		t.Fatalf("err = %v, want ErrInvalidKey", err)
	}
	if f.calls != 0 {
		t.Fatalf("%d requests sent, want none", f.calls)
	}
}

func TestNew_InvalidConfig_NamesTheField(t *testing.T) {
	cases := []struct {
		name  string
		cfg   Config
		field string
	}{
		{"no bucket", Config{}, "Config.Bucket"},
		{"bad prefix", Config{Bucket: "b", Prefix: "/tenant/"}, "Config.Prefix"},
		{"half credentials", Config{Bucket: "b", AccessKeyID: "k"}, "Config.SecretAccessKey"},
		{"negative timeout", Config{Bucket: "b", RequestTimeout: -time.Second}, "Config.RequestTimeout"},
	}
	for _, c := range cases {
		_, err := New(t.Context(), c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: err = %v, want one naming %s", c.name, err, c.field)
		}
	}
}

func TestNewFromClient_InvalidPrefix_Panics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("NewFromClient accepted prefix \"a//b\"")
		}
	}()
	NewFromClient(&fakeAPI{}, "bkt", "a//b")
}

// countingS3 is an HTTP server that answers every request with status and
// an S3 error body, counting requests.
func countingS3(t *testing.T, status int, code string) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(status)
		io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>`+code+`</Code><Message>synthetic</Message></Error>`)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func newTestStore(t *testing.T, endpoint string, timeout time.Duration) *Store {
	t.Helper()
	s, err := New(t.Context(), Config{
		Endpoint: endpoint, Bucket: "bkt", PathStyle: true,
		AccessKeyID: "test-key", SecretAccessKey: "test-secret",
		RequestTimeout: timeout,
	})
	if err != nil {
		t.Fatalf("new store: %v", err)
	}
	return s
}

func TestPut_Server500_OneAttemptIsAmbiguous(t *testing.T) {
	srv, n := countingS3(t, http.StatusInternalServerError, "InternalError")
	s := newTestStore(t, srv.URL, 0)
	_, err := s.Put(t.Context(), "refs/a.json", []byte("x"), storage.PutOptions{IfNoneMatch: true})
	if !errors.Is(err, storage.ErrAmbiguous) {
		t.Fatalf("err = %v, want ErrAmbiguous", err)
	}
	if got := n.Load(); got != 1 {
		t.Fatalf("server saw %d attempts, want 1 (writes are never retried)", got)
	}
	if err := s.DeleteBatch(t.Context(), []string{"a", "b"}); !errors.Is(err, storage.ErrAmbiguous) {
		t.Fatalf("delete batch err = %v, want ErrAmbiguous", err)
	}
	if got := n.Load(); got != 2 {
		t.Fatalf("server saw %d attempts after the batch delete, want 2", got)
	}
}

func TestGet_Server503_RetriedThenUnavailable(t *testing.T) {
	srv, n := countingS3(t, http.StatusServiceUnavailable, "ServiceUnavailable")
	s := newTestStore(t, srv.URL, 0)
	_, err := s.Get(t.Context(), "refs/a.json")
	if !errors.Is(err, storage.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	if got := n.Load(); got != readAttempts {
		t.Fatalf("server saw %d attempts, want %d", got, readAttempts)
	}
}

func TestPut_Server412WithoutBody_IsPreconditionFailed(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusPreconditionFailed)
	}))
	t.Cleanup(srv.Close)
	s := newTestStore(t, srv.URL, 0)
	_, err := s.Put(t.Context(), "refs/a.json", []byte("x"), storage.PutOptions{IfNoneMatch: true})
	if !errors.Is(err, storage.ErrPreconditionFailed) {
		t.Fatalf("err = %v, want ErrPreconditionFailed", err)
	}
}

func TestPut_ServerHangs_RequestTimeoutMakesItAmbiguous(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	s := newTestStore(t, srv.URL, 200*time.Millisecond)
	start := time.Now()
	_, err := s.Put(t.Context(), "refs/a.json", bytes.Repeat([]byte("x"), 10), storage.PutOptions{IfNoneMatch: true})
	if !errors.Is(err, storage.ErrAmbiguous) {
		t.Fatalf("err = %v, want ErrAmbiguous", err)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want it to match context.DeadlineExceeded", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("put took %v with a 200ms request timeout", took)
	}
}
