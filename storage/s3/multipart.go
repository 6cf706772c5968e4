package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/graftworks/graft/storage"
)

// MultipartAPI is the subset of *awss3.Client multipart uploads use; a
// NewFromClient client without it gives a Store without them.
type MultipartAPI interface {
	CreateMultipartUpload(ctx context.Context, in *awss3.CreateMultipartUploadInput, optFns ...func(*awss3.Options)) (*awss3.CreateMultipartUploadOutput, error)
	UploadPart(ctx context.Context, in *awss3.UploadPartInput, optFns ...func(*awss3.Options)) (*awss3.UploadPartOutput, error)
	CompleteMultipartUpload(ctx context.Context, in *awss3.CompleteMultipartUploadInput, optFns ...func(*awss3.Options)) (*awss3.CompleteMultipartUploadOutput, error)
	AbortMultipartUpload(ctx context.Context, in *awss3.AbortMultipartUploadInput, optFns ...func(*awss3.Options)) (*awss3.AbortMultipartUploadOutput, error)
	ListMultipartUploads(ctx context.Context, in *awss3.ListMultipartUploadsInput, optFns ...func(*awss3.Options)) (*awss3.ListMultipartUploadsOutput, error)
}

var (
	_ MultipartAPI      = (*awss3.Client)(nil)
	_ storage.Multipart = (*Store)(nil)
)

// codeNoSuchUpload is S3's answer for an upload completed, aborted or never started.
const codeNoSuchUpload = "NoSuchUpload"

// SupportsMultipart reports whether the client has the multipart calls.
func (s *Store) SupportsMultipart() bool { return s.multipart() != nil }

func (s *Store) multipart() MultipartAPI {
	mp, _ := s.client.(MultipartAPI)
	return mp
}

func errNoMultipart(op, key string) error {
	return storage.NewError(op, key, storage.CodeInvalidArgument, errors.New("the S3 client has no multipart calls"))
}

// MultipartLimits are S3's.
func (s *Store) MultipartLimits() storage.MultipartLimits { return storage.S3MultipartLimits }

// multipartError classifies a failed multipart write: an upload that no
// longer exists is ErrNotFound, anything else by the write rules.
func multipartError(ctx context.Context, op, key string, err error) error {
	if apiCode(err) == codeNoSuchUpload {
		return &storage.Error{Op: op, Key: key, Code: storage.CodeNotFound, Status: http.StatusNotFound, Err: err}
	}
	return newError(ctx, op, key, write, err)
}

func (s *Store) checkMultipart(ctx context.Context, op, key string) (MultipartAPI, string, error) {
	mp := s.multipart()
	if mp == nil {
		return nil, "", errNoMultipart(op, key)
	}
	full, err := s.request(ctx, op, key, true)
	return mp, full, err
}

func (s *Store) CreateMultipart(ctx context.Context, key string) (string, error) {
	const op = "create_multipart"
	mp, full, err := s.checkMultipart(ctx, op, key)
	if err != nil {
		return "", err
	}
	out, err := mp.CreateMultipartUpload(ctx, &awss3.CreateMultipartUploadInput{Bucket: aws.String(s.bucket), Key: aws.String(full)}, singleAttempt)
	if err != nil {
		return "", newError(ctx, op, key, write, err)
	}
	return answered(op, key, "upload id", out.UploadId)
}

func (s *Store) UploadPart(ctx context.Context, key, uploadID string, number int, body io.ReadSeeker, size int64) (storage.Part, error) {
	const op = "upload_part"
	if err := storage.CheckPart(key, number, size, storage.S3MultipartLimits); err != nil {
		return storage.Part{}, err
	}
	mp, full, err := s.checkMultipart(ctx, op, key)
	if err != nil {
		return storage.Part{}, err
	}
	if _, err := body.Seek(0, io.SeekStart); err != nil {
		return storage.Part{}, &storage.Error{Op: op, Key: key, Code: storage.CodeRefused, Err: fmt.Errorf("seek part body: %w", err)}
	}
	out, err := mp.UploadPart(ctx, &awss3.UploadPartInput{
		Bucket: aws.String(s.bucket), Key: aws.String(full), UploadId: aws.String(uploadID),
		PartNumber: aws.Int32(int32(number)), Body: io.NewSectionReader(readerAt{body}, 0, size), ContentLength: aws.Int64(size),
	}, singleAttempt)
	if err != nil {
		return storage.Part{}, multipartError(ctx, op, key, err)
	}
	etag, err := answered(op, key, "ETag", out.ETag)
	if err != nil {
		return storage.Part{}, err
	}
	return storage.Part{Number: number, ETag: etag, Size: size}, nil
}

// readerAt adapts a ReadSeeker to io.ReaderAt for a section reader, which
// the SDK seeks back and re-reads to sign the payload.
type readerAt struct{ rs io.ReadSeeker }

func (r readerAt) ReadAt(p []byte, off int64) (int, error) {
	if _, err := r.rs.Seek(off, io.SeekStart); err != nil {
		return 0, err
	}
	return io.ReadFull(r.rs, p)
}

// CompleteMultipart sends If-None-Match: * on
// the wire (a server that ignores it overwrites).
func (s *Store) CompleteMultipart(ctx context.Context, key, uploadID string, parts []storage.Part) (storage.PutResult, error) {
	const op = "complete_multipart"
	if err := storage.CheckParts(key, parts, storage.S3MultipartLimits); err != nil {
		return storage.PutResult{}, err
	}
	mp, full, err := s.checkMultipart(ctx, op, key)
	if err != nil {
		return storage.PutResult{}, err
	}
	completed := make([]types.CompletedPart, len(parts))
	for i, p := range parts {
		completed[i] = types.CompletedPart{PartNumber: aws.Int32(int32(p.Number)), ETag: aws.String(p.ETag)}
	}
	out, err := mp.CompleteMultipartUpload(ctx, &awss3.CompleteMultipartUploadInput{
		Bucket: aws.String(s.bucket), Key: aws.String(full), UploadId: aws.String(uploadID),
		MultipartUpload: &types.CompletedMultipartUpload{Parts: completed},
		IfNoneMatch:     aws.String("*"),
	}, singleAttempt)
	if err != nil {
		return storage.PutResult{}, multipartError(ctx, op, key, err)
	}
	etag, err := answered(op, key, "ETag", out.ETag)
	return storage.PutResult{ETag: etag}, err
}

func (s *Store) AbortMultipart(ctx context.Context, key, uploadID string) error {
	const op = "abort_multipart"
	mp, full, err := s.checkMultipart(ctx, op, key)
	if err != nil {
		return err
	}
	_, err = mp.AbortMultipartUpload(ctx, &awss3.AbortMultipartUploadInput{Bucket: aws.String(s.bucket), Key: aws.String(full), UploadId: aws.String(uploadID)}, singleAttempt)
	if err != nil && apiCode(err) != codeNoSuchUpload {
		return newError(ctx, op, key, write, err)
	}
	return nil
}

func (s *Store) ListMultipart(ctx context.Context, opts storage.ListMultipartOptions) (storage.MultipartPage, error) {
	const op = "list_multipart"
	mp := s.multipart()
	if mp == nil {
		return storage.MultipartPage{}, errNoMultipart(op, "")
	}
	limit, err := storage.CheckList(ctx, op, "", opts.Limit)
	if err != nil {
		return storage.MultipartPage{}, err
	}
	in := &awss3.ListMultipartUploadsInput{Bucket: aws.String(s.bucket), MaxUploads: aws.Int32(int32(limit))}
	if p := s.keyPrefix + opts.Prefix; p != "" {
		in.Prefix = aws.String(p)
	}
	if opts.KeyMarker != "" {
		in.KeyMarker = aws.String(s.keyPrefix + opts.KeyMarker)
		if opts.UploadIDMarker != "" {
			in.UploadIdMarker = aws.String(opts.UploadIDMarker)
		}
	}
	out, err := mp.ListMultipartUploads(ctx, in)
	if err != nil {
		return storage.MultipartPage{}, newError(ctx, op, "", read, err)
	}
	page := storage.MultipartPage{Truncated: aws.ToBool(out.IsTruncated)}
	for _, u := range out.Uploads {
		key, ok := strings.CutPrefix(aws.ToString(u.Key), s.keyPrefix)
		if !ok {
			continue
		}
		page.Uploads = append(page.Uploads, storage.Upload{Key: key, UploadID: aws.ToString(u.UploadId), Initiated: aws.ToTime(u.Initiated)})
	}
	return page, nil
}
