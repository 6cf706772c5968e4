package localfs

import (
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/graftworks/graft/storage"
)

// etagXattr is the extended attribute that keeps a copy of a file's ETag,
// with the size and mtime it was computed for: `"<md5>" <size> <mtime ns>`.
const etagXattr = "user.graft.etag"

// openObject opens the regular file at path for reading without following
// a final symlink or blocking on a FIFO, and returns its metadata.
func openObject(path string) (*os.File, fs.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = errNotObject
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

// statObject returns the metadata of the object at path, reading the ETag
// from its cached copy when that is still valid and hashing the file when not.
func statObject(path, key string) (storage.ObjectInfo, error) {
	f, fi, err := openObject(path)
	if err != nil {
		return storage.ObjectInfo{}, err
	}
	defer f.Close()
	etag, ok := cachedETag(f, fi)
	if !ok {
		if etag, err = hashFile(f); err != nil {
			return storage.ObjectInfo{}, err
		}
	}
	return storage.ObjectInfo{Key: key, Size: fi.Size(), ETag: etag, LastModified: fi.ModTime()}, nil
}

// etagOnDisk hashes the bytes of the object at path, ignoring any cached
// ETag: a compare-and-swap decides on what is really there.
func etagOnDisk(path string) (string, error) {
	f, _, err := openObject(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	return hashFile(f)
}

func hashFile(f *os.File) (string, error) {
	h := md5.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash object: %w", err)
	}
	return storage.QuoteSum(h.Sum(nil)), nil
}

// cacheETag records etag on f for the size and mtime in fi. It is an
// optimisation only: on a file system without user extended attributes,
// readers hash the file instead.
func cacheETag(f *os.File, fi fs.FileInfo, etag string) {
	value := etag + " " + strconv.FormatInt(fi.Size(), 10) + " " + strconv.FormatInt(fi.ModTime().UnixNano(), 10)
	_ = withFd(f, func(fd int) error { return unix.Fsetxattr(fd, etagXattr, []byte(value), 0) })
}

// cachedETag returns the ETag recorded on f if it was recorded for the size
// and mtime f has now.
func cachedETag(f *os.File, fi fs.FileInfo) (string, bool) {
	var (
		buf [128]byte
		n   int
	)
	err := withFd(f, func(fd int) (err error) {
		n, err = unix.Fgetxattr(fd, etagXattr, buf[:])
		return err
	})
	if err != nil {
		return "", false
	}
	fields := strings.Fields(string(buf[:n]))
	if len(fields) != 3 {
		return "", false
	}
	if fields[1] != strconv.FormatInt(fi.Size(), 10) || fields[2] != strconv.FormatInt(fi.ModTime().UnixNano(), 10) {
		return "", false
	}
	return fields[0], true
}

// createTemp creates a new, empty temp file in dir whose name List skips.
func createTemp(dir string) (*os.File, error) {
	for {
		var b [16]byte
		_, _ = rand.Read(b[:])
		f, err := os.OpenFile(filepath.Join(dir, tempPrefix+hex.EncodeToString(b[:])), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, fs.ErrExist) {
			continue // a 128-bit collision; draw again
		}
		return f, err
	}
}

// syncDir fsyncs a directory so that entries just added to or removed from
// it survive a crash.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOTSUP) {
		// Some file systems cannot fsync a directory; they order
		// metadata themselves.
		err = nil
	}
	if closeErr := d.Close(); err == nil {
		err = closeErr
	}
	return err
}

// lock takes the lock of key: first this process's mutex for the key's
// stripe, then an exclusive flock(2) on the stripe's lock file, which other
// processes sharing the directory respect. The returned function releases
// both.
func (s *Store) lock(key string) (func(), error) {
	h := fnv.New32a()
	h.Write([]byte(key))
	stripe := h.Sum32() % lockStripes
	s.stripes[stripe].Lock()
	f, err := s.openLockFile(stripe)
	if err == nil {
		err = withFd(f, func(fd int) error {
			for {
				if err := unix.Flock(fd, unix.LOCK_EX); !errors.Is(err, unix.EINTR) {
					return err
				}
			}
		})
		if err != nil {
			f.Close()
			err = fmt.Errorf("lock key: %w", err)
		}
	}
	if err != nil {
		s.stripes[stripe].Unlock()
		return nil, err
	}
	return func() {
		f.Close() // closing the only descriptor releases the flock
		s.stripes[stripe].Unlock()
	}, nil
}

func (s *Store) openLockFile(stripe uint32) (*os.File, error) {
	dir := filepath.Join(s.root, lockDirName)
	path := filepath.Join(dir, fmt.Sprintf("%02x", stripe))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if isNotExist(err) {
		// Someone removed the lock directory. Lock files hold no state, so
		// recreating it is enough — unless it was removed while a write
		// held a lock, which no process of this package does.
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("create lock directory: %w", err)
		}
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	}
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	return f, nil
}

// withFd runs fn on f's descriptor.
func withFd(f *os.File, fn func(fd int) error) error {
	conn, err := f.SyscallConn()
	if err != nil {
		return err
	}
	if ctlErr := conn.Control(func(fd uintptr) { err = fn(int(fd)) }); ctlErr != nil {
		return ctlErr
	}
	return err
}
