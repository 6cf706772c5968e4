package storage

import (
	"context"
	"fmt"
	"io"
	"time"
)

// Multipart is the optional multipart-upload interface of a Store, for data
// objects too large for one Put. A backend that has it says so through
// AsMultipart; the conformance suite in storage/storagetest proves it.
//
// The contract, in addition to the Store's:
//
//   - CreateMultipart starts an upload of key and returns its id. Nothing is
//     visible at key until CompleteMultipart succeeds. An upload that is never
//     completed stays listed by ListMultipart (and keeps its parts' storage)
//     until AbortMultipart: callers abort on failure, and a collector aborts
//     what a crashed caller left.
//   - UploadPart stores part number 1..MaxParts of an upload. Uploading the
//     same number again replaces that part, so a re-issued part is harmless.
//     Every part but the last must be at least MinPartSize bytes; that is
//     checked by CompleteMultipart.
//   - CompleteMultipart assembles the listed parts, in ascending number, at
//     key with put-if-absent: if key already holds an object it fails with
//     ErrPreconditionFailed and leaves the upload in place (abort it). An
//     upload id that does not exist (aborted, or already completed) is
//     ErrNotFound — except that some servers (versitygw) answer a repeated
//     complete of a completed upload with success again. An unknown outcome
//     is ErrAmbiguous: settle it by Head of key (the size tells) and
//     ListMultipart (a completed upload is gone).
//   - AbortMultipart discards an upload and its parts; an upload that does not
//     exist is not an error (aborts are idempotent).
//   - ListMultipart lists incomplete uploads whose key starts with a prefix,
//     in ascending (key, upload id) order, with the time each was started.
//   - Errors are *Error values with the same codes as the Store's: a write
//     whose effect is unknown is ErrAmbiguous, a read that got no answer
//     ErrUnavailable, a definite refusal ErrRefused.
type Multipart interface {
	// MultipartLimits reports the backend's rules for parts.
	MultipartLimits() MultipartLimits
	// CreateMultipart starts an upload of key and returns its id.
	CreateMultipart(ctx context.Context, key string) (uploadID string, err error)
	// UploadPart stores part number (1..MaxParts) of the upload: size bytes
	// read from body, which is read from its start (re-sending a part after
	// an ambiguous answer seeks body back to 0).
	UploadPart(ctx context.Context, key, uploadID string, number int, body io.ReadSeeker, size int64) (Part, error)
	// CompleteMultipart assembles parts (ascending by number, each as
	// UploadPart returned it) at key with put-if-absent.
	CompleteMultipart(ctx context.Context, key, uploadID string, parts []Part) (PutResult, error)
	// AbortMultipart discards an upload; a missing upload is not an error.
	AbortMultipart(ctx context.Context, key, uploadID string) error
	// ListMultipart returns one page of incomplete uploads.
	ListMultipart(ctx context.Context, opts ListMultipartOptions) (MultipartPage, error)
}

// MultipartLimits are a backend's rules for multipart uploads.
type MultipartLimits struct {
	// MinPartSize is the least size of every part but the last (S3: 5 MiB).
	MinPartSize int64
	// MaxPartSize is the largest part (S3: 5 GiB).
	MaxPartSize int64
	// MaxParts is the highest part number (S3: 10,000).
	MaxParts int
}

// S3MultipartLimits are Amazon S3's limits, which versitygw enforces too.
var S3MultipartLimits = MultipartLimits{MinPartSize: 5 << 20, MaxPartSize: 5 << 30, MaxParts: 10000}

// MaxObjectSize is the largest data object graft writes (5 TiB, S3's limit).
const MaxObjectSize = 5 << 40

// Part is one uploaded part of a multipart upload.
type Part struct {
	Number int
	// ETag is what the backend answered for the part; CompleteMultipart
	// checks it.
	ETag string
	Size int64
}

// Upload is one incomplete multipart upload.
type Upload struct {
	Key      string
	UploadID string
	// Initiated is when CreateMultipart started it.
	Initiated time.Time
}

// ListMultipartOptions select one page of ListMultipart.
type ListMultipartOptions struct {
	// Prefix restricts the listing to uploads of keys that start with it.
	Prefix string
	// KeyMarker and UploadIDMarker continue a listing after the upload
	// (KeyMarker, UploadIDMarker), as the last page's last upload named.
	KeyMarker, UploadIDMarker string
	// Limit is the page size, 1..1000. Defaults to 1000.
	Limit int
}

// MultipartPage is one page of ListMultipart.
type MultipartPage struct {
	Uploads []Upload
	// Truncated reports that more uploads may follow the last one returned.
	Truncated bool
}

// multipartSupport is implemented by stores (such as wrappers) whose
// Multipart methods exist but work only when something they wrap has them.
type multipartSupport interface {
	SupportsMultipart() bool
}

// AsMultipart returns s's multipart interface, or false when s has none.
func AsMultipart(s Store) (Multipart, bool) {
	m, ok := s.(Multipart)
	if !ok {
		return nil, false
	}
	if sup, ok := s.(multipartSupport); ok && !sup.SupportsMultipart() {
		return nil, false
	}
	return m, true
}

// ListAllMultipart calls fn for every incomplete upload under prefix, page by page.
func ListAllMultipart(ctx context.Context, m Multipart, prefix string, fn func(Upload) error) error {
	opts := ListMultipartOptions{Prefix: prefix}
	for {
		page, err := m.ListMultipart(ctx, opts)
		if err != nil {
			return err
		}
		for _, u := range page.Uploads {
			if err := fn(u); err != nil {
				return err
			}
		}
		if !page.Truncated || len(page.Uploads) == 0 {
			return nil
		}
		last := page.Uploads[len(page.Uploads)-1]
		opts.KeyMarker, opts.UploadIDMarker = last.Key, last.UploadID
	}
}

// CheckParts validates a CompleteMultipart part list against limits: at
// least one part, numbers strictly ascending within 1..MaxParts, every part
// but the last at least MinPartSize. It is the check every backend makes
// before assembling, so all of them refuse the same lists.
func CheckParts(parts []Part, limits MultipartLimits) error {
	if len(parts) == 0 {
		return fmt.Errorf("no parts")
	}
	for i, p := range parts {
		if p.Number < 1 || (limits.MaxParts > 0 && p.Number > limits.MaxParts) {
			return fmt.Errorf("part number %d outside 1..%d", p.Number, limits.MaxParts)
		}
		if i > 0 && parts[i-1].Number >= p.Number {
			return fmt.Errorf("part numbers not strictly ascending at %d", p.Number)
		}
		if i < len(parts)-1 && p.Size < limits.MinPartSize {
			return fmt.Errorf("part %d is %d bytes, below the minimum %d", p.Number, p.Size, limits.MinPartSize)
		}
	}
	return nil
}
