package prodtier

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	sdkclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	sdklog "go.temporal.io/sdk/log"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/catalog/catalogtest"
	"github.com/graftworks/graft/internal/devstack"
	"github.com/graftworks/graft/internal/searchattr"
	"github.com/graftworks/graft/internal/testenv"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/s3"
	"github.com/graftworks/graft/workflows"
)

func TestMain(m *testing.M) {
	code := m.Run()
	stopShared()
	testenv.StopAll()
	os.Exit(code)
}

// The binary's shared pieces: one Temporal server on databases of its own,
// and one graft-worker build. Tests in this package do not run in parallel:
// the server-restart scenario restarts the shared server.
var (
	sharedMu   sync.Mutex
	server     *TemporalServer
	serverOpts TemporalServerOptions
	serverErr  error
	serverDir  string
	workerBin  string
	workerErr  error
	sharedTemp []string
)

func stopShared() {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if server != nil {
		server.Stop(30 * time.Second)
		server = nil
	}
	if serverOpts.Database != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		if err := DropTemporalDatabases(ctx, serverOpts); err != nil {
			fmt.Fprintln(os.Stderr, "prodtier:", err)
		}
		cancel()
		serverOpts = TemporalServerOptions{}
	}
	for _, d := range sharedTemp {
		os.RemoveAll(d)
	}
	sharedTemp = nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// sharedServer returns the binary's Temporal server, creating its databases
// and starting it on first use, configured as docker-compose.yml configures
// its temporal service.
func sharedServer(t testing.TB) *TemporalServer {
	t.Helper()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if server == nil && serverErr == nil {
		server, serverErr = startServer(t)
	}
	if serverErr != nil {
		t.Fatalf("temporal server: %v", serverErr)
	}
	return server
}

func startServer(t testing.TB) (*TemporalServer, error) {
	env, dc := loadCompose(t).temporalConfig(t)
	dir, err := os.MkdirTemp("", "graft-prodtier-temporal-")
	if err != nil {
		return nil, err
	}
	sharedTemp = append(sharedTemp, dir)
	serverDir = dir
	db := "graft_prodtier_" + randomHex(4)
	o := TemporalServerOptions{
		Dir: dir, Database: db, VisibilityDatabase: db + "_visibility",
		Env: env, DynamicConfig: dc, Namespace: "default",
		LogFile: filepath.Join(dir, "temporal-server.log"),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute) // may build the server cold
	defer cancel()
	if err := CreateTemporalDatabases(ctx, o); err != nil {
		_ = DropTemporalDatabases(ctx, o) // whatever part was made
		return nil, err
	}
	serverOpts = o
	return StartTemporalServer(ctx, o)
}

// graftWorkerBinary builds cmd/worker once per test binary.
func graftWorkerBinary(t testing.TB) string {
	t.Helper()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if workerBin == "" && workerErr == nil {
		dir, err := os.MkdirTemp("", "graft-prodtier-bin-")
		if err != nil {
			t.Fatal(err)
		}
		sharedTemp = append(sharedTemp, dir)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		workerBin, workerErr = devstack.BuildGraftWorker(ctx, dir)
	}
	if workerErr != nil {
		t.Fatalf("build graft-worker: %v", workerErr)
	}
	return workerBin
}

// stack is one test's production-shaped graft: the shared server, a fresh
// bucket on versitygw, a fresh ledger schema migrated by `graft-worker
// migrate`, and graft-worker processes on a task queue of the test's own,
// each reaching the bucket through its own fault front.
type stack struct {
	t         testing.TB
	ctx       context.Context
	srv       *TemporalServer
	store     storage.Store // the bucket, straight to versitygw
	cat       *catalog.Catalog
	tc        sdkclient.Client
	gc        *client.Client
	taskQueue string
	workers   []*devstack.GraftWorker
	fronts    []*s3Front
	logs      []string
	env       []string
}

// stackOptions shape a stack.
type stackOptions struct {
	// Workers is how many graft-worker processes run. Required.
	Workers int
	// Limit bounds the stack's context. Required.
	Limit time.Duration
	// Direct points the workers straight at versitygw, without fault fronts
	// (for measurements). Defaults to false.
	Direct bool
}

// newStack starts a stack. Its context ends with the test or after o.Limit.
func newStack(t testing.TB, o stackOptions) *stack {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), o.Limit)
	t.Cleanup(cancel)
	srv := sharedServer(t)
	bin := graftWorkerBinary(t)
	gw := testenv.VersityGW(t)
	bucket := gw.NewBucket(t)
	schema := catalogtest.NewSchema(t)
	st := &stack{t: t, ctx: ctx, srv: srv, taskQueue: "graft-prod-" + randomHex(4)}

	var err error
	st.store, err = s3.New(ctx, s3.Config{Endpoint: gw.Endpoint, Region: gw.Region, Bucket: bucket, PathStyle: true,
		AccessKeyID: gw.AccessKey, SecretAccessKey: gw.SecretKey})
	if err != nil {
		t.Fatalf("s3 store: %v", err)
	}

	// The worker's environment is docker-compose.yml's worker service, with
	// the addresses of this stack.
	env := loadCompose(t).env(t, "worker")
	for k, v := range map[string]string{
		"GRAFT_TEMPORAL_ADDRESS": srv.HostPort, "GRAFT_NAMESPACE": srv.Namespace, "GRAFT_TASK_QUEUE": st.taskQueue,
		"GRAFT_S3_BUCKET": bucket, "AWS_ACCESS_KEY_ID": gw.AccessKey, "AWS_SECRET_ACCESS_KEY": gw.SecretKey,
		"DATABASE_URL": catalogtest.DatabaseURL(), "GRAFT_DB_SCHEMA": schema,
	} {
		env[k] = v
	}
	delete(env, "GRAFT_METRICS_ADDR") // the harness picks a free port
	delete(env, "GRAFT_S3_ENDPOINT")  // each worker's own, below
	for k, v := range env {
		st.env = append(st.env, k+"="+v)
	}

	// The ledger's migrations, by the binary's one-shot command, as compose's migrate service runs them.
	mig := exec.CommandContext(ctx, bin, "migrate")
	mig.Env = append(os.Environ(), st.env...)
	if out, err := mig.CombinedOutput(); err != nil {
		t.Fatalf("graft-worker migrate: %v\n%s", err, out)
	}
	st.cat, err = catalog.Open(ctx, catalog.Config{DatabaseURL: catalogtest.DatabaseURL(), Schema: schema})
	if err != nil {
		t.Fatalf("open ledger: %v", err)
	}
	t.Cleanup(st.cat.Close)

	st.tc, err = sdkclient.DialContext(ctx, sdkclient.Options{HostPort: srv.HostPort, Namespace: srv.Namespace,
		Logger: sdklog.NewStructuredLogger(discardLogger())})
	if err != nil {
		t.Fatalf("dial temporal: %v", err)
	}
	t.Cleanup(st.tc.Close)
	st.gc = client.New(st.tc, client.Options{TaskQueue: st.taskQueue, PollInterval: 200 * time.Millisecond})

	logDir := t.TempDir()
	for i := range o.Workers {
		endpoint := gw.Endpoint
		if !o.Direct {
			front := newS3Front(t, gw.Endpoint, bucket)
			st.fronts = append(st.fronts, front)
			endpoint = front.URL
		}
		log := filepath.Join(logDir, fmt.Sprintf("worker-%d.log", i))
		st.logs = append(st.logs, log)
		w, err := devstack.StartGraftWorker(ctx, devstack.GraftWorkerOptions{
			Binary: bin, Env: append(append([]string(nil), st.env...), "GRAFT_S3_ENDPOINT="+endpoint), LogFile: log,
		})
		if err != nil {
			t.Fatalf("start worker %d: %v", i, err)
		}
		st.workers = append(st.workers, w)
	}
	t.Cleanup(func() {
		for i, w := range st.workers {
			if w.Process != nil && !w.Exited() {
				if err := w.Terminate(45 * time.Second); err != nil {
					t.Errorf("worker %d after SIGTERM: %v, want exit 0", i, err)
				}
			}
		}
		if t.Failed() {
			st.dumpLogs()
		}
	})
	return st
}

// dumpLogs prints the tail of every worker's log and the server's.
func (st *stack) dumpLogs() {
	for i, l := range st.logs {
		st.t.Logf("worker %d log (tail):\n%s", i, tail(l, 40))
	}
	st.t.Logf("temporal-server log (tail):\n%s", tail(filepath.Join(serverDir, "temporal-server.log"), 40))
}

func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		if len(line) > 600 {
			line = line[:600] + "…"
		}
		lines = append(lines, line)
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// initGraph makes a graph with one table on main, through the workers.
func (st *stack) initGraph(prefix string) string {
	st.t.Helper()
	g := prefix + randomHex(3)
	if _, err := st.gc.InitGraph(st.ctx, client.InitGraphRequest{Graph: g}); err != nil {
		st.t.Fatalf("init graph %s: %v", g, err)
	}
	st.writeTable(g, "main", "events", 2)
	return g
}

// writeTable writes a version of table on branch from n small CSV files.
func (st *stack) writeTable(g, branch, table string, n int) workflows.WriteTableResult {
	st.t.Helper()
	dir := st.t.TempDir()
	var files []string
	for i := range n {
		f := filepath.Join(dir, fmt.Sprintf("part-%d.csv", i))
		if err := os.WriteFile(f, []byte(fmt.Sprintf("id,value\n%d,%s\n", i, randomHex(4))), 0o644); err != nil {
			st.t.Fatal(err)
		}
		files = append(files, f)
	}
	res, err := st.gc.WriteTable(st.ctx, st.store, client.WriteTableRequest{Graph: g, Branch: branch, Table: table, Files: files})
	if err != nil {
		st.t.Fatalf("write %s on %s/%s: %v", table, g, branch, err)
	}
	return res
}

// listWorkflows answers a visibility query, every page.
func (st *stack) listWorkflows(query string) ([]*workflowExecution, error) {
	var out []*workflowExecution
	var token []byte
	for {
		resp, err := st.tc.ListWorkflow(st.ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, NextPageToken: token})
		if err != nil {
			return nil, err
		}
		for _, e := range resp.GetExecutions() {
			x := &workflowExecution{ID: e.GetExecution().GetWorkflowId(), RunID: e.GetExecution().GetRunId(),
				Type: e.GetType().GetName(), Status: e.GetStatus()}
			if p := e.GetSearchAttributes().GetIndexedFields()[searchattr.OutcomeName]; p != nil {
				if err := converter.GetDefaultDataConverter().FromPayload(p, &x.Outcome); err != nil {
					return nil, fmt.Errorf("%s of %s: %w", searchattr.OutcomeName, x.ID, err)
				}
			}
			out = append(out, x)
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return out, nil
		}
	}
}

type workflowExecution struct {
	ID, RunID, Type string
	Status          enumspb.WorkflowExecutionStatus
	Outcome         string // GraftOutcome, "" when unset
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// waitVisible polls a visibility query until it lists want executions
// (visibility trails the workflows by a little) and returns them.
func (st *stack) waitVisible(query string, want int) []*workflowExecution {
	st.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		got, err := st.listWorkflows(query)
		if err == nil && len(got) == want {
			return got
		}
		if time.Now().After(deadline) {
			st.t.Fatalf("visibility %s: %d executions (%v), want %d", query, len(got), err, want)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// metric sums a counter's samples on one worker's /metrics.
func metric(ctx context.Context, w *devstack.GraftWorker, name string) (float64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+w.MetricsAddr+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %q: %w", name, line, err)
		}
		sum += v
	}
	return sum, sc.Err()
}

// healthy reports whether a worker's /healthz answers 200.
func healthy(ctx context.Context, w *devstack.GraftWorker) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+w.MetricsAddr+"/healthz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return errors.New(resp.Status)
	}
	return nil
}
