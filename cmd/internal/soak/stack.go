package soak

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	sdkclient "go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/devstack"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/migrations"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/localfs"
	"github.com/graftworks/graft/storage/s3"
	"github.com/graftworks/graft/worker"
	"github.com/graftworks/graft/workflows"
)

// StackConfig says which stack a soak runs on. Servers left unset are started.
type StackConfig struct {
	Backend Backend
	// Dir holds the local store, versitygw's files and the child workers' logs.
	// Defaults to a fresh temporary directory.
	Dir string
	// TemporalHostPort is a running Temporal server; "" starts a dev server.
	TemporalHostPort, Namespace string
	// S3 is a running versitygw, in which a bucket is created; zero starts one.
	S3 s3.Config
	// Restartable starts the servers the stack starts itself so Restart can restart
	// them: the Temporal dev server with its state in a file, on a fixed port.
	Restartable bool
}

// Stack is the real stack schedules run on: one store, one ledger schema, one Temporal.
type Stack struct {
	cfg     StackConfig
	Inner   storage.Store
	Catalog *catalog.Catalog
	// Oracle is a second pool on the same schema for the driver's own reads, out of reach
	// of TerminateBackends.
	Oracle  *catalog.Catalog
	TC      sdkclient.Client
	schema  string
	appName string
	dbURL   string
	stops   []func()

	// quiesce is held (read) by every schedule while it sets up, quiesces and is judged;
	// Restart takes it, so restarts land only in schedules' concurrent phases.
	quiesce  sync.RWMutex
	gw       *devstack.VersityGW
	gwOpts   devstack.VersityOptions
	temporal *devstack.Temporal
	tsOpts   devstack.TemporalOptions
}

// StepKnobs lower the kernel's step timing so a stall of a few seconds is longer than
// every step timeout (docs/testing.md). The soak sets them in its own process and in
// every child worker.
func StepKnobs() {
	workflows.StepTimeout, workflows.BeforeEffectBudget, workflows.FastPathBudget = 2*time.Second, 10*time.Second, 4*time.Second
}

// StallFor is longer than every lowered step timeout.
const StallFor = 3 * time.Second

// Start brings the stack up.
func Start(ctx context.Context, cfg StackConfig) (*Stack, error) {
	st := &Stack{cfg: cfg}
	ok := false
	defer func() {
		if !ok {
			st.Close()
		}
	}()
	if cfg.Dir == "" {
		d, err := os.MkdirTemp("", "graft-soak-")
		if err != nil {
			return nil, err
		}
		st.cfg.Dir = d
		st.stops = append(st.stops, func() { os.RemoveAll(d) })
	}
	dir := st.cfg.Dir
	switch cfg.Backend {
	case LocalFS:
	case VersityGW:
		if st.cfg.S3.Endpoint == "" {
			st.gwOpts = devstack.VersityOptions{Dir: filepath.Join(dir, "versitygw")}
			if cfg.Restartable {
				port, err := devstack.FreePort()
				if err != nil {
					return nil, err
				}
				st.gwOpts.Port = port
			}
			gw, err := devstack.StartVersityGW(ctx, st.gwOpts)
			if err != nil {
				return nil, err
			}
			st.gw = gw
			st.stops = append(st.stops, func() { st.gw.Stop(5 * time.Second) })
			st.cfg.S3 = s3.Config{Endpoint: gw.Endpoint, Region: gw.Region, AccessKeyID: gw.AccessKey, SecretAccessKey: gw.SecretKey}
		}
		st.cfg.S3.PathStyle = true
		st.cfg.S3.Bucket = "graft-soak-" + nonce(6)
		c := st.cfg.S3
		if err := devstack.CreateBucket(ctx, c.Endpoint, c.Region, c.AccessKeyID, c.SecretAccessKey,
			c.Bucket); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("soak: unknown backend %q (localfs or versitygw)", cfg.Backend)
	}
	var err error
	if st.Inner, err = openStore(ctx, cfg.Backend, dir, st.cfg.S3); err != nil {
		return nil, err
	}

	st.dbURL = catalog.DefaultURL()
	st.schema = "graft_soak_" + nonce(5)
	st.appName = "graft-soak-" + nonce(5)
	if _, err := execSQL(ctx, st.dbURL, "CREATE SCHEMA "+pgx.Identifier{st.schema}.Sanitize()); err != nil {
		return nil, fmt.Errorf("create ledger schema: %w", err)
	}
	st.stops = append(st.stops, func() {
		c, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		execSQL(c, st.dbURL, "DROP SCHEMA IF EXISTS "+pgx.Identifier{st.schema}.Sanitize()+" CASCADE")
	})
	if _, err := migrations.Apply(ctx, st.dbURL, st.schema); err != nil {
		return nil, fmt.Errorf("migrate ledger: %w", err)
	}
	cat, err := catalog.Open(ctx, catalog.Config{DatabaseURL: withAppName(st.dbURL, st.appName), Schema: st.schema, MaxConns: 24})
	if err != nil {
		return nil, err
	}
	st.Catalog = cat
	st.stops = append(st.stops, cat.Close)
	ocat, err := catalog.Open(ctx, catalog.Config{DatabaseURL: withAppName(st.dbURL, st.appName+"-oracle"), Schema: st.schema, MaxConns: 8})
	if err != nil {
		return nil, err
	}
	st.Oracle = ocat
	st.stops = append(st.stops, ocat.Close)

	if st.cfg.TemporalHostPort == "" {
		st.tsOpts = devstack.TemporalOptions{Headless: true}
		if cfg.Restartable {
			port, err := devstack.FreePort()
			if err != nil {
				return nil, err
			}
			st.tsOpts.Port, st.tsOpts.DBFile = port, filepath.Join(dir, "temporal.db")
		}
		ts, err := devstack.StartTemporal(ctx, st.tsOpts)
		if err != nil {
			return nil, err
		}
		st.temporal = ts
		st.stops = append(st.stops, func() { st.temporal.Stop(10 * time.Second) })
		st.cfg.TemporalHostPort, st.cfg.Namespace = ts.HostPort, ts.Namespace
	}
	if st.cfg.Namespace == "" {
		st.cfg.Namespace = "default"
	}
	tc, err := sdkclient.DialContext(ctx, sdkclient.Options{HostPort: st.cfg.TemporalHostPort, Namespace: st.cfg.Namespace, Logger: devstack.QuietLogger})
	if err != nil {
		return nil, err
	}
	st.TC = tc
	st.stops = append(st.stops, tc.Close)
	ok = true
	return st, nil
}

// Close stops what Start started, in reverse.
func (st *Stack) Close() {
	for i := len(st.stops) - 1; i >= 0; i-- {
		st.stops[i]()
	}
	st.stops = nil
}

// Restart restarts one server the stack started itself — "versitygw" or "temporal" (its
// state kept on disk) — once no schedule is setting up or being judged, and reports
// whether it did. Schedules in their concurrent phase run on through it.
func (st *Stack) Restart(ctx context.Context, which string) (bool, error) {
	if !st.cfg.Restartable {
		return false, nil
	}
	st.quiesce.Lock()
	defer st.quiesce.Unlock()
	switch {
	case which == "versitygw" && st.gw != nil:
		st.gw.Stop(5 * time.Second)
		gw, err := devstack.StartVersityGW(ctx, st.gwOpts)
		if err != nil {
			return false, fmt.Errorf("restart versitygw: %w", err)
		}
		st.gw = gw
		return true, nil
	case which == "temporal" && st.temporal != nil:
		st.temporal.Stop(10 * time.Second)
		ts, err := devstack.StartTemporal(ctx, st.tsOpts)
		if err != nil {
			return false, fmt.Errorf("restart temporal: %w", err)
		}
		st.temporal = ts
		return true, nil
	}
	return false, nil
}

// TerminateBackends ends every Postgres backend of the stack's ledger pool
// (pg_terminate_backend), whatever transaction it is in, and returns how many.
func (st *Stack) TerminateBackends(ctx context.Context) (int64, error) {
	return execSQL(ctx, st.dbURL, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE application_name = $1 AND pid <> pg_backend_pid()`, st.appName)
}

// startWorker runs an in-process worker of a schedule and stands in for the supervisor
// that restarts a graft-worker process, which exits on a fatal worker error
// (docs/operations.md): a worker the SDK stops on a fatal error — a poll answered
// "namespace not found" by a dev server that has just restarted, once its polls have
// failed for two minutes — is replaced by a new one on the same task queue, and
// onFatal is told. stop ends whichever is running.
func (st *Stack) startWorker(taskQueue string, store storage.Store, onFatal func(error)) (stop func(), err error) {
	var (
		mu      sync.Mutex
		current sdkworker.Worker
		stopped bool
	)
	var start func() error
	start = func() error {
		// Stopping waits for the steps in flight (a stall ends within StallFor).
		acts := &activities.Activities{Store: store, Catalog: st.Catalog, Workflows: worker.TemporalWorkflows(st.TC),
			Chunks: graph.NewChunkCache(graph.DefaultChunkCacheBytes)}
		w := worker.New(st.TC, taskQueue, acts, sdkworker.Options{WorkerStopTimeout: time.Minute, OnFatalError: func(err error) {
			onFatal(err)
			go func() {
				mu.Lock()
				defer mu.Unlock()
				for !stopped {
					if start() == nil {
						return
					}
					mu.Unlock()
					time.Sleep(time.Second)
					mu.Lock()
				}
			}()
		}})
		if err := w.Start(); err != nil {
			return err
		}
		current = w
		return nil
	}
	mu.Lock()
	defer mu.Unlock()
	if err := start(); err != nil {
		return nil, err
	}
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		current.Stop()
	}, nil
}

// childEnv makes a soak binary (cmd/soak or the test binary) serve as a bare worker; it
// holds the worker's childConfig as JSON.
const childEnv = "GRAFT_SOAK_CHILD_WORKER"

type childConfig struct {
	Backend                                     Backend
	Dir, DB, Schema, Temporal, Namespace, Queue string
	S3                                          s3.Config
}

// openStore opens the stack's store: the local one in dir, or cfg's bucket.
func openStore(ctx context.Context, b Backend, dir string, cfg s3.Config) (storage.Store, error) {
	if b == LocalFS {
		s, err := localfs.Open(filepath.Join(dir, "store"))
		return s, err
	}
	return s3.New(ctx, cfg)
}

// startChild runs a worker process on taskQueue, with no faults, that the schedule can
// kill -9. Its output goes to a log file in the stack's directory.
func (st *Stack) startChild(taskQueue string) (*exec.Cmd, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cfg, err := json.Marshal(childConfig{Backend: st.cfg.Backend, Dir: st.cfg.Dir, S3: st.cfg.S3,
		DB: withAppName(st.dbURL, st.appName), Schema: st.schema, Temporal: st.cfg.TemporalHostPort,
		Namespace: st.cfg.Namespace, Queue: taskQueue})
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), childEnv+"="+string(cfg))
	logf, err := os.Create(filepath.Join(st.cfg.Dir, "child-"+strings.ReplaceAll(taskQueue, "/", "_")+".log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own descriptor
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go cmd.Wait()
	return cmd, nil
}

// MaybeChild runs a child worker and exits when the process was started as one
// (startChild); otherwise it returns at once. cmd/soak and the soak test's TestMain
// call it first.
func MaybeChild() {
	if os.Getenv(childEnv) == "" {
		return
	}
	os.Exit(runChild())
}

func runChild() int {
	StepKnobs()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	fail := func(what string, err error) int {
		fmt.Fprintf(os.Stderr, "soak child: %s: %v\n", what, err)
		return 1
	}
	var c childConfig
	if err := json.Unmarshal([]byte(os.Getenv(childEnv)), &c); err != nil {
		return fail("config", err)
	}
	store, err := openStore(ctx, c.Backend, c.Dir, c.S3)
	if err != nil {
		return fail("store", err)
	}
	cat, err := catalog.Open(ctx, catalog.Config{DatabaseURL: c.DB, Schema: c.Schema, MaxConns: 4})
	if err != nil {
		return fail("catalog", err)
	}
	defer cat.Close()
	tc, err := sdkclient.DialContext(ctx, sdkclient.Options{HostPort: c.Temporal, Namespace: c.Namespace, Logger: devstack.QuietLogger})
	if err != nil {
		return fail("temporal", err)
	}
	defer tc.Close()
	acts := &activities.Activities{Store: store, Catalog: cat, Workflows: worker.TemporalWorkflows(tc),
		Chunks: graph.NewChunkCache(graph.DefaultChunkCacheBytes)}
	w := worker.New(tc, c.Queue, acts, sdkworker.Options{})
	interrupt := make(chan any)
	go func() { <-ctx.Done(); close(interrupt) }()
	if err := w.Run(interrupt); err != nil && !errors.Is(err, context.Canceled) {
		return fail("worker", err)
	}
	return 0
}

func withAppName(dbURL, app string) string {
	u, err := url.Parse(dbURL)
	if err != nil || u.Scheme == "" {
		return dbURL + " application_name=" + app
	}
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	return u.String()
}

// execSQL runs sql on a connection of its own and returns the rows it affected (or
// selected).
func execSQL(ctx context.Context, dbURL, sql string, args ...any) (int64, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	tag, err := conn.Exec(ctx, sql, args...)
	return tag.RowsAffected(), err
}

func nonce(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
