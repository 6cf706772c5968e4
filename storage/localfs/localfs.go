// Package localfs is graft's embedded default storage backend: a directory on
// local disk that keeps the storage.Store contract, so graft needs no S3 server.
//
// The object at key "a/b/c.json" is the regular file <dir>/a/b/c.json. Names
// beginning ".graft-" are the store's own (lock files in .graft-locks/,
// multipart uploads in .graft-uploads/, temp files .graft-tmp-*): never
// listed, not found by reads, and refused (ErrRefused) as a key segment by writes.
//
// Invariants:
//   - Conditional writes are atomic across processes: every Put and Delete of
//     a key holds an exclusive flock(2) on one of 256 lock files, chosen by a
//     hash of the key, while it checks and commits. Put-if-absent commits with
//     link(2), which never replaces an existing file.
//   - Writes are durable and all-or-nothing: a temp file in the target's
//     directory is fsynced, linked or renamed into place, and the directory
//     fsynced — by one fsync that began after the link, which puts into the
//     same directory at once share. A crash can leave a temp file, never listed.
//   - ETag is the quoted hex MD5 of the bytes (multipart objects too);
//     LastModified is the mtime. A conditional Put hashes the bytes on disk;
//     Head and List may use an ETag cached in an extended attribute while the
//     file's size and mtime match the ones cached with it.
//   - Keys "a" and "a/b" cannot both exist; a Put that would need that is
//     ErrRefused.
//   - A write failing before its commit changed nothing (ErrRefused); one
//     whose directory fsync fails after it is ErrAmbiguous.
//   - Delete prunes parent directories left empty, never the root. List reads
//     only the directories a prefix can reach, in byte order of key, and
//     every entry of each (a huge directory pages slowly).
//   - Symbolic links and other non-regular files are not objects.
package localfs

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/graftworks/graft/storage"
)

const (
	reservedPrefix = ".graft-"
	lockDirName    = reservedPrefix + "locks"
	tempPrefix     = reservedPrefix + "tmp-"
	lockStripes    = 256
	// maxDirRetries bounds recreating a directory a concurrent Delete pruned.
	maxDirRetries = 16
)

// Store is a storage.Store kept in a local directory, safe for concurrent use
// by goroutines and by processes sharing the directory.
type Store struct {
	root string
	// stripes let only one goroutine per lock file wait in flock(2).
	stripes [lockStripes]sync.Mutex
	// dirs coalesces the directory fsyncs of puts into one directory.
	dirs dirSyncs
}

var _ storage.Store = (*Store)(nil)

var newError = storage.NewError

// Open returns the store kept in dir, creating dir if needed.
func Open(dir string) (*Store, error) {
	root, err := filepath.Abs(dir)
	if err == nil {
		err = os.MkdirAll(filepath.Join(root, lockDirName), 0o755)
	}
	if err != nil {
		return nil, fmt.Errorf("open local store %q: %w", dir, err)
	}
	return &Store{root: root}, nil
}

func (s *Store) Get(ctx context.Context, key string) (storage.Object, error) {
	const op = "get"
	if err := check(ctx, op, key, false); err != nil {
		return storage.Object{}, err
	}
	f, fi, err := openObject(s.path(key))
	if err != nil {
		return storage.Object{}, readError(op, key, err)
	}
	defer f.Close()
	var buf bytes.Buffer
	buf.Grow(int(fi.Size()) + bytes.MinRead)
	if _, err := buf.ReadFrom(f); err != nil {
		return storage.Object{}, newError(op, key, storage.CodeUnavailable, fmt.Errorf("read object: %w", err))
	}
	body := buf.Bytes()
	info := storage.ObjectInfo{Key: key, Size: int64(len(body)), ETag: storage.ETagOf(body), LastModified: fi.ModTime()}
	return storage.Object{ObjectInfo: info, Body: body}, nil
}

func (s *Store) Head(ctx context.Context, key string) (storage.ObjectInfo, error) {
	const op = "head"
	if err := check(ctx, op, key, false); err != nil {
		return storage.ObjectInfo{}, err
	}
	info, err := statObject(s.path(key), key, true)
	if err != nil {
		return storage.ObjectInfo{}, readError(op, key, err)
	}
	return info, nil
}

func (s *Store) Put(ctx context.Context, key string, body []byte, opts storage.PutOptions) (storage.PutResult, error) {
	const op = "put"
	if err := cmp.Or(check(ctx, op, key, true), storage.CheckPut(key, opts)); err != nil {
		return storage.PutResult{}, err
	}
	unlock, err := s.lock(key)
	if err != nil {
		return storage.PutResult{}, newError(op, key, storage.CodeRefused, err)
	}
	defer unlock()

	path := s.path(key)
	if err := checkCondition(op, key, path, opts); err != nil {
		return storage.PutResult{}, err
	}
	dir := filepath.Dir(path)
	tmp, etag, err := s.writeTemp(dir, func(w io.Writer) (string, error) {
		_, err := w.Write(body)
		return storage.ETagOf(body), err
	})
	if err != nil {
		return storage.PutResult{}, newError(op, key, storage.CodeRefused, err)
	}
	defer os.Remove(tmp) // gone after a rename; after a link or a failure, removed here
	if err := place(op, key, tmp, path, opts.IfNoneMatch); err != nil {
		return storage.PutResult{}, err
	}
	if err := s.dirs.sync(dir); err != nil {
		return storage.PutResult{}, newError(op, key, storage.CodeAmbiguous, fmt.Errorf("sync directory after commit: %w", err))
	}
	return storage.PutResult{ETag: etag}, nil
}

var (
	errConditionFailed = errors.New("condition not met")
	errKeyIsDirectory  = errors.New("key is a directory of other keys (keys a and a/b cannot both exist)")
)

// checkCondition evaluates opts against the object at path, under the key's lock.
func checkCondition(op, key, path string, opts storage.PutOptions) error {
	failed := func(format string, args ...any) error {
		return newError(op, key, storage.CodePreconditionFailed, fmt.Errorf("%w: "+format, append([]any{errConditionFailed}, args...)...))
	}
	refused := func(err error) error {
		return newError(op, key, storage.CodeRefused, fmt.Errorf("check condition: %w", err))
	}
	if opts.IfMatch != "" {
		current, err := statObject(path, key, false)
		switch {
		case isNotFound(err):
			return failed("key absent, If-Match %s", opts.IfMatch)
		case err != nil:
			return refused(err)
		case current.ETag != opts.IfMatch:
			return failed("ETag is %s, If-Match %s", current.ETag, opts.IfMatch)
		}
		return nil
	}
	fi, err := os.Lstat(path)
	switch {
	case isNotFound(err):
		// Absent, or an ancestor is a file: the directory step decides.
		return nil
	case err != nil:
		return refused(err)
	case fi.Mode().IsRegular():
		if opts.IfNoneMatch {
			return failed("key exists, If-None-Match *")
		}
		return nil
	case fi.IsDir():
		// An empty directory (a crash before pruning) does not block the key.
		if os.Remove(path) != nil {
			return refused(errKeyIsDirectory)
		}
		return nil
	default:
		return refused(fmt.Errorf("path is not a regular file (mode %v)", fi.Mode()))
	}
}

// place moves tmp to path under the key's lock: with link(2) when exclusive
// (put-if-absent), so an existing object is never replaced, else rename(2).
func place(op, key, tmp, path string, exclusive bool) error {
	var err error
	if exclusive {
		err = os.Link(tmp, path)
		if isLinkUnsupported(err) {
			// Still atomic against graft writers: absence was checked under the lock.
			err = os.Rename(tmp, path)
		}
		if errors.Is(err, fs.ErrExist) {
			if fi, statErr := os.Lstat(path); statErr == nil && fi.Mode().IsRegular() {
				return newError(op, key, storage.CodePreconditionFailed, fmt.Errorf("%w: key exists, If-None-Match *", errConditionFailed))
			}
			return newError(op, key, storage.CodeRefused, errKeyIsDirectory)
		}
	} else {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		return newError(op, key, commitErrorCode(err), fmt.Errorf("move object into place: %w", err))
	}
	return nil
}

// writeTemp creates a temp file in dir (creating dir) and fills it (fillTemp).
func (s *Store) writeTemp(dir string, write func(io.Writer) (string, error)) (string, string, error) {
	var f *os.File
	var err error
	for attempt := 0; ; attempt++ {
		if err = s.ensureDir(dir); err == nil {
			f, err = createTemp(dir)
		}
		// A concurrent Delete may prune dir between mkdir and create.
		if err == nil || !isNotExist(err) || attempt >= maxDirRetries {
			break
		}
	}
	if errors.Is(err, syscall.ENOTDIR) {
		return "", "", errors.New("an ancestor of the key is an object (keys a and a/b cannot both exist)")
	}
	if err != nil {
		return "", "", fmt.Errorf("create temp file: %w", err)
	}
	return fillTemp(f, write)
}

// fillTemp fills f with write, caches the ETag write returns ("" for none), makes
// f durable, and returns its path and the ETag; it removes f on failure.
func fillTemp(f *os.File, write func(io.Writer) (string, error)) (string, string, error) {
	etag, err := write(f)
	if err == nil && etag != "" {
		if fi, statErr := f.Stat(); statErr == nil {
			cacheETag(f, fi, etag)
		}
	}
	if err == nil {
		err = f.Sync()
	}
	if closeErr := f.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", "", fmt.Errorf("write temp file: %w", err)
	}
	return f.Name(), etag, nil
}

func (s *Store) Delete(ctx context.Context, key string) error {
	if err := storage.CheckRequest(ctx, "delete", key, true); err != nil {
		return err
	}
	return s.remove(ctx, "delete", []string{key})[key]
}

func (s *Store) DeleteBatch(ctx context.Context, keys []string) error {
	if err := ctx.Err(); err != nil {
		return storage.ContextError("delete_batch", "", true, err)
	}
	if err := storage.CheckBatch(keys); err != nil {
		return err
	}
	if failed := s.remove(ctx, "delete_batch", keys); len(failed) > 0 {
		return &storage.BatchError{Failed: failed}
	}
	return nil
}

// remove deletes keys, fsyncing each directory touched once, and returns the
// error of each key it could not delete.
func (s *Store) remove(ctx context.Context, op string, keys []string) map[string]error {
	failed := map[string]error{}
	removedIn := map[string][]string{} // directory → keys removed from it
	for _, key := range keys {
		if err := ctx.Err(); err != nil {
			failed[key] = storage.ContextError(op, key, true, err)
			continue
		}
		if isReserved(key) {
			continue
		}
		removed, err := s.removeOne(key)
		if err != nil {
			failed[key] = newError(op, key, commitErrorCode(err), err)
		} else if removed {
			dir := filepath.Dir(s.path(key))
			removedIn[dir] = append(removedIn[dir], key)
		}
	}
	for dir, removed := range removedIn {
		if err := s.syncRemoval(dir); err != nil {
			for _, key := range removed {
				failed[key] = newError(op, key, storage.CodeAmbiguous, fmt.Errorf("sync directory after remove: %w", err))
			}
			continue
		}
		s.prune(dir)
	}
	return failed
}

// removeOne deletes the object at key under its lock, reporting whether there was one.
func (s *Store) removeOne(key string) (bool, error) {
	unlock, err := s.lock(key)
	if err != nil {
		return false, err
	}
	defer unlock()
	path := s.path(key)
	fi, err := os.Lstat(path)
	if isNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("stat object: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return false, nil // not an object
	}
	if err := os.Remove(path); err != nil {
		if isNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("remove object: %w", err)
	}
	return true, nil
}

// syncRemoval makes a removal from dir durable; if a concurrent Delete pruned
// dir, fsyncing the nearest remaining ancestor does.
func (s *Store) syncRemoval(dir string) error {
	for {
		err := syncDir(dir)
		if !isNotExist(err) || dir == s.root {
			return err
		}
		dir = filepath.Dir(dir)
	}
}

// prune removes dir and its ancestors while empty, below the root; best-effort.
func (s *Store) prune(dir string) {
	for dir != s.root && strings.HasPrefix(dir, s.root+string(filepath.Separator)) {
		if err := os.Remove(dir); err != nil {
			return
		}
		dir = filepath.Dir(dir)
	}
}

// path is the file of a validated key, always under the root.
func (s *Store) path(key string) string {
	return filepath.Join(s.root, filepath.FromSlash(key))
}

// check does what every request on one key does first: a reserved key is not
// found by a read and refused to a write.
func check(ctx context.Context, op, key string, write bool) error {
	if err := storage.CheckRequest(ctx, op, key, write); err != nil {
		return err
	}
	if !isReserved(key) {
		return nil
	}
	code := storage.CodeNotFound
	if write {
		code = storage.CodeRefused
	}
	return newError(op, key, code, fmt.Errorf("a segment begins with %q, reserved by the local store", reservedPrefix))
}

// ensureDir makes dir and missing ancestors, fsyncing the parent of each.
func (s *Store) ensureDir(dir string) error {
	if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
		return nil
	}
	rel, err := filepath.Rel(s.root, dir)
	if err != nil {
		return err
	}
	cur := s.root
	for _, seg := range strings.Split(rel, string(filepath.Separator)) {
		next := filepath.Join(cur, seg)
		err := os.Mkdir(next, 0o755)
		switch {
		case err == nil:
			if err := syncDir(cur); err != nil {
				return fmt.Errorf("sync new directory: %w", err)
			}
		case errors.Is(err, fs.ErrExist):
			fi, err := os.Lstat(next)
			if err != nil {
				return err
			}
			if !fi.IsDir() {
				return syscall.ENOTDIR
			}
		default:
			return err
		}
		cur = next
	}
	return nil
}

// isReserved reports whether a segment of key is one of the store's own names.
func isReserved(key string) bool {
	return strings.HasPrefix(key, reservedPrefix) || strings.Contains(key, "/"+reservedPrefix)
}

var errNotObject = errors.New("not a regular file")

// readError classifies a failed read of key.
func readError(op, key string, err error) error {
	if isNotFound(err) {
		return newError(op, key, storage.CodeNotFound, err)
	}
	return newError(op, key, storage.CodeUnavailable, err)
}

func isNotExist(err error) bool {
	return errors.Is(err, fs.ErrNotExist)
}

// isNotFound reports an error meaning no object is at a key: the path is
// absent, an ancestor is a file, the name cannot exist, or not a regular file.
func isNotFound(err error) bool {
	return isNotExist(err) ||
		errors.Is(err, syscall.ENOTDIR) ||
		errors.Is(err, syscall.ENAMETOOLONG) ||
		errors.Is(err, syscall.ELOOP) ||
		errors.Is(err, errNotObject)
}

// isLinkUnsupported reports that the file system cannot make hard links.
func isLinkUnsupported(err error) bool {
	return errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.ENOTSUP) ||
		errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOSYS)
}

// commitErrorCode classifies a failed rename, link or unlink: these happen or
// not, except after an I/O error, when the state on disk is unknown.
func commitErrorCode(err error) storage.Code {
	if errors.Is(err, syscall.EIO) {
		return storage.CodeAmbiguous
	}
	return storage.CodeRefused
}
