package service

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/jackc/pgx/v5"
	sdkclient "go.temporal.io/sdk/client"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
)

// This test uses nothing of graft but its public packages and its binary: a
// service in another module sees graft exactly so.

const (
	accessKey = "graft-example"
	secretKey = "graft-example-secret"
	bucket    = "features"
)

// repoRoot is the graft checkout this module's replace directive points at.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// tool is a pinned tool's binary, built by `go run ./cmd/buildtools`
// (./scripts/test.sh does) into $GRAFT_BIN_DIR or the checkout's .bin/.
func tool(t *testing.T, name, version string) (path, binDir string) {
	t.Helper()
	binDir = os.Getenv("GRAFT_BIN_DIR")
	if binDir == "" {
		binDir = filepath.Join(repoRoot(t), ".bin")
	}
	path = filepath.Join(binDir, name+"-"+version, name)
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%s is not built (%v): run `go run ./cmd/buildtools` in %s first", name, err, repoRoot(t))
	}
	return path, binDir
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// stop ends a process started by the test, SIGTERM first.
func stop(t *testing.T, cmd *exec.Cmd, done <-chan error) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Errorf("%s did not stop within 60s of SIGTERM", cmd.Path)
	}
}

// startVersityGW runs the pinned S3 server on a free port with one bucket.
func startVersityGW(t *testing.T) string {
	t.Helper()
	bin, _ := tool(t, "versitygw", "v1.8.0")
	endpoint := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	cmd := exec.Command(bin, "--port", strings.TrimPrefix(endpoint, "http://"), "posix", t.TempDir())
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+accessKey, "ROOT_SECRET_KEY="+secretKey)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { stop(t, cmd, done) })
	for deadline := time.Now().Add(30 * time.Second); ; {
		if resp, err := http.Get(endpoint); err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("versitygw at %s did not answer", endpoint)
		}
		time.Sleep(100 * time.Millisecond)
	}
	s3 := awss3.New(awss3.Options{BaseEndpoint: aws.String(endpoint), Region: "us-east-1", UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(accessKey, secretKey, "")})
	if _, err := s3.CreateBucket(context.Background(), &awss3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatalf("create bucket: %v", err)
	}
	return endpoint
}

// flakyProxy stands between graft and the S3 server. While failing is set it
// answers 500, applying nothing, to every PUT of a key containing match: the
// answer every S3 client must treat as "may or may not have been applied".
type flakyProxy struct {
	*httptest.Server
	match   string
	failing atomic.Bool
	failed  atomic.Int64
}

func newFlakyProxy(t *testing.T, target, match string) *flakyProxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &flakyProxy{match: match}
	rp := httputil.NewSingleHostReverseProxy(u) // keeps the signed Host header
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p.failing.Load() && r.Method == http.MethodPut && strings.Contains(r.URL.Path, p.match) {
			_, _ = io.Copy(io.Discard, r.Body)
			p.failed.Add(1)
			w.Header().Set("Content-Type", "application/xml")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>InternalError</Code><Message>injected</Message></Error>`)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

// freshSchema creates an empty Postgres schema for the ledger and drops it after the test.
func freshSchema(t *testing.T, databaseURL string) string {
	t.Helper()
	var b [5]byte
	_, _ = rand.Read(b[:])
	schema := "graft_example_" + hex.EncodeToString(b[:])
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		t.Fatalf("connect to Postgres: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(ctx, databaseURL)
		if err != nil {
			return
		}
		defer conn.Close(ctx)
		_, _ = conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE")
	})
	return schema
}

// devInfo is what `graft dev -o json` prints once the stack is up.
type devInfo struct {
	TemporalAddress string `json:"temporal_address"`
	Namespace       string `json:"namespace"`
	TaskQueue       string `json:"task_queue"`
}

// startGraftDev builds the graft binary from the checkout and runs `graft
// dev` on store endpoint (S3) and ledger schema, until the test ends.
func startGraftDev(t *testing.T, endpoint, databaseURL, schema string) devInfo {
	t.Helper()
	_, binDir := tool(t, "temporal", "v1.5.1")
	bin := filepath.Join(t.TempDir(), "graft")
	if out, err := exec.Command("go", "build", "-C", repoRoot(t), "-o", bin, "./cmd/starter").CombinedOutput(); err != nil {
		t.Fatalf("build graft: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "dev", "-o", "json", "--no-profile", "--dev-dir", t.TempDir(),
		"--port", fmt.Sprint(freePort(t)), "--ui-port", fmt.Sprint(freePort(t)), "--metrics-port", fmt.Sprint(freePort(t)),
		"--s3-endpoint", endpoint, "--s3-bucket", bucket, "--s3-path-style", "--db-schema", schema)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+databaseURL, "GRAFT_BIN_DIR="+binDir, "GRAFT_CONFIG=",
		"AWS_ACCESS_KEY_ID="+accessKey, "AWS_SECRET_ACCESS_KEY="+secretKey, "AWS_REGION=us-east-1")
	cmd.Dir = t.TempDir()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready, done := make(chan error, 1), make(chan error, 1)
	var info devInfo
	go func() {
		ready <- json.NewDecoder(stdout).Decode(&info)
		_, _ = io.Copy(io.Discard, stdout)
		done <- cmd.Wait()
	}()
	t.Cleanup(func() { stop(t, cmd, done) })
	select {
	case err := <-ready:
		if err != nil {
			t.Fatalf("graft dev printed no ready object: %v\n%s", err, stderr.String())
		}
	case <-time.After(3 * time.Minute):
		t.Fatalf("graft dev not ready after 3 minutes:\n%s", stderr.String())
	}
	return info
}

// TestFeatures_OnARealStack_OpenConflictSettleList runs the service against
// graft dev on versitygw and Postgres: it opens a feature branch, matches the
// second open of it with errors.Is (outcome.ErrConflict), opens one whose ref
// put the S3 server keeps answering 500 to — in doubt, with an operation id —
// follows that operation through the ledger to its definitive outcome once the
// store recovers, and lists the graph's operations.
func TestFeatures_OnARealStack_OpenConflictSettleList(t *testing.T) {
	databaseURL := os.Getenv("DATABASE_URL")
	if databaseURL == "" {
		databaseURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	s3 := startVersityGW(t)
	proxy := newFlakyProxy(t, s3, "/refs/branches/feature/held.")
	schema := freshSchema(t, databaseURL)
	info := startGraftDev(t, proxy.URL, databaseURL, schema)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	tc, err := sdkclient.DialContext(ctx, sdkclient.Options{HostPort: info.TemporalAddress, Namespace: info.Namespace})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	c := client.New(tc, client.Options{TaskQueue: info.TaskQueue, PollInterval: 200 * time.Millisecond})
	ops, err := client.OpenOps(ctx, client.LedgerConfig{DatabaseURL: databaseURL, Schema: schema}, c)
	if err != nil {
		t.Fatal(err)
	}
	defer ops.Close()
	f := &Features{Client: c, Ops: ops, Graph: "shop"}

	if _, err := c.InitGraph(ctx, client.InitGraphRequest{Graph: "shop"}); err != nil {
		t.Fatalf("init graph: %v", err)
	}
	opened, err := f.Open(ctx, "cart")
	if err != nil || opened.Settling || !strings.HasPrefix(opened.Native, "feature/cart.") {
		t.Fatalf("open feature/cart: %+v, %v", opened, err)
	}
	_, err = f.Open(ctx, "cart")
	if !errors.Is(err, ErrExists) || !errors.Is(err, outcome.ErrConflict) {
		t.Fatalf("second open of feature/cart: %v; want ErrExists matching outcome.ErrConflict", err)
	}
	if _, err := f.Open(ctx, "bad name"); !errors.Is(err, outcome.ErrInvalid) {
		t.Fatalf("open of a bad name: %v; want outcome.ErrInvalid before anything is started", err)
	}

	proxy.failing.Store(true)
	held, err := f.Open(ctx, "held")
	if err != nil || !held.Settling || held.OpID == "" {
		t.Fatalf("open feature/held while its ref put fails ambiguously: %+v, %v; want settling with an op id", held, err)
	}
	if proxy.failed.Load() == 0 {
		t.Fatal("no ref put reached the failing proxy")
	}
	detail, err := ops.Detail(ctx, held.OpID)
	if err != nil || detail.State != client.OperationInDoubt || !strings.HasPrefix(detail.Native, "feature/held.") {
		t.Fatalf("the settling operation in the ledger: %+v, %v", detail, err)
	}
	proxy.failing.Store(false)
	out, err := f.Settle(ctx, held.OpID)
	if err != nil || out != outcome.Created {
		t.Fatalf("settle %s: %s, %v; want created once the store answers", held.OpID, out, err)
	}

	recent, err := f.Recent(ctx)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, op := range recent {
		if op.State != client.OperationDone {
			t.Errorf("operation %s is %s", op.ID, op.State)
		}
		kinds[op.Kind+"/"+string(op.Outcome)]++
	}
	if kinds["init_graph/done"] != 1 || kinds["create_branch/created"] != 2 || kinds["create_branch/conflict"] != 1 {
		t.Fatalf("recent operations %v; want the init, two creates and the conflict", kinds)
	}
}
