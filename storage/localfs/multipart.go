package localfs

import (
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/graftworks/graft/storage"
)

// Multipart uploads live under <dir>/.graft-uploads/<upload id>/: a file
// "upload.json" naming the key and the start time, and one file per part,
// "part-<number>". Like every name beginning with ".graft-" they are never
// listed as objects. CompleteMultipart concatenates the parts into a temp
// file next to the key's file and links it into place under the key's lock,
// exactly as a put-if-absent does, so it is atomic across processes; the
// object's ETag is then the MD5 of all its bytes, like any other object of
// this store (the store's ETag is always a function of the bytes).

const (
	uploadsDirName = reservedPrefix + "uploads"
	uploadMetaName = "upload.json"
	partPrefix     = "part-"
)

// localMultipartLimits: no minimum part size (S3's 5 MiB exists for its own
// reasons); S3's part count and size bounds, so code tested here keeps to them.
var localMultipartLimits = storage.MultipartLimits{MinPartSize: 0, MaxPartSize: storage.S3MultipartLimits.MaxPartSize, MaxParts: storage.S3MultipartLimits.MaxParts}

var _ storage.Multipart = (*Store)(nil)

type uploadMeta struct {
	Key       string `json:"key"`
	Initiated string `json:"initiated"` // RFC 3339 with nanoseconds
}

// MultipartLimits implements storage.Multipart.
func (s *Store) MultipartLimits() storage.MultipartLimits { return localMultipartLimits }

func (s *Store) uploadDir(id string) string {
	return filepath.Join(s.root, uploadsDirName, id)
}

// validUploadID reports whether id has the shape CreateMultipart makes (32
// lower-case hex digits), so it can never name a path outside the uploads
// directory.
func validUploadID(id string) bool {
	if len(id) != 32 {
		return false
	}
	_, err := hex.DecodeString(id)
	return err == nil && strings.ToLower(id) == id
}

func (s *Store) checkMultipartKey(op, key string) error {
	if err := validate(op, key); err != nil {
		return err
	}
	if isReserved(key) {
		return newError(op, key, storage.CodeRefused, fmt.Errorf("a segment begins with %q, reserved by the local store", reservedPrefix))
	}
	return nil
}

// CreateMultipart implements storage.Multipart.
func (s *Store) CreateMultipart(ctx context.Context, key string) (string, error) {
	const op = "create_multipart"
	if err := ctx.Err(); err != nil {
		return "", newError(op, key, storage.CodeAmbiguous, err)
	}
	if err := s.checkMultipartKey(op, key); err != nil {
		return "", err
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	dir := s.uploadDir(id)
	if err := s.ensureDir(dir); err != nil {
		return "", newError(op, key, storage.CodeRefused, fmt.Errorf("create upload directory: %w", err))
	}
	meta, _ := json.Marshal(uploadMeta{Key: key, Initiated: time.Now().UTC().Format(time.RFC3339Nano)})
	if err := writeFileDurable(dir, uploadMetaName, meta); err != nil {
		os.RemoveAll(dir)
		return "", newError(op, key, storage.CodeRefused, fmt.Errorf("write upload record: %w", err))
	}
	return id, nil
}

// readUpload returns the key an upload is for, or an error that is not-found
// when the upload does not exist.
func (s *Store) readUpload(id string) (uploadMeta, error) {
	if !validUploadID(id) {
		return uploadMeta{}, fs.ErrNotExist
	}
	b, err := os.ReadFile(filepath.Join(s.uploadDir(id), uploadMetaName))
	if err != nil {
		return uploadMeta{}, err
	}
	var m uploadMeta
	if err := json.Unmarshal(b, &m); err != nil {
		return uploadMeta{}, fmt.Errorf("upload record of %s: %w", id, err)
	}
	return m, nil
}

// uploadFor checks that upload id exists and is an upload of key.
func (s *Store) uploadFor(op, key, id string) (uploadMeta, error) {
	m, err := s.readUpload(id)
	if isNotExist(err) {
		return m, newError(op, key, storage.CodeNotFound, fmt.Errorf("no upload %q", id))
	}
	if err != nil {
		return m, newError(op, key, storage.CodeUnavailable, err)
	}
	if m.Key != key {
		return m, newError(op, key, storage.CodeNotFound, fmt.Errorf("upload %q is of another key", id))
	}
	return m, nil
}

// UploadPart implements storage.Multipart.
func (s *Store) UploadPart(ctx context.Context, key, uploadID string, number int, body io.ReadSeeker, size int64) (storage.Part, error) {
	const op = "upload_part"
	if err := ctx.Err(); err != nil {
		return storage.Part{}, newError(op, key, storage.CodeAmbiguous, err)
	}
	if err := s.checkMultipartKey(op, key); err != nil {
		return storage.Part{}, err
	}
	if number < 1 || number > localMultipartLimits.MaxParts {
		return storage.Part{}, newError(op, key, storage.CodeInvalidArgument, fmt.Errorf("part number %d outside 1..%d", number, localMultipartLimits.MaxParts))
	}
	if size < 0 || size > localMultipartLimits.MaxPartSize {
		return storage.Part{}, newError(op, key, storage.CodeInvalidArgument, fmt.Errorf("part size %d outside 0..%d", size, localMultipartLimits.MaxPartSize))
	}
	if _, err := s.uploadFor(op, key, uploadID); err != nil {
		return storage.Part{}, err
	}
	if _, err := body.Seek(0, io.SeekStart); err != nil {
		return storage.Part{}, newError(op, key, storage.CodeRefused, fmt.Errorf("seek part body: %w", err))
	}
	dir := s.uploadDir(uploadID)
	f, err := createTemp(dir)
	if err != nil {
		if isNotExist(err) {
			return storage.Part{}, newError(op, key, storage.CodeNotFound, fmt.Errorf("no upload %q", uploadID))
		}
		return storage.Part{}, newError(op, key, storage.CodeRefused, fmt.Errorf("create part file: %w", err))
	}
	tmp := f.Name()
	h := md5.New()
	n, err := io.Copy(io.MultiWriter(f, h), io.LimitReader(body, size))
	if err == nil && n != size {
		err = fmt.Errorf("body has %d bytes, not %d", n, size)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return storage.Part{}, newError(op, key, storage.CodeRefused, fmt.Errorf("write part: %w", err))
	}
	unlock, err := s.lock(uploadsDirName + "/" + uploadID)
	if err != nil {
		os.Remove(tmp)
		return storage.Part{}, newError(op, key, storage.CodeRefused, err)
	}
	defer unlock()
	if _, err := s.readUpload(uploadID); err != nil {
		os.Remove(tmp) // aborted meanwhile
		return storage.Part{}, newError(op, key, storage.CodeNotFound, fmt.Errorf("no upload %q", uploadID))
	}
	if err := os.Rename(tmp, filepath.Join(dir, partName(number))); err != nil {
		os.Remove(tmp)
		return storage.Part{}, newError(op, key, commitErrorCode(err), fmt.Errorf("move part into place: %w", err))
	}
	if err := syncDir(dir); err != nil {
		return storage.Part{}, newError(op, key, storage.CodeAmbiguous, fmt.Errorf("sync upload directory: %w", err))
	}
	return storage.Part{Number: number, ETag: `"` + hex.EncodeToString(h.Sum(nil)) + `"`, Size: size}, nil
}

func partName(number int) string { return fmt.Sprintf("%s%05d", partPrefix, number) }

// CompleteMultipart implements storage.Multipart.
func (s *Store) CompleteMultipart(ctx context.Context, key, uploadID string, parts []storage.Part) (storage.PutResult, error) {
	const op = "complete_multipart"
	if err := ctx.Err(); err != nil {
		return storage.PutResult{}, newError(op, key, storage.CodeAmbiguous, err)
	}
	if err := s.checkMultipartKey(op, key); err != nil {
		return storage.PutResult{}, err
	}
	if err := storage.CheckParts(parts, localMultipartLimits); err != nil {
		return storage.PutResult{}, newError(op, key, storage.CodeInvalidArgument, err)
	}
	// Assemble under the upload's lock, so an abort cannot remove parts
	// while they are read; publish under the key's lock (never both at once).
	tmpPath, etag, err := s.assemble(op, key, uploadID, parts)
	if err != nil {
		return storage.PutResult{}, err
	}
	defer os.Remove(tmpPath)
	unlock, err := s.lock(key)
	if err != nil {
		return storage.PutResult{}, newError(op, key, storage.CodeRefused, err)
	}
	path := s.path(key)
	if err := checkCondition(path, storage.PutOptions{IfNoneMatch: true}); err != nil {
		unlock()
		return storage.PutResult{}, classifyPutCondition(op, key, err)
	}
	err = os.Link(tmpPath, path)
	if isLinkUnsupported(err) {
		err = os.Rename(tmpPath, path)
	}
	if errors.Is(err, fs.ErrExist) {
		unlock()
		return storage.PutResult{}, newError(op, key, storage.CodePreconditionFailed, fmt.Errorf("%w: key exists, If-None-Match *", errConditionFailed))
	}
	if err != nil {
		unlock()
		return storage.PutResult{}, newError(op, key, commitErrorCode(err), fmt.Errorf("move object into place: %w", err))
	}
	syncErr := syncDir(filepath.Dir(path))
	unlock()
	// The object is published: the upload is done. Removing its directory is
	// best-effort; a leftover one lists as incomplete and its abort is a no-op
	// for the object.
	s.removeUpload(uploadID)
	if syncErr != nil {
		return storage.PutResult{}, newError(op, key, storage.CodeAmbiguous, fmt.Errorf("sync directory after commit: %w", syncErr))
	}
	return storage.PutResult{ETag: etag}, nil
}

// assemble checks the parts of an upload against the listed ones and
// concatenates them into a new temp file in the key's directory.
func (s *Store) assemble(op, key, uploadID string, parts []storage.Part) (string, string, error) {
	unlock, err := s.lock(uploadsDirName + "/" + uploadID)
	if err != nil {
		return "", "", newError(op, key, storage.CodeRefused, err)
	}
	defer unlock()
	if _, err := s.uploadFor(op, key, uploadID); err != nil {
		return "", "", err
	}
	dir := filepath.Dir(s.path(key))
	var out *os.File
	for attempt := 0; ; attempt++ {
		err = s.ensureDir(dir)
		if err == nil {
			out, err = createTemp(dir)
		}
		if err == nil {
			break
		}
		if isNotExist(err) && attempt < maxDirRetries {
			continue
		}
		return "", "", newError(op, key, storage.CodeRefused, fmt.Errorf("create object file: %w", err))
	}
	tmp := out.Name()
	fail := func(code storage.Code, err error) (string, string, error) {
		out.Close()
		os.Remove(tmp)
		return "", "", newError(op, key, code, err)
	}
	whole := md5.New()
	for _, p := range parts {
		f, err := os.Open(filepath.Join(s.uploadDir(uploadID), partName(p.Number)))
		if err != nil {
			return fail(storage.CodeRefused, fmt.Errorf("part %d was not uploaded", p.Number))
		}
		h := md5.New()
		n, err := io.Copy(io.MultiWriter(out, whole, h), f)
		f.Close()
		if err != nil {
			return fail(storage.CodeRefused, fmt.Errorf("copy part %d: %w", p.Number, err))
		}
		if n != p.Size || `"`+hex.EncodeToString(h.Sum(nil))+`"` != p.ETag {
			return fail(storage.CodeRefused, fmt.Errorf("part %d holds other bytes than the ETag %s names", p.Number, p.ETag))
		}
	}
	etag := `"` + hex.EncodeToString(whole.Sum(nil)) + `"`
	if fi, err := out.Stat(); err == nil {
		cacheETag(out, fi, etag)
	}
	if err := out.Sync(); err != nil {
		return fail(storage.CodeRefused, fmt.Errorf("sync object file: %w", err))
	}
	if err := out.Close(); err != nil {
		os.Remove(tmp)
		return "", "", newError(op, key, storage.CodeRefused, fmt.Errorf("close object file: %w", err))
	}
	return tmp, etag, nil
}

// removeUpload deletes an upload's directory under its lock.
func (s *Store) removeUpload(id string) error {
	unlock, err := s.lock(uploadsDirName + "/" + id)
	if err != nil {
		return err
	}
	defer unlock()
	dir := s.uploadDir(id)
	// Remove the record first: an upload without one no longer exists, even
	// if removing its parts is cut short.
	if err := os.Remove(filepath.Join(dir, uploadMetaName)); err != nil && !isNotExist(err) {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return syncDir(filepath.Join(s.root, uploadsDirName))
}

// AbortMultipart implements storage.Multipart.
func (s *Store) AbortMultipart(ctx context.Context, key, uploadID string) error {
	const op = "abort_multipart"
	if err := ctx.Err(); err != nil {
		return newError(op, key, storage.CodeAmbiguous, err)
	}
	if err := s.checkMultipartKey(op, key); err != nil {
		return err
	}
	if _, err := s.uploadFor(op, key, uploadID); err != nil {
		if storage.CodeOf(err) == storage.CodeNotFound {
			return nil
		}
		return err
	}
	if err := s.removeUpload(uploadID); err != nil {
		return newError(op, key, storage.CodeAmbiguous, fmt.Errorf("remove upload: %w", err))
	}
	return nil
}

// ListMultipart implements storage.Multipart. It reads every upload record,
// so it costs one file read per incomplete upload in the store.
func (s *Store) ListMultipart(ctx context.Context, opts storage.ListMultipartOptions) (storage.MultipartPage, error) {
	const op = "list_multipart"
	if err := ctx.Err(); err != nil {
		return storage.MultipartPage{}, newError(op, opts.Prefix, storage.CodeUnavailable, err)
	}
	limit := opts.Limit
	if limit == 0 {
		limit = 1000
	}
	if limit < 1 || limit > 1000 {
		return storage.MultipartPage{}, newError(op, opts.Prefix, storage.CodeInvalidArgument, fmt.Errorf("limit %d not in 1..1000", opts.Limit))
	}
	entries, err := os.ReadDir(filepath.Join(s.root, uploadsDirName))
	if isNotExist(err) {
		return storage.MultipartPage{}, nil
	}
	if err != nil {
		return storage.MultipartPage{}, newError(op, opts.Prefix, storage.CodeUnavailable, err)
	}
	var all []storage.Upload
	for _, e := range entries {
		if !e.IsDir() || !validUploadID(e.Name()) {
			continue
		}
		m, err := s.readUpload(e.Name())
		if err != nil {
			continue // removed meanwhile, or half-created: not an upload
		}
		if !strings.HasPrefix(m.Key, opts.Prefix) {
			continue
		}
		if opts.KeyMarker != "" && (m.Key < opts.KeyMarker || m.Key == opts.KeyMarker && e.Name() <= opts.UploadIDMarker) {
			continue
		}
		started, _ := time.Parse(time.RFC3339Nano, m.Initiated)
		all = append(all, storage.Upload{Key: m.Key, UploadID: e.Name(), Initiated: started})
	}
	slices.SortFunc(all, func(a, b storage.Upload) int {
		if c := strings.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		return strings.Compare(a.UploadID, b.UploadID)
	})
	page := storage.MultipartPage{Uploads: all}
	if len(all) > limit {
		page.Uploads, page.Truncated = all[:limit], true
	}
	return page, nil
}

// writeFileDurable writes name in dir through a temp file and a rename, and
// fsyncs both.
func writeFileDurable(dir, name string, body []byte) error {
	f, err := createTemp(dir)
	if err != nil {
		return err
	}
	tmp := f.Name()
	if _, err := f.Write(body); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(dir)
}
