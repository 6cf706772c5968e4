// Package s3 is graft's storage.Store backed by an S3-compatible object
// store (AWS S3, versitygw, MinIO, gofakes3, ...) through aws-sdk-go-v2.
//
// Invariants:
//   - Conditions go on the wire (If-None-Match: *, If-Match: <etag>): the
//     server decides which of racing writers wins.
//   - The SDK never retries a write: a retried PUT whose first attempt landed
//     would answer 412, turning "applied" into "precondition failed", the one
//     mistake graft cannot recover from. A write makes one attempt and an
//     unknown outcome is storage.ErrAmbiguous. Reads may be retried.
//   - Every SDK error is classified (classify) into a storage.Error; no smithy
//     or S3 type is part of the API, the original error kept for its message.
//   - Credentials go to the SDK only: never stored, logged or put in an error.
//   - With a Prefix, every key lives under "<prefix>/" in the bucket and
//     listings never return keys outside it.
package s3

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go/logging"

	"github.com/graftworks/graft/storage"
)

// Config configures New.
type Config struct {
	// Endpoint is the S3 endpoint URL, e.g. "http://127.0.0.1:7070"; ""
	// resolves AWS's.
	Endpoint string
	Region   string // signing region; defaults to "us-east-1"
	Bucket   string // required
	// Prefix is a key prefix inside the bucket, itself a valid storage key.
	Prefix string
	// PathStyle puts the bucket in the URL path (versitygw, MinIO, gofakes3).
	PathStyle bool
	// AccessKeyID and SecretAccessKey are static credentials, both or neither
	// (then the SDK's default chain).
	AccessKeyID, SecretAccessKey string
	// RequestTimeout bounds one HTTP attempt, body included; defaults to 30s.
	RequestTimeout time.Duration
	HTTPClient     *http.Client // defaults to the SDK's client
}

const (
	defaultRegion         = "us-east-1"
	defaultRequestTimeout = 30 * time.Second
	readAttempts          = 3 // SDK tries of a read before ErrUnavailable
	readMaxBackoff        = time.Second
)

// API is the subset of *awss3.Client the store uses; tests substitute a fake.
type API interface {
	GetObject(ctx context.Context, in *awss3.GetObjectInput, optFns ...func(*awss3.Options)) (*awss3.GetObjectOutput, error)
	HeadObject(ctx context.Context, in *awss3.HeadObjectInput, optFns ...func(*awss3.Options)) (*awss3.HeadObjectOutput, error)
	PutObject(ctx context.Context, in *awss3.PutObjectInput, optFns ...func(*awss3.Options)) (*awss3.PutObjectOutput, error)
	ListObjectsV2(ctx context.Context, in *awss3.ListObjectsV2Input, optFns ...func(*awss3.Options)) (*awss3.ListObjectsV2Output, error)
	DeleteObject(ctx context.Context, in *awss3.DeleteObjectInput, optFns ...func(*awss3.Options)) (*awss3.DeleteObjectOutput, error)
	DeleteObjects(ctx context.Context, in *awss3.DeleteObjectsInput, optFns ...func(*awss3.Options)) (*awss3.DeleteObjectsOutput, error)
}

var _ API = (*awss3.Client)(nil)

// Store is a storage.Store on one S3 bucket (and optional prefix).
type Store struct {
	client    API
	bucket    string
	keyPrefix string // "" or the configured prefix followed by "/"
}

var _ storage.Store = (*Store)(nil)

// New builds an S3 client from cfg and returns a Store on cfg.Bucket.
func New(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.Bucket == "" {
		return nil, errors.New("new s3 store: Config.Bucket is required")
	}
	if err := storage.ValidateKey(cfg.Prefix); cfg.Prefix != "" && err != nil {
		return nil, fmt.Errorf("new s3 store: Config.Prefix: %w", err)
	}
	if (cfg.AccessKeyID == "") != (cfg.SecretAccessKey == "") {
		return nil, errors.New("new s3 store: Config.AccessKeyID and Config.SecretAccessKey must be set together")
	}
	if cfg.RequestTimeout < 0 {
		return nil, errors.New("new s3 store: Config.RequestTimeout must not be negative")
	}
	cfg.Region = cmp.Or(cfg.Region, defaultRegion)
	cfg.RequestTimeout = cmp.Or(cfg.RequestTimeout, defaultRequestTimeout)
	loadOpts := []func(*config.LoadOptions) error{
		config.WithRegion(cfg.Region),
		// The SDK's default logger writes to stderr; a library must not.
		config.WithLogger(logging.Nop{}),
	}
	if cfg.AccessKeyID != "" {
		loadOpts = append(loadOpts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(cfg.AccessKeyID, cfg.SecretAccessKey, "")))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		// The SDK's message names files and profiles, never secrets.
		return nil, fmt.Errorf("new s3 store: load aws config: %w", err)
	}

	var httpClient awss3.HTTPClient = awshttp.NewBuildableClient()
	if cfg.HTTPClient != nil {
		httpClient = cfg.HTTPClient
	}
	client := awss3.NewFromConfig(awsCfg, func(o *awss3.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		o.UsePathStyle = cfg.PathStyle
		o.HTTPClient = attemptTimeoutClient{next: httpClient, timeout: cfg.RequestTimeout}
		// Used by reads only: a few quick attempts and no retry quota, whose
		// exhaustion would surface under load.
		o.Retryer = retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts, o.MaxBackoff, o.RateLimiter = readAttempts, readMaxBackoff, ratelimit.None
		})
		o.RetryMaxAttempts = 0
		o.Logger = logging.Nop{}
		o.DisableLogOutputChecksumValidationSkipped = true
	})
	return NewFromClient(client, cfg.Bucket, cfg.Prefix), nil
}

// NewFromClient returns a Store on client, whose retry settings apply to
// reads only. It panics on a prefix that is not a valid key.
func NewFromClient(client API, bucket, prefix string) *Store {
	s := &Store{client: client, bucket: bucket}
	if prefix != "" {
		if err := storage.ValidateKey(prefix); err != nil {
			panic(fmt.Sprintf("s3.NewFromClient: invalid prefix: %v", err))
		}
		s.keyPrefix = prefix + "/"
	}
	return s
}

// singleAttempt disables SDK retries for one write, whose retry could observe
// its own lost attempt's effect; every unknown outcome stays ErrAmbiguous.
func singleAttempt(o *awss3.Options) {
	o.Retryer = aws.NopRetryer{}
	o.RetryMaxAttempts = 1
}

// attemptTimeoutClient bounds each HTTP attempt, body included, by timeout,
// so a retried read gets a full attempt after a slow one.
type attemptTimeoutClient struct {
	next    awss3.HTTPClient
	timeout time.Duration
}

func (c attemptTimeoutClient) Do(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithTimeout(req.Context(), c.timeout)
	resp, err := c.next.Do(req.WithContext(ctx))
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// cancelOnClose releases the attempt's timer once the body is consumed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// objectKey returns the bucket key of a valid storage key, not too long with the prefix.
func (s *Store) objectKey(op, key string) (string, error) {
	if err := storage.CheckKey(op, key); err != nil {
		return "", err
	}
	full := s.keyPrefix + key
	if len(full) > storage.MaxKeyLen {
		return "", storage.NewError(op, key, storage.CodeInvalidKey, fmt.Errorf("longer than %d bytes with the store prefix", storage.MaxKeyLen))
	}
	return full, nil
}

// request is objectKey for a request whose context is not done.
func (s *Store) request(ctx context.Context, op, key string, write bool) (string, error) {
	full, err := s.objectKey(op, key)
	if err == nil && ctx.Err() != nil {
		err = storage.ContextError(op, key, write, ctx.Err())
	}
	return full, err
}

// answered returns what a successful write names (what, e.g. its ETag); a
// success naming nothing is ambiguous, settled like any unknown outcome.
func answered(op, key, what string, v *string) (string, error) {
	if aws.ToString(v) == "" {
		return "", &storage.Error{Op: op, Key: key, Code: storage.CodeAmbiguous, Status: http.StatusOK,
			Err: fmt.Errorf("response has no %s", what)}
	}
	return *v, nil
}

func (s *Store) Get(ctx context.Context, key string) (storage.Object, error) {
	const op = "get"
	full, err := s.request(ctx, op, key, false)
	if err != nil {
		return storage.Object{}, err
	}
	out, err := s.client.GetObject(ctx, &awss3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(full)})
	if err != nil {
		return storage.Object{}, newError(ctx, op, key, read, err)
	}
	defer out.Body.Close()
	body, err := io.ReadAll(out.Body)
	if err != nil {
		return storage.Object{}, newError(ctx, op, key, read, fmt.Errorf("read body: %w", err))
	}
	return storage.Object{ObjectInfo: objectInfo(key, int64(len(body)), out.ETag, out.LastModified), Body: body}, nil
}

func objectInfo(key string, size int64, etag *string, modified *time.Time) storage.ObjectInfo {
	return storage.ObjectInfo{Key: key, Size: size, ETag: aws.ToString(etag), LastModified: aws.ToTime(modified)}
}

func (s *Store) Head(ctx context.Context, key string) (storage.ObjectInfo, error) {
	const op = "head"
	full, err := s.request(ctx, op, key, false)
	if err != nil {
		return storage.ObjectInfo{}, err
	}
	out, err := s.client.HeadObject(ctx, &awss3.HeadObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(full)})
	if err != nil {
		return storage.ObjectInfo{}, newError(ctx, op, key, read, err)
	}
	return objectInfo(key, aws.ToInt64(out.ContentLength), out.ETag, out.LastModified), nil
}

func (s *Store) Put(ctx context.Context, key string, body []byte, opts storage.PutOptions) (storage.PutResult, error) {
	const op = "put"
	full, err := s.objectKey(op, key)
	err = cmp.Or(err, storage.CheckPut(key, opts))
	if err == nil && ctx.Err() != nil {
		err = storage.ContextError(op, key, true, ctx.Err())
	}
	if err != nil {
		return storage.PutResult{}, err
	}
	in := &awss3.PutObjectInput{
		Bucket:        aws.String(s.bucket),
		Key:           aws.String(full),
		Body:          bytes.NewReader(body),
		ContentLength: aws.Int64(int64(len(body))),
	}
	kind := write
	if opts.IfNoneMatch {
		in.IfNoneMatch = aws.String("*")
	}
	if opts.IfMatch != "" {
		in.IfMatch = aws.String(opts.IfMatch)
		kind = writeIfMatch
	}
	out, err := s.client.PutObject(ctx, in, singleAttempt)
	if err != nil {
		return storage.PutResult{}, newError(ctx, op, key, kind, err)
	}
	etag, err := answered(op, key, "ETag", out.ETag)
	return storage.PutResult{ETag: etag}, err
}

func (s *Store) List(ctx context.Context, opts storage.ListOptions) (storage.ListPage, error) {
	const op = "list"
	limit, err := storage.CheckList(ctx, op, "", opts.Limit)
	if err != nil {
		return storage.ListPage{}, err
	}
	in := &awss3.ListObjectsV2Input{Bucket: aws.String(s.bucket), MaxKeys: aws.Int32(int32(limit))}
	if p := s.keyPrefix + opts.Prefix; p != "" {
		in.Prefix = aws.String(p)
	}
	if opts.StartAfter != "" {
		in.StartAfter = aws.String(s.keyPrefix + opts.StartAfter)
	}
	out, err := s.client.ListObjectsV2(ctx, in)
	if err != nil {
		return storage.ListPage{}, newError(ctx, op, "", read, err)
	}
	page := storage.ListPage{Objects: make([]storage.ObjectInfo, 0, len(out.Contents)), Truncated: aws.ToBool(out.IsTruncated)}
	for _, o := range out.Contents {
		key, ok := strings.CutPrefix(aws.ToString(o.Key), s.keyPrefix)
		if !ok {
			continue
		}
		page.Objects = append(page.Objects, objectInfo(key, aws.ToInt64(o.Size), o.ETag, o.LastModified))
	}
	return page, nil
}

func (s *Store) Delete(ctx context.Context, key string) error {
	const op = "delete"
	full, err := s.request(ctx, op, key, true)
	if err != nil {
		return err
	}
	_, err = s.client.DeleteObject(ctx, &awss3.DeleteObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(full)}, singleAttempt)
	// S3 answers 204 for a missing key, some servers 404: the same here.
	if code, _ := classify(err, read); err == nil || code == storage.CodeNotFound {
		return nil
	}
	return newError(ctx, op, key, write, err)
}

func (s *Store) DeleteBatch(ctx context.Context, keys []string) error {
	const op = "delete_batch"
	if err := storage.CheckBatch(keys); err != nil {
		return err
	}
	objects := make([]types.ObjectIdentifier, 0, len(keys))
	seen := make(map[string]bool, len(keys))
	for _, key := range keys {
		full, err := s.objectKey(op, key)
		if err != nil {
			return err
		}
		if seen[full] {
			continue
		}
		seen[full] = true
		objects = append(objects, types.ObjectIdentifier{Key: aws.String(full)})
	}
	if len(objects) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return storage.ContextError(op, "", true, err)
	}
	// DeleteObjects needs a body checksum: the SDK's default CRC32 header.
	out, err := s.client.DeleteObjects(ctx, &awss3.DeleteObjectsInput{
		Bucket: aws.String(s.bucket),
		Delete: &types.Delete{Objects: objects, Quiet: aws.Bool(true)},
	}, singleAttempt)
	if err != nil {
		return newError(ctx, op, "", write, err)
	}
	failed := make(map[string]error)
	for _, e := range out.Errors {
		code, gone := classifyBatchEntry(aws.ToString(e.Code))
		if gone {
			continue
		}
		key, _ := strings.CutPrefix(aws.ToString(e.Key), s.keyPrefix) // a key outside the prefix as it is
		failed[key] = &storage.Error{Op: op, Key: key, Code: code,
			Err: fmt.Errorf("%s: %s", aws.ToString(e.Code), aws.ToString(e.Message))}
	}
	if len(failed) > 0 {
		return &storage.BatchError{Failed: failed}
	}
	return nil
}
