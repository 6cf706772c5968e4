package storage

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Multipart is a Store's optional multipart-upload interface, for data
// objects too large for one Put. In addition to the Store's contract:
//
//   - Nothing is visible at key until CompleteMultipart succeeds; an upload
//     never completed stays listed (with its parts' storage) until aborted.
//   - Uploading a part number again replaces that part. Every part but the
//     last must be at least MinPartSize bytes.
//   - CompleteMultipart assembles the listed parts at key with put-if-absent:
//     over an object it is ErrPreconditionFailed and leaves the upload in
//     place. An upload id aborted or completed is ErrNotFound (versitygw
//     answers a repeated complete with success, MinIO with
//     ErrPreconditionFailed, its put-if-absent seeing the object the first
//     made). An unknown outcome is ErrAmbiguous: settle it by Head of key and
//     ListMultipart.
//   - AbortMultipart of an upload that does not exist is not an error.
//   - ListMultipart lists incomplete uploads under a prefix in key order, one
//     key's uploads by upload id (the local stores) or as they started (S3
//     servers). MinIO lists them only for a prefix that is one exact key: a
//     caller that must work on every server lists one key's uploads at a time
//     (ListKeyMultipart).
type Multipart interface {
	MultipartLimits() MultipartLimits
	// CreateMultipart starts an upload of key and returns its id.
	CreateMultipart(ctx context.Context, key string) (uploadID string, err error)
	// UploadPart stores part number (1..MaxParts): size bytes of body from its start.
	UploadPart(ctx context.Context, key, uploadID string, number int, body io.ReadSeeker, size int64) (Part, error)
	// CompleteMultipart assembles parts (ascending, as UploadPart returned them) at key.
	CompleteMultipart(ctx context.Context, key, uploadID string, parts []Part) (PutResult, error)
	AbortMultipart(ctx context.Context, key, uploadID string) error
	ListMultipart(ctx context.Context, opts ListMultipartOptions) (MultipartPage, error)
}

// MultipartLimits are a backend's rules for multipart uploads.
type MultipartLimits struct {
	MinPartSize int64 // of every part but the last
	MaxPartSize int64
	MaxParts    int // the highest part number
}

// S3MultipartLimits are Amazon S3's limits, which versitygw enforces too.
var S3MultipartLimits = MultipartLimits{MinPartSize: 5 << 20, MaxPartSize: 5 << 30, MaxParts: 10000}

// LocalMultipartLimits are S3's without a minimum part size.
var LocalMultipartLimits = MultipartLimits{MaxPartSize: S3MultipartLimits.MaxPartSize, MaxParts: S3MultipartLimits.MaxParts}

// MaxObjectSize is the largest data object graft writes (5 TiB, S3's limit).
const MaxObjectSize = 5 << 40

// Part is one uploaded part of a multipart upload.
type Part struct {
	Number int
	ETag   string // the backend's answer for the part; CompleteMultipart checks it
	Size   int64
}

// Upload is one incomplete multipart upload.
type Upload struct {
	Key       string
	UploadID  string
	Initiated time.Time // when CreateMultipart started it
}

// ListMultipartOptions select one page of ListMultipart.
type ListMultipartOptions struct {
	Prefix string
	// KeyMarker and UploadIDMarker continue after the previous page's last upload.
	KeyMarker, UploadIDMarker string
	Limit                     int // 1..1000; 0 means 1000
}

// MultipartPage is one page of ListMultipart; Truncated: more may follow.
type MultipartPage struct {
	Uploads   []Upload
	Truncated bool
}

// AsMultipart returns s's multipart interface, or false when s has none (a
// wrapper says so with a SupportsMultipart method).
func AsMultipart(s Store) (Multipart, bool) {
	m, ok := s.(Multipart)
	if sup, isWrapper := s.(interface{ SupportsMultipart() bool }); ok && isWrapper && !sup.SupportsMultipart() {
		return nil, false
	}
	return m, ok
}

// ListAllMultipart calls fn for every incomplete upload under prefix, page by page.
func ListAllMultipart(ctx context.Context, m Multipart, prefix string, fn func(Upload) error) error {
	opts := ListMultipartOptions{Prefix: prefix}
	return eachPage(func() ([]Upload, bool, error) {
		page, err := m.ListMultipart(ctx, opts)
		return page.Uploads, page.Truncated, err
	}, func(last Upload) { opts.KeyMarker, opts.UploadIDMarker = last.Key, last.UploadID }, fn)
}

// ListKeyMultipart calls fn for every incomplete upload of key itself, page by
// page: those ListMultipart lists under the prefix key, less those of longer
// keys, which a server listing by prefix includes and MinIO does not.
func ListKeyMultipart(ctx context.Context, m Multipart, key string, fn func(Upload) error) error {
	return ListAllMultipart(ctx, m, key, func(u Upload) error {
		if u.Key != key {
			return nil
		}
		return fn(u)
	})
}

// CheckPart checks an UploadPart's number and size against limits.
func CheckPart(key string, number int, size int64, limits MultipartLimits) error {
	if number < 1 || number > limits.MaxParts {
		return NewError("upload_part", key, CodeInvalidArgument, fmt.Errorf("part number %d outside 1..%d", number, limits.MaxParts))
	}
	if size < 0 || size > limits.MaxPartSize {
		return NewError("upload_part", key, CodeInvalidArgument, fmt.Errorf("part size %d outside 0..%d", size, limits.MaxPartSize))
	}
	return nil
}

// CheckParts checks a CompleteMultipart part list against limits, so every
// backend refuses the same lists.
func CheckParts(key string, parts []Part, limits MultipartLimits) error {
	bad := func(format string, args ...any) error {
		return NewError("complete_multipart", key, CodeInvalidArgument, fmt.Errorf(format, args...))
	}
	if len(parts) == 0 {
		return bad("no parts")
	}
	for i, p := range parts {
		if p.Number < 1 || (limits.MaxParts > 0 && p.Number > limits.MaxParts) {
			return bad("part number %d outside 1..%d", p.Number, limits.MaxParts)
		}
		if i > 0 && parts[i-1].Number >= p.Number {
			return bad("part numbers not strictly ascending at %d", p.Number)
		}
		if i < len(parts)-1 && p.Size < limits.MinPartSize {
			return bad("part %d is %d bytes, below the minimum %d", p.Number, p.Size, limits.MinPartSize)
		}
	}
	return nil
}

// PageUploads is the ListMultipart page of uploads opts selects, for a
// backend with them all at hand.
func PageUploads(uploads []Upload, opts ListMultipartOptions, limit int) MultipartPage {
	var page MultipartPage
	for _, u := range uploads {
		if strings.HasPrefix(u.Key, opts.Prefix) && (opts.KeyMarker == "" || u.Key > opts.KeyMarker || u.Key == opts.KeyMarker && u.UploadID > opts.UploadIDMarker) {
			page.Uploads = append(page.Uploads, u)
		}
	}
	slices.SortFunc(page.Uploads, func(a, b Upload) int {
		return cmp.Or(strings.Compare(a.Key, b.Key), strings.Compare(a.UploadID, b.UploadID))
	})
	if len(page.Uploads) > limit {
		page.Uploads, page.Truncated = page.Uploads[:limit], true
	}
	return page
}
