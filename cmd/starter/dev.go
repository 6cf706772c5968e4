package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/graftworks/graft/cmd/internal/conncfg"
	"github.com/graftworks/graft/cmd/internal/workercmd"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/devstack"
	"github.com/graftworks/graft/internal/tools"
	"github.com/graftworks/graft/migrations"
)

// Default ports of `graft dev`: the Temporal CLI's own, so other tools find
// the server where they expect it, and the worker's metrics port.
const (
	defaultDevPort        = 7233
	defaultDevUIPort      = 8233
	defaultDevMetricsPort = 9464
	// devDirName holds the dev stack's own state inside the store directory;
	// the local store never lists names beginning with ".graft-".
	devDirName = ".graft-dev"
	// readyTimeout bounds waiting for the in-process worker to poll.
	readyTimeout = time.Minute
)

type devOptions struct {
	port, uiPort, metricsPort int
	devDir                    string
	noProfile                 bool
}

// devStarted is what `graft dev` prints once the stack is up (one JSON object
// with -o json).
type devStarted struct {
	TemporalAddress string `json:"temporal_address"`
	Namespace       string `json:"namespace"`
	TaskQueue       string `json:"task_queue"`
	UI              string `json:"ui"`
	Store           string `json:"store"`
	Database        string `json:"database"`
	DBSchema        string `json:"db_schema"`
	Metrics         string `json:"metrics"`
	DevDir          string `json:"dev_dir"`
	// Profile is the settings file written for this stack, "" when none was.
	Profile    string `json:"profile,omitempty"`
	TryCommand string `json:"try"`
}

func (a *app) devCommand() *cobra.Command {
	var o devOptions
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run the whole local stack: Temporal with its Web UI, the ledger, and a worker on a local directory",
		Long: `dev starts graft's local stack in one process and keeps it running until
Ctrl-C or SIGTERM, then stops everything:

  - the Temporal dev server with its Web UI, graft's search attributes
    registered, its state kept in --dev-dir so it survives a restart;
  - the ledger's migrations applied to $DATABASE_URL (--db-schema);
  - a graft worker in this process on the store (--store-dir, ./.graft-data
    by default; the --s3-* flags select S3 instead).

Temporal listens on 7233 and the UI on 8233 unless those are taken, then on
free ports (--port and --ui-port insist on a port). The first run builds the
Temporal CLI into the module's .bin/ (or $GRAFT_BIN_DIR), which takes minutes.
dev prints the UI address and a first command to try, and writes the
stack's settings — Temporal's address, the store's absolute path, the
ledger's database and --db-schema — to the profile other graft commands read
when no flag or variable says otherwise ($GRAFT_CONFIG, by default
~/.config/graft/config.json; --no-profile skips it), so they find this
stack from any directory.`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.runDev(cmd, o)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.port, "port", 0, "Temporal frontend port (default 7233, or a free port when taken)")
	f.IntVar(&o.uiPort, "ui-port", 0, "Temporal Web UI port (default 8233, or a free port when taken)")
	f.IntVar(&o.metricsPort, "metrics-port", 0, "worker /metrics and /healthz port (default 9464, or a free port when taken)")
	f.StringVar(&o.devDir, "dev-dir", "", "Temporal's database and the stack's logs (default <store-dir>/"+devDirName+")")
	f.BoolVar(&o.noProfile, "no-profile", false, "do not write the profile ($"+conncfg.EnvProfile+", default ~/.config/graft/config.json) that points other graft commands at this stack")
	return cmd
}

func (a *app) runDev(cmd *cobra.Command, o devOptions) error {
	ctx := cmd.Context()
	stderr := cmd.ErrOrStderr()
	// The stack's state: --dev-dir, else inside the local store's directory.
	devDir := o.devDir
	if devDir == "" && a.cfg.S3.Bucket == "" {
		devDir = filepath.Join(a.cfg.StoreDir, devDirName)
	}
	devDir, err := filepath.Abs(cmp.Or(devDir, devDirName))
	if err != nil {
		return fmt.Errorf("resolve --dev-dir: %w", err)
	}
	if err := os.MkdirAll(devDir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", devDir, err)
	}

	// The ledger first: it is the quickest dependency to find missing.
	if _, err := migrations.Apply(ctx, a.cfg.DatabaseURL, a.cfg.DBSchema); err != nil {
		if errors.Is(err, catalog.ErrUnavailable) {
			return unavailable(err, "start Postgres at %s, or point $DATABASE_URL at one", catalog.RedactURL(a.cfg.DatabaseURL))
		}
		return err // migrations' errors name the step and the database
	}

	// The pinned tools build outside a checkout of graft too: with no go.mod
	// above the working directory and no $GRAFT_BIN_DIR, under the dev
	// directory. The tools package reads its location from the environment only.
	if _, err := tools.BinDir(); err != nil {
		if err := os.Setenv("GRAFT_BIN_DIR", filepath.Join(devDir, "bin")); err != nil {
			return fmt.Errorf("set GRAFT_BIN_DIR: %w", err)
		}
	}
	if bin, err := tools.Temporal.Path(); err == nil {
		if _, err := os.Stat(bin); err != nil {
			fmt.Fprintf(stderr, "graft dev: building the Temporal CLI %s into %s; a first build takes several minutes\n",
				tools.Temporal.Version, filepath.Dir(bin))
		}
	}
	var ports [3]int
	for i, p := range [3][2]int{{o.port, defaultDevPort}, {o.uiPort, defaultDevUIPort}, {o.metricsPort, defaultDevMetricsPort}} {
		if ports[i], err = pickPort(p[0], p[1]); err != nil {
			return err
		}
	}
	port, uiPort, metricsPort := ports[0], ports[1], ports[2]
	if metricsPort == 0 {
		if metricsPort, err = devstack.FreePort(); err != nil {
			return fmt.Errorf("find a port for metrics: %w", err)
		}
	}
	// A default port found free is a preference: taken between the check and the
	// start, the server starts on free ports. A port the operator named is insisted on.
	ts, err := devstack.StartTemporal(ctx, devstack.TemporalOptions{Port: o.port, UIPort: o.uiPort, PreferredPort: port, PreferredUIPort: uiPort,
		DBFile:    filepath.Join(devDir, "temporal.db"),
		Namespace: a.cfg.Namespace,
		LogFile:   filepath.Join(devDir, "temporal.log"),
	})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return withNext(fmt.Errorf("start the Temporal dev server: %w", err),
			"read %s; a port may be taken (--port, --ui-port)", filepath.Join(devDir, "temporal.log"))
	}
	defer ts.Stop(10 * time.Second)

	// The worker runs on the invocation's store, ledger and Temporal settings,
	// TLS off: it dials the dev stack's own Temporal, which speaks plain TCP.
	wcfg := workercmd.DefaultConfig()
	wcfg.Settings, wcfg.TLS = a.cfg.Settings, conncfg.TLSFiles{}
	wcfg.TemporalAddress = ts.HostPort
	wcfg.Namespace = ts.Namespace
	wcfg.Migrate = false // applied above
	wcfg.MetricsAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(metricsPort))
	logFile, err := os.OpenFile(filepath.Join(devDir, "worker.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open worker log: %w", err)
	}
	defer logFile.Close()
	wctx, stopWorker := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWorker()
	workerDone := make(chan error, 1)
	go func() {
		workerDone <- workercmd.Run(wctx, wcfg, workercmd.NewLogger(logFile, wcfg.LogLevel), nil)
	}()
	if err := waitHealthy(ctx, "http://"+wcfg.MetricsAddr+"/healthz", workerDone); err != nil {
		stopWorker()
		return withNext(fmt.Errorf("start the worker: %w", err), "read %s", logFile.Name())
	}

	info := devStarted{
		TemporalAddress: ts.HostPort, Namespace: ts.Namespace, TaskQueue: a.cfg.TaskQueue,
		UI: ts.UIAddress, Store: a.cfg.DescribeStore(),
		Database: catalog.RedactURL(a.cfg.DatabaseURL), DBSchema: a.cfg.DBSchema,
		Metrics: "http://" + wcfg.MetricsAddr + "/metrics", DevDir: devDir,
		TryCommand: a.tryCommand(ts.HostPort),
	}
	if !o.noProfile {
		if path := conncfg.DefaultProfilePath(a.lookup); path != "" {
			if err := conncfg.WriteProfile(path, a.profileValues(ts.HostPort, ts.Namespace)); err != nil {
				fmt.Fprintf(stderr, "graft dev: %v; other commands need this stack's flags: %s\n", err, info.TryCommand)
			} else {
				info.Profile, info.TryCommand = path, "graft graph init demo"
			}
		}
	}
	if err := a.emit(cmd, info, func(w io.Writer) error { return printDevBanner(w, info) }); err != nil {
		return err
	}

	var runErr error
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
wait:
	for {
		select {
		case <-ctx.Done():
			fmt.Fprintln(stderr, "graft dev: stopping: waiting for running activities, then Temporal")
			break wait
		case err := <-workerDone:
			runErr = fmt.Errorf("the worker stopped: %w", cmp.Or(err, errors.New("no error given")))
			workerDone <- nil
			break wait
		case <-tick.C:
			if ts.Exited() {
				runErr = withNext(errors.New("the Temporal dev server exited"), "read %s", filepath.Join(devDir, "temporal.log"))
				break wait
			}
		}
	}
	stopWorker()
	if err := <-workerDone; err != nil && runErr == nil {
		runErr = fmt.Errorf("stop the worker: %w", err)
	}
	ts.Stop(10 * time.Second)
	if runErr == nil {
		fmt.Fprintln(stderr, "graft dev: stopped")
	}
	return runErr
}

// pickPort returns the port asked for, else def when it is free, else 0 (the
// starter picks a free one).
func pickPort(asked, def int) (int, error) {
	if asked < 0 || asked > 65535 {
		return 0, usageError{fmt.Errorf("port %d out of range", asked)}
	}
	if asked != 0 {
		return asked, nil
	}
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(def)))
	if err != nil {
		return 0, nil
	}
	l.Close()
	return def, nil
}

// waitHealthy polls the worker's health endpoint until it answers 200, the
// worker returns, or readyTimeout passes.
func waitHealthy(ctx context.Context, url string, workerDone chan error) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	hc := &http.Client{Timeout: 2 * time.Second}
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := hc.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-workerDone:
			workerDone <- err
			return cmp.Or(err, errors.New("the worker stopped before it was ready"))
		case <-ctx.Done():
			return fmt.Errorf("not polling after %s: %w", readyTimeout, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// tryCommand is a first command against this stack, with the flags it needs
// when no profile points at it and the stack is not on the defaults.
func (a *app) tryCommand(hostPort string) string {
	args := []string{"graft"}
	if hostPort != conncfg.DefaultTemporalAddress {
		args = append(args, "--temporal-address", hostPort)
	}
	if a.cfg.S3.Bucket == "" && a.cfg.StoreDir != conncfg.DefaultStoreDir {
		args = append(args, "--store-dir", a.storeDir())
	}
	if a.cfg.DBSchema != "" {
		args = append(args, "--db-schema", a.cfg.DBSchema)
	}
	return strings.Join(append(args, "graph", "init", "demo"), " ")
}

func (a *app) profileValues(hostPort, namespace string) map[string]string {
	v := map[string]string{
		conncfg.FlagTemporalAddress: hostPort,
		conncfg.FlagNamespace:       namespace,
		conncfg.FlagTaskQueue:       a.cfg.TaskQueue,
		conncfg.FlagDBSchema:        a.cfg.DBSchema,
		conncfg.ProfileDatabaseURL:  a.cfg.DatabaseURL,
	}
	if a.cfg.S3.Bucket == "" {
		v[conncfg.FlagStoreDir] = a.storeDir()
	} else {
		maps.Copy(v, map[string]string{conncfg.FlagS3Bucket: a.cfg.S3.Bucket, conncfg.FlagS3Endpoint: a.cfg.S3.Endpoint,
			conncfg.FlagS3Prefix: a.cfg.S3.Prefix, conncfg.FlagS3Region: a.cfg.S3.Region})
	}
	if a.cfg.S3.PathStyle {
		v[conncfg.FlagS3PathStyle] = "true"
	}
	maps.DeleteFunc(v, func(_, val string) bool { return val == "" })
	return v
}

func printDevBanner(w io.Writer, d devStarted) error {
	schema, profile := cmp.Or(d.DBSchema, "(default)"), ""
	if d.Profile != "" {
		profile = "  profile    " + d.Profile + " (graft commands in any directory use this stack)\n"
	}
	_, err := fmt.Fprintf(w, `graft dev is running; Ctrl-C stops everything.
  Temporal   %s (namespace %s, task queue %s)
  Web UI     %s
  store      %s
  ledger     %s (schema %s)
  metrics    %s
  logs       %s
%s
Try, in another shell:
  %s
`, d.TemporalAddress, d.Namespace, d.TaskQueue, d.UI, d.Store, d.Database, schema, d.Metrics, d.DevDir, profile, d.TryCommand)
	return err
}
