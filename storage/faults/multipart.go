package faults

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/graftworks/graft/storage"
)

// The multipart operations. Rules select them like any other operation (a
// list_multipart's key is its prefix); Hold applies to puts only.
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

// SupportsMultipart reports whether the wrapped store has multipart uploads;
// storage.AsMultipart consults it.
func (s *Store) SupportsMultipart() bool {
	_, ok := storage.AsMultipart(s.inner)
	return ok
}

func (s *Store) innerMultipart(op Op, key string) (storage.Multipart, error) {
	m, ok := storage.AsMultipart(s.inner)
	if !ok {
		return nil, &storage.Error{Op: string(op), Key: key, Code: storage.CodeInvalidArgument, Err: errors.New("the wrapped store has no multipart uploads")}
	}
	return m, nil
}

// MultipartLimits implements storage.Multipart: the wrapped store's.
func (s *Store) MultipartLimits() storage.MultipartLimits {
	if m, ok := storage.AsMultipart(s.inner); ok {
		return m.MultipartLimits()
	}
	return storage.MultipartLimits{}
}

// multipartFault runs the common part of every multipart write: validate,
// record, wait, and fail before sending when the fault says so. It returns
// the fault for the caller to apply after sending.
func (s *Store) multipartFault(ctx context.Context, op Op, key string) (storage.Multipart, fault, error) {
	if err := validKey(op, key); err != nil {
		return nil, fault{}, err
	}
	m, err := s.innerMultipart(op, key)
	if err != nil {
		return nil, fault{}, err
	}
	f := s.decide(op, []string{key}, nil)
	if err := s.wait(ctx, f, op, key); err != nil {
		return nil, fault{}, err
	}
	switch f.mode {
	case FailBeforeSend, Refuse:
		return nil, fault{}, f.failure(op, key)
	}
	return m, f, nil
}

// CreateMultipart implements storage.Multipart.
func (s *Store) CreateMultipart(ctx context.Context, key string) (string, error) {
	m, f, err := s.multipartFault(ctx, OpCreateMultipart, key)
	if err != nil {
		return "", err
	}
	id, err := m.CreateMultipart(ctx, key)
	if f.mode == ApplyLoseAnswer {
		return "", f.lost(OpCreateMultipart, key, err)
	}
	return id, err
}

// UploadPart implements storage.Multipart.
func (s *Store) UploadPart(ctx context.Context, key, uploadID string, number int, body io.ReadSeeker, size int64) (storage.Part, error) {
	m, f, err := s.multipartFault(ctx, OpUploadPart, key)
	if err != nil {
		return storage.Part{}, err
	}
	p, err := m.UploadPart(ctx, key, uploadID, number, body, size)
	if f.mode == ApplyLoseAnswer {
		return storage.Part{}, f.lost(OpUploadPart, key, err)
	}
	return p, err
}

// CompleteMultipart implements storage.Multipart.
func (s *Store) CompleteMultipart(ctx context.Context, key, uploadID string, parts []storage.Part) (storage.PutResult, error) {
	m, f, err := s.multipartFault(ctx, OpCompleteMultipart, key)
	if err != nil {
		return storage.PutResult{}, err
	}
	res, err := m.CompleteMultipart(ctx, key, uploadID, parts)
	if f.mode == ApplyLoseAnswer {
		return storage.PutResult{}, f.lost(OpCompleteMultipart, key, err)
	}
	return res, err
}

// AbortMultipart implements storage.Multipart.
func (s *Store) AbortMultipart(ctx context.Context, key, uploadID string) error {
	m, f, err := s.multipartFault(ctx, OpAbortMultipart, key)
	if err != nil {
		return err
	}
	err = m.AbortMultipart(ctx, key, uploadID)
	if f.mode == ApplyLoseAnswer {
		return f.lost(OpAbortMultipart, key, err)
	}
	return err
}

// ListMultipart implements storage.Multipart. For rules and counts its key is opts.Prefix.
func (s *Store) ListMultipart(ctx context.Context, opts storage.ListMultipartOptions) (storage.MultipartPage, error) {
	if opts.Limit < 0 || opts.Limit > 1000 {
		return storage.MultipartPage{}, &storage.Error{Op: string(OpListMultipart), Key: opts.Prefix, Code: storage.CodeInvalidArgument,
			Err: fmt.Errorf("limit %d outside 1..1000", opts.Limit)}
	}
	m, err := s.innerMultipart(OpListMultipart, opts.Prefix)
	if err != nil {
		return storage.MultipartPage{}, err
	}
	f := s.decide(OpListMultipart, []string{opts.Prefix}, nil)
	if err := s.wait(ctx, f, OpListMultipart, opts.Prefix); err != nil {
		return storage.MultipartPage{}, err
	}
	switch f.mode {
	case FailBeforeSend, Refuse:
		return storage.MultipartPage{}, f.failure(OpListMultipart, opts.Prefix)
	case ApplyLoseAnswer:
		_, err := m.ListMultipart(ctx, opts)
		return storage.MultipartPage{}, f.lost(OpListMultipart, opts.Prefix, err)
	}
	return m.ListMultipart(ctx, opts)
}
