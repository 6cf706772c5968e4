package faults

import (
	"cmp"
	"context"
	"errors"
	"io"
	"net/http"

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

// ListMultipart answers as the listing SetMultipartListing chose (ListAllUploads
// by default), after the rules' faults.
func (s *Store) ListMultipart(ctx context.Context, opts storage.ListMultipartOptions) (storage.MultipartPage, error) {
	m, err := s.innerMultipart(OpListMultipart, opts.Prefix)
	return through(ctx, s, cmp.Or(pageError(OpListMultipart, opts.Prefix, opts.Limit), err), OpListMultipart, opts.Prefix, nil, nil, nil,
		func() (storage.MultipartPage, error) {
			switch s.multipartListing() {
			case ListUploadsUnsupported:
				return storage.MultipartPage{}, injected(OpListMultipart, opts.Prefix, storage.CodeUnavailable, http.StatusNotImplemented,
					"multipart listing unsupported", "ListMultipartUploads not implemented")
			case ListExactKeyUploads:
				page, err := m.ListMultipart(ctx, opts)
				return exactKeyPage(opts.Prefix, page), err
			}
			return m.ListMultipart(ctx, opts)
		})
}

// MultipartListing is which uploads ListMultipart lists, to emulate servers
// whose listing of uploads is narrower than S3's on any backend.
type MultipartListing int

const (
	// ListAllUploads lists every upload whose key starts with the prefix (S3's
	// ListMultipartUploads, versitygw, localfs, memstore).
	ListAllUploads MultipartListing = iota
	// ListExactKeyUploads lists uploads, for a prefix, only when it is one
	// exact key, and only that key's (MinIO): any other prefix answers an empty
	// page. An empty prefix still lists every upload, as on MinIO.
	ListExactKeyUploads
	// ListUploadsUnsupported answers every listing as a server without
	// ListMultipartUploads does: HTTP 501, CodeUnavailable, nothing listed.
	ListUploadsUnsupported
)

// SetMultipartListing chooses how ListMultipart answers from now on.
func (s *Store) SetMultipartListing(l MultipartListing) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listing = l
}

func (s *Store) multipartListing() MultipartListing {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listing
}

// exactKeyPage keeps the uploads of page whose key is prefix (all of them for
// no prefix). Uploads list in key order and no other key starting with prefix
// sorts before it, so once the page's last upload is of another key no upload
// of prefix follows.
func exactKeyPage(prefix string, page storage.MultipartPage) storage.MultipartPage {
	if prefix == "" {
		return page
	}
	var out storage.MultipartPage
	for _, u := range page.Uploads {
		if u.Key == prefix {
			out.Uploads = append(out.Uploads, u)
		}
	}
	n := len(page.Uploads)
	out.Truncated = page.Truncated && n > 0 && page.Uploads[n-1].Key == prefix
	return out
}
