// Package testenv gives integration tests real servers: versitygw (S3) and the
// Temporal CLI dev server, each started once per test binary on first use and
// stopped when the binary's tests end. Packages that use it declare
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
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/graftworks/graft/internal/devstack"
)

var (
	mu       sync.Mutex
	stops    []func()
	tmpDirs  []string
	versity  *S3Server
	versErr  error
	temporal *TemporalServer
	tempErr  error
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
	versity, versErr, temporal, tempErr = nil, nil, nil, nil
}

// S3Server is a running S3-compatible server.
type S3Server struct {
	Endpoint, Region, AccessKey, SecretKey string
	client                                 *awss3.Client
}

// VersityGW returns the binary's shared versitygw server, starting it on first use.
func VersityGW(t testing.TB) *S3Server {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if versity == nil && versErr == nil {
		versity, versErr = startVersity()
	}
	if versErr != nil {
		t.Fatalf("versitygw: %v", versErr)
	}
	return versity
}

func startVersity() (*S3Server, error) {
	dir, err := os.MkdirTemp("", "graft-versitygw-")
	if err != nil {
		return nil, err
	}
	tmpDirs = append(tmpDirs, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // may build it cold
	defer cancel()
	gw, err := devstack.StartVersityGW(ctx, devstack.VersityOptions{Dir: dir})
	if err != nil {
		return nil, err
	}
	stops = append(stops, func() { gw.Stop(5 * time.Second) })
	s := &S3Server{Endpoint: gw.Endpoint, Region: gw.Region, AccessKey: gw.AccessKey, SecretKey: gw.SecretKey}
	s.client = awss3.New(awss3.Options{
		BaseEndpoint: aws.String(s.Endpoint),
		Region:       s.Region,
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
	})
	return s, nil
}

// NewBucket creates a fresh, empty bucket for one test and removes it, with
// whatever is left in it, when the test ends.
func (s *S3Server) NewBucket(t testing.TB) string {
	t.Helper()
	var b [6]byte
	rand.Read(b[:])
	name := "graft-" + sanitize(t.Name()) + "-" + hex.EncodeToString(b[:])
	if len(name) > 63 {
		name = name[len(name)-63:]
		name = "g" + strings.TrimLeft(name[1:], "-.")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.client.CreateBucket(ctx, &awss3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		t.Fatalf("create bucket %s: %v", name, err)
	}
	t.Cleanup(func() { s.removeBucket(name) })
	return name
}

func (s *S3Server) removeBucket(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := awss3.NewListObjectsV2Paginator(s.client, &awss3.ListObjectsV2Input{Bucket: aws.String(name)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			break
		}
		var ids []types.ObjectIdentifier
		for _, o := range page.Contents {
			ids = append(ids, types.ObjectIdentifier{Key: o.Key})
		}
		if len(ids) > 0 {
			s.client.DeleteObjects(ctx, &awss3.DeleteObjectsInput{Bucket: aws.String(name), Delete: &types.Delete{Objects: ids, Quiet: aws.Bool(true)}})
		}
	}
	s.client.DeleteBucket(ctx, &awss3.DeleteBucketInput{Bucket: aws.String(name)})
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
type TemporalServer struct {
	HostPort, Namespace string
}

// Temporal returns the binary's shared Temporal dev server (headless, with
// graft's search attributes registered), starting it on first use.
func Temporal(t testing.TB) *TemporalServer {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if temporal == nil && tempErr == nil {
		temporal, tempErr = startTemporal()
	}
	if tempErr != nil {
		t.Fatalf("temporal dev server: %v", tempErr)
	}
	return temporal
}

func startTemporal() (*TemporalServer, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute) // may build it cold
	defer cancel()
	ts, err := devstack.StartTemporal(ctx, devstack.TemporalOptions{Headless: true})
	if err != nil {
		return nil, err
	}
	stops = append(stops, func() { ts.Stop(10 * time.Second) })
	return &TemporalServer{HostPort: ts.HostPort, Namespace: ts.Namespace}, nil
}
