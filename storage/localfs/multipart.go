package localfs

import (
	"cmp"
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/graftworks/graft/storage"
)

// An upload lives in <dir>/.graft-uploads/<upload id>/: "upload.json" names
// the key and start time, "part-<number>" holds each part. CompleteMultipart
// concatenates the parts into a temp file and links it into place under the
// key's lock, as a put-if-absent does; the ETag is the MD5 of all the bytes.
// The lock of uploadsDirName/<upload id> serialises adding parts with
// assembling and removing them.

const (
	uploadsDirName = reservedPrefix + "uploads"
	uploadMetaName = "upload.json"
	partPrefix     = "part-"
)

var _ storage.Multipart = (*Store)(nil)

type uploadMeta struct {
	Key       string `json:"key"`
	Initiated string `json:"initiated"` // RFC 3339 with nanoseconds
}

func (s *Store) MultipartLimits() storage.MultipartLimits { return storage.LocalMultipartLimits }

func (s *Store) uploadDir(id string) string {
	return filepath.Join(s.root, uploadsDirName, id)
}

// validUploadID reports whether id is 32 lower-case hex digits, as
// CreateMultipart makes: never a path outside the uploads directory.
func validUploadID(id string) bool {
	_, err := hex.DecodeString(id)
	return len(id) == 32 && err == nil && strings.ToLower(id) == id
}

func (s *Store) CreateMultipart(ctx context.Context, key string) (string, error) {
	const op = "create_multipart"
	if err := check(ctx, op, key, true); err != nil {
		return "", err
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	dir := s.uploadDir(id)
	meta, _ := json.Marshal(uploadMeta{Key: key, Initiated: time.Now().UTC().Format(time.RFC3339Nano)})
	tmp, _, err := s.writeTemp(dir, func(w io.Writer) (string, error) {
		_, err := w.Write(meta)
		return "", err
	})
	if err == nil {
		if err = os.Rename(tmp, filepath.Join(dir, uploadMetaName)); err == nil {
			err = syncDir(dir)
		}
	}
	if err != nil {
		os.RemoveAll(dir)
		return "", newError(op, key, storage.CodeRefused, fmt.Errorf("write upload record: %w", err))
	}
	return id, nil
}

// readUpload returns an upload's record; a not-exist error when there is none.
func (s *Store) readUpload(id string) (uploadMeta, error) {
	var m uploadMeta
	if !validUploadID(id) {
		return m, fs.ErrNotExist
	}
	b, err := os.ReadFile(filepath.Join(s.uploadDir(id), uploadMetaName))
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("upload record of %s: %w", id, err)
	}
	return m, nil
}

// checkUpload checks that upload id exists and is an upload of key.
func (s *Store) checkUpload(op, key, id string) error {
	m, err := s.readUpload(id)
	switch {
	case isNotExist(err):
		return newError(op, key, storage.CodeNotFound, fmt.Errorf("no upload %q", id))
	case err != nil:
		return newError(op, key, storage.CodeUnavailable, err)
	case m.Key != key:
		return newError(op, key, storage.CodeNotFound, fmt.Errorf("upload %q is of another key", id))
	}
	return nil
}

func (s *Store) UploadPart(ctx context.Context, key, uploadID string, number int, body io.ReadSeeker, size int64) (storage.Part, error) {
	const op = "upload_part"
	if err := cmp.Or(check(ctx, op, key, true), storage.CheckPart(key, number, size, s.MultipartLimits())); err != nil {
		return storage.Part{}, err
	}
	if err := s.checkUpload(op, key, uploadID); err != nil {
		return storage.Part{}, err
	}
	if _, err := body.Seek(0, io.SeekStart); err != nil {
		return storage.Part{}, newError(op, key, storage.CodeRefused, fmt.Errorf("seek part body: %w", err))
	}
	dir := s.uploadDir(uploadID)
	// Not writeTemp: that would recreate the directory of an aborted upload.
	f, err := createTemp(dir)
	if isNotExist(err) {
		return storage.Part{}, newError(op, key, storage.CodeNotFound, fmt.Errorf("no upload %q", uploadID))
	}
	if err != nil {
		return storage.Part{}, newError(op, key, storage.CodeRefused, fmt.Errorf("create part file: %w", err))
	}
	h := md5.New()
	tmp, _, err := fillTemp(f, func(w io.Writer) (string, error) {
		n, err := io.Copy(io.MultiWriter(w, h), io.LimitReader(body, size))
		if err == nil && n != size {
			err = fmt.Errorf("body has %d bytes, not %d", n, size)
		}
		return "", err
	})
	if err != nil {
		return storage.Part{}, newError(op, key, storage.CodeRefused, fmt.Errorf("write part: %w", err))
	}
	defer os.Remove(tmp) // gone after the rename
	unlock, err := s.lock(uploadsDirName + "/" + uploadID)
	if err != nil {
		return storage.Part{}, newError(op, key, storage.CodeRefused, err)
	}
	defer unlock()
	if _, err := s.readUpload(uploadID); err != nil {
		return storage.Part{}, newError(op, key, storage.CodeNotFound, fmt.Errorf("no upload %q", uploadID)) // aborted meanwhile
	}
	if err := os.Rename(tmp, filepath.Join(dir, partName(number))); err != nil {
		return storage.Part{}, newError(op, key, commitErrorCode(err), fmt.Errorf("move part into place: %w", err))
	}
	if err := syncDir(dir); err != nil {
		return storage.Part{}, newError(op, key, storage.CodeAmbiguous, fmt.Errorf("sync upload directory: %w", err))
	}
	return storage.Part{Number: number, ETag: storage.QuoteSum(h.Sum(nil)), Size: size}, nil
}

func partName(number int) string { return fmt.Sprintf("%s%05d", partPrefix, number) }

func (s *Store) CompleteMultipart(ctx context.Context, key, uploadID string, parts []storage.Part) (storage.PutResult, error) {
	const op = "complete_multipart"
	if err := cmp.Or(check(ctx, op, key, true), storage.CheckParts(key, parts, s.MultipartLimits())); err != nil {
		return storage.PutResult{}, err
	}
	// Assemble under the upload's lock, publish under the key's; never both.
	tmp, etag, err := s.assemble(op, key, uploadID, parts)
	if err != nil {
		return storage.PutResult{}, err
	}
	defer os.Remove(tmp)
	unlock, err := s.lock(key)
	if err != nil {
		return storage.PutResult{}, newError(op, key, storage.CodeRefused, err)
	}
	path := s.path(key)
	err = checkCondition(op, key, path, storage.PutOptions{IfNoneMatch: true})
	if err == nil {
		err = place(op, key, tmp, path, true)
	}
	if err != nil {
		unlock()
		return storage.PutResult{}, err
	}
	syncErr := syncDir(filepath.Dir(path))
	unlock()
	// Published. Removing the upload is best-effort: a leftover one lists as
	// incomplete, and aborting it leaves the object alone.
	s.removeUpload(uploadID)
	if syncErr != nil {
		return storage.PutResult{}, newError(op, key, storage.CodeAmbiguous, fmt.Errorf("sync directory after commit: %w", syncErr))
	}
	return storage.PutResult{ETag: etag}, nil
}

// assemble checks an upload's parts against parts and concatenates them into
// a temp file in the key's directory.
func (s *Store) assemble(op, key, uploadID string, parts []storage.Part) (string, string, error) {
	unlock, err := s.lock(uploadsDirName + "/" + uploadID)
	if err != nil {
		return "", "", newError(op, key, storage.CodeRefused, err)
	}
	defer unlock()
	if err := s.checkUpload(op, key, uploadID); err != nil {
		return "", "", err
	}
	tmp, etag, err := s.writeTemp(filepath.Dir(s.path(key)), func(w io.Writer) (string, error) {
		whole := md5.New()
		for _, p := range parts {
			f, err := os.Open(filepath.Join(s.uploadDir(uploadID), partName(p.Number)))
			if err != nil {
				return "", fmt.Errorf("part %d was not uploaded", p.Number)
			}
			h := md5.New()
			n, err := io.Copy(io.MultiWriter(w, whole, h), f)
			f.Close()
			if err != nil {
				return "", fmt.Errorf("copy part %d: %w", p.Number, err)
			}
			if n != p.Size || storage.QuoteSum(h.Sum(nil)) != p.ETag {
				return "", fmt.Errorf("part %d holds other bytes than the ETag %s names", p.Number, p.ETag)
			}
		}
		return storage.QuoteSum(whole.Sum(nil)), nil
	})
	if err != nil {
		return "", "", newError(op, key, storage.CodeRefused, err)
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
	// The record first: without it the upload no longer exists.
	if err := os.Remove(filepath.Join(dir, uploadMetaName)); err != nil && !isNotExist(err) {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return syncDir(filepath.Join(s.root, uploadsDirName))
}

func (s *Store) AbortMultipart(ctx context.Context, key, uploadID string) error {
	const op = "abort_multipart"
	if err := check(ctx, op, key, true); err != nil {
		return err
	}
	if err := s.checkUpload(op, key, uploadID); err != nil {
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

// ListMultipart reads every upload record.
func (s *Store) ListMultipart(ctx context.Context, opts storage.ListMultipartOptions) (storage.MultipartPage, error) {
	const op = "list_multipart"
	limit, err := storage.CheckList(ctx, op, opts.Prefix, opts.Limit)
	if err != nil {
		return storage.MultipartPage{}, err
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
		if !e.IsDir() {
			continue
		}
		m, err := s.readUpload(e.Name())
		if err != nil {
			continue // removed meanwhile, half-created, or not an upload
		}
		started, _ := time.Parse(time.RFC3339Nano, m.Initiated)
		all = append(all, storage.Upload{Key: m.Key, UploadID: e.Name(), Initiated: started})
	}
	return storage.PageUploads(all, opts, limit), nil
}
