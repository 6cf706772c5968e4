package localfs

import (
	"crypto/md5"
	"crypto/rand"
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

// etagXattr caches a file's ETag with the size and mtime it was computed
// for: `"<md5>" <size> <mtime ns>`.
const etagXattr = "user.graft.etag"

// openObject opens the regular file at path for reading, following no final
// symlink and not blocking on a FIFO.
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

// statObject returns the metadata of the object at path, with the cached ETag
// when still valid if cached is set; a compare-and-swap decides on the bytes
// really there, so it hashes them.
func statObject(path, key string, cached bool) (storage.ObjectInfo, error) {
	f, fi, err := openObject(path)
	if err != nil {
		return storage.ObjectInfo{}, err
	}
	defer f.Close()
	info := storage.ObjectInfo{Key: key, Size: fi.Size(), LastModified: fi.ModTime()}
	if etag, ok := cachedETag(f, fi); ok && cached {
		info.ETag = etag
		return info, nil
	}
	h := md5.New()
	if _, err := io.Copy(h, f); err != nil {
		return storage.ObjectInfo{}, fmt.Errorf("hash object: %w", err)
	}
	info.ETag = storage.QuoteSum(h.Sum(nil))
	return info, nil
}

// cacheETag records etag on f for fi's size and mtime; without user extended
// attributes readers hash the file instead.
func cacheETag(f *os.File, fi fs.FileInfo, etag string) {
	value := etag + " " + stamp(fi)
	_ = withFd(f, func(fd int) error { return unix.Fsetxattr(fd, etagXattr, []byte(value), 0) })
}

// cachedETag returns the ETag cached on f if recorded for its size and mtime now.
func cachedETag(f *os.File, fi fs.FileInfo) (string, bool) {
	var buf [128]byte
	var n int
	err := withFd(f, func(fd int) (err error) {
		n, err = unix.Fgetxattr(fd, etagXattr, buf[:])
		return err
	})
	if err != nil {
		return "", false
	}
	etag, rest, ok := strings.Cut(string(buf[:n]), " ")
	if !ok || etag == "" || rest != stamp(fi) {
		return "", false
	}
	return etag, true
}

// stamp is the size and mtime an ETag is cached with.
func stamp(fi fs.FileInfo) string {
	return strconv.FormatInt(fi.Size(), 10) + " " + strconv.FormatInt(fi.ModTime().UnixNano(), 10)
}

// createTemp creates a new, empty temp file in dir whose name List skips.
func createTemp(dir string) (*os.File, error) {
	return os.OpenFile(filepath.Join(dir, tempPrefix+rand.Text()), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
}

// syncDir fsyncs a directory so that entries added or removed survive a crash.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOTSUP) {
		err = nil // a file system that cannot fsync a directory orders metadata itself
	}
	if closeErr := d.Close(); err == nil {
		err = closeErr
	}
	return err
}

// lock takes the lock of key: this process's mutex for the key's stripe, then
// an exclusive flock(2) on the stripe's lock file; the func returned releases both.
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
	// Opened without O_CREAT first: an open that may create takes its directory's lock,
	// which every put of every goroutine would contend for.
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if isNotExist(err) {
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	}
	if isNotExist(err) {
		// Lock files hold no state: recreating a removed directory is enough.
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
