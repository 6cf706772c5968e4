// Package testenv gives integration tests real servers: versitygw and MinIO
// (S3) and the Temporal CLI dev server, each started once per test binary on
// first use and stopped when the binary's tests end. Packages that use it declare
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
//
// so every process a test starts is stopped, pass or fail.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/graftworks/graft/internal/devstack"
)

var (
	mu       sync.Mutex // guards everything below
	stops    []func()
	tmpDirs  []string
	versity  = sync.OnceValues(startVersity)
	minio    = sync.OnceValues(startMinIO)
	temporal = sync.OnceValues(startTemporal)
)

// Main runs the package's tests, then stops every server they started.
func Main(m *testing.M) {
	code := m.Run()
	StopAll()
	os.Exit(code)
}

// StopAll stops every server started through this package.
func StopAll() {
	mu.Lock()
	defer mu.Unlock()
	for i := len(stops) - 1; i >= 0; i-- {
		stops[i]()
	}
	stops = nil
	for _, d := range tmpDirs {
		os.RemoveAll(d)
	}
	tmpDirs = nil
	versity, minio, temporal = sync.OnceValues(startVersity), sync.OnceValues(startMinIO), sync.OnceValues(startTemporal)
}

// shared returns the server start gives, which starts it on first use.
func shared[T any](t testing.TB, what string, start func() (T, error)) T {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	s, err := start()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return s
}

// S3Server is a running S3-compatible server.
type S3Server struct {
	*devstack.S3Server
	// dir is the server's data directory, which holds each bucket as a
	// directory of the bucket's name.
	dir string
}

// VersityGW returns the binary's shared versitygw server, starting it on first use.
func VersityGW(t testing.TB) *S3Server {
	t.Helper()
	return shared(t, "versitygw", versity)
}

func startVersity() (*S3Server, error) {
	return startS3("versitygw", 10*time.Minute, func(ctx context.Context, dir string) (*devstack.S3Server, error) {
		gw, err := devstack.StartVersityGW(ctx, devstack.VersityOptions{Dir: dir})
		if err != nil {
			return nil, err
		}
		return &gw.S3Server, nil
	})
}

// MinIO returns the binary's shared MinIO server, starting it on first use.
func MinIO(t testing.TB) *S3Server {
	t.Helper()
	return shared(t, "minio", minio)
}

func startMinIO() (*S3Server, error) {
	return startS3("minio", 30*time.Minute, func(ctx context.Context, dir string) (*devstack.S3Server, error) {
		return devstack.StartMinIO(ctx, devstack.MinIOOptions{Dir: dir})
	})
}

// startS3 starts an S3 server with start on a temporary data directory,
// giving it up to timeout (it may build the server cold).
func startS3(name string, timeout time.Duration, start func(context.Context, string) (*devstack.S3Server, error)) (*S3Server, error) {
	dir, err := os.MkdirTemp("", "graft-"+name+"-")
	if err != nil {
		return nil, err
	}
	tmpDirs = append(tmpDirs, dir)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	s, err := start(ctx, dir)
	if err != nil {
		return nil, err
	}
	stops = append(stops, func() { s.Stop(5 * time.Second) })
	return &S3Server{S3Server: s, dir: dir}, nil
}

// NewBucket creates a fresh, empty bucket for one test and removes it, with
// whatever is left in it, when the test ends.
func (s *S3Server) NewBucket(t testing.TB) string {
	t.Helper()
	var b [6]byte
	rand.Read(b[:])
	name := "graft-" + sanitize(t.Name()) + "-" + hex.EncodeToString(b[:]) // at most 49 bytes
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := devstack.CreateBucket(ctx, s.Endpoint, s.Region, s.AccessKey, s.SecretKey, name); err != nil {
		t.Fatalf("create bucket %s: %v", name, err)
	}
	// versitygw's posix backend keeps a bucket, objects and uploads, as a
	// directory; MinIO keeps a bucket's objects in one too (its incomplete
	// uploads stay elsewhere in its directory, removed when the server stops).
	t.Cleanup(func() { os.RemoveAll(filepath.Join(s.dir, name)) })
	return name
}

func sanitize(s string) string {
	out := strings.Trim(strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, strings.ToLower(s)), "-")
	if len(out) > 30 {
		out = out[len(out)-30:]
	}
	return strings.Trim(out, "-")
}

// TemporalServer is a running Temporal dev server.
type TemporalServer = devstack.Temporal

// Temporal returns the binary's shared Temporal dev server (headless, with
// graft's search attributes registered), starting it on first use.
func Temporal(t testing.TB) *TemporalServer {
	t.Helper()
	return shared(t, "temporal dev server", temporal)
}

func startTemporal() (*TemporalServer, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute) // may build it cold
	defer cancel()
	ts, err := devstack.StartTemporal(ctx, devstack.TemporalOptions{Headless: true})
	if err != nil {
		return nil, err
	}
	stops = append(stops, func() { ts.Stop(10 * time.Second) })
	return ts, nil
}
