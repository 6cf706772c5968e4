package faults

import (
	"cmp"
	"context"
	"errors"
	"io"

	"github.com/graftworks/graft/storage"
)

// The multipart operations.
const (
	OpCreateMultipart   Op = "create_multipart"
	OpUploadPart        Op = "upload_part"
	OpCompleteMultipart Op = "complete_multipart"
	OpAbortMultipart    Op = "abort_multipart"
	OpListMultipart     Op = "list_multipart"
)

// MultipartOps lists the multipart operation kinds.
var MultipartOps = []Op{OpCreateMultipart, OpUploadPart, OpCompleteMultipart, OpAbortMultipart, OpListMultipart}

var _ storage.Multipart = (*Store)(nil)

// SupportsMultipart reports whether the wrapped store has multipart uploads.
func (s *Store) SupportsMultipart() bool {
	_, ok := storage.AsMultipart(s.inner)
	return ok
}

func (s *Store) innerMultipart(op Op, key string) (storage.Multipart, error) {
	m, ok := storage.AsMultipart(s.inner)
	if !ok {
		return nil, storage.NewError(string(op), key, storage.CodeInvalidArgument, errors.New("the wrapped store has no multipart uploads"))
	}
	return m, nil
}

// MultipartLimits are the wrapped store's.
func (s *Store) MultipartLimits() storage.MultipartLimits {
	if m, ok := storage.AsMultipart(s.inner); ok {
		return m.MultipartLimits()
	}
	return storage.MultipartLimits{}
}

// multipartOf validates key and returns the inner store's multipart uploads.
func (s *Store) multipartOf(op Op, key string) (storage.Multipart, error) {
	m, err := s.innerMultipart(op, key)
	return m, cmp.Or(storage.CheckKey(string(op), key), err)
}

func (s *Store) CreateMultipart(ctx context.Context, key string) (string, error) {
	m, err := s.multipartOf(OpCreateMultipart, key)
	return through(ctx, s, err, OpCreateMultipart, key, nil, nil, nil, func() (string, error) { return m.CreateMultipart(ctx, key) })
}

func (s *Store) UploadPart(ctx context.Context, key, uploadID string, number int, body io.ReadSeeker, size int64) (storage.Part, error) {
	m, err := s.multipartOf(OpUploadPart, key)
	return through(ctx, s, err, OpUploadPart, key, nil, nil, nil, func() (storage.Part, error) {
		return m.UploadPart(ctx, key, uploadID, number, body, size)
	})
}

func (s *Store) CompleteMultipart(ctx context.Context, key, uploadID string, parts []storage.Part) (storage.PutResult, error) {
	m, err := s.multipartOf(OpCompleteMultipart, key)
	return through(ctx, s, err, OpCompleteMultipart, key, nil, nil, nil, func() (storage.PutResult, error) {
		return m.CompleteMultipart(ctx, key, uploadID, parts)
	})
}

func (s *Store) AbortMultipart(ctx context.Context, key, uploadID string) error {
	m, err := s.multipartOf(OpAbortMultipart, key)
	return throughErr(ctx, s, err, OpAbortMultipart, key, nil, func() error { return m.AbortMultipart(ctx, key, uploadID) })
}

func (s *Store) ListMultipart(ctx context.Context, opts storage.ListMultipartOptions) (storage.MultipartPage, error) {
	m, err := s.innerMultipart(OpListMultipart, opts.Prefix)
	return through(ctx, s, cmp.Or(pageError(OpListMultipart, opts.Prefix, opts.Limit), err), OpListMultipart, opts.Prefix, nil, nil, nil,
		func() (storage.MultipartPage, error) { return m.ListMultipart(ctx, opts) })
}
