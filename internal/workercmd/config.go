package workercmd

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/spf13/pflag"

	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/worker"
)

// Config is a resolved worker configuration. DefaultConfig gives the values the
// command line starts from; each field names its flag and environment variable.
type Config struct {
	// TemporalAddress is the Temporal frontend's host:port
	// (--temporal-address, GRAFT_TEMPORAL_ADDRESS). Defaults to 127.0.0.1:7233.
	TemporalAddress string
	// Namespace is the Temporal namespace (--namespace, GRAFT_NAMESPACE).
	// Defaults to "default".
	Namespace string
	// TLS configures TLS to Temporal. Defaults to plain TCP.
	TLS TLSFiles
	// DialTimeout bounds connecting to Temporal at start (--dial-timeout,
	// GRAFT_DIAL_TIMEOUT). Defaults to 10s.
	DialTimeout time.Duration
	// TaskQueue is the task queue polled (--task-queue, GRAFT_TASK_QUEUE).
	// Defaults to "graft".
	TaskQueue string
	// StoreDir is the local-directory store, used when S3.Bucket is ""
	// (--store-dir, GRAFT_STORE_DIR). Defaults to "./.graft-data".
	StoreDir string
	// S3 selects an S3 store when S3.Bucket is set. Defaults to none.
	S3 S3Config
	// DatabaseURL is the ledger's Postgres (DATABASE_URL only: it may carry a
	// password, which must not show in ps). Defaults to catalog.DefaultDatabaseURL.
	DatabaseURL string
	// DBSchema holds the ledger's tables (--db-schema, GRAFT_DB_SCHEMA).
	// Defaults to "", the connection's default (normally public).
	DBSchema string
	// MaxConcurrentActivities bounds activities running at once
	// (--max-concurrent-activities, GRAFT_MAX_CONCURRENT_ACTIVITIES).
	// Defaults to 0, the SDK's default (1000).
	MaxConcurrentActivities int
	// MaxConcurrentLocalActivities bounds local activities running at once
	// (--max-concurrent-local-activities, GRAFT_MAX_CONCURRENT_LOCAL_ACTIVITIES).
	// Defaults to 0, the SDK's default (1000).
	MaxConcurrentLocalActivities int
	// MaxConcurrentWorkflowTasks bounds workflow tasks running at once; 1 is
	// not allowed (--max-concurrent-workflow-tasks,
	// GRAFT_MAX_CONCURRENT_WORKFLOW_TASKS). Defaults to 0, the SDK's default (1000).
	MaxConcurrentWorkflowTasks int
	// Migrate applies the ledger's migrations before starting (--migrate,
	// GRAFT_MIGRATE). Defaults to true.
	Migrate bool
	// MetricsAddr serves /metrics and /healthz; "" disables the server
	// (--metrics-addr, GRAFT_METRICS_ADDR). Defaults to 127.0.0.1:9464.
	MetricsAddr string
	// LogLevel is the lowest level logged (--log-level, GRAFT_LOG_LEVEL).
	// Defaults to info.
	LogLevel slog.Level
	// ShutdownTimeout is how long a stopping worker waits for running
	// activities (--shutdown-timeout, GRAFT_SHUTDOWN_TIMEOUT). Defaults to 30s.
	ShutdownTimeout time.Duration
}

// TLSFiles configures TLS to Temporal. Any field set turns TLS on.
type TLSFiles struct {
	// Enabled turns TLS on with the system's roots even when no file is
	// given (--tls, GRAFT_TLS). Defaults to false.
	Enabled bool
	// CertFile and KeyFile are a PEM client certificate and its key, given
	// together (--tls-cert, GRAFT_TLS_CERT; --tls-key, GRAFT_TLS_KEY).
	// Defaults to none.
	CertFile, KeyFile string
	// CAFile is a PEM bundle of roots that replaces the system's (--tls-ca,
	// GRAFT_TLS_CA). Defaults to the system's roots.
	CAFile string
	// ServerName overrides the name checked in the server's certificate
	// (--tls-server-name, GRAFT_TLS_SERVER_NAME). Defaults to the address's host.
	ServerName string
}

// On reports whether TLS is configured at all.
func (t TLSFiles) On() bool {
	return t.Enabled || t.CertFile != "" || t.KeyFile != "" || t.CAFile != "" || t.ServerName != ""
}

// S3Config selects an S3-compatible store. Credentials are never configured
// here: the AWS SDK's standard chain supplies them.
type S3Config struct {
	// Endpoint is the S3 endpoint URL (--s3-endpoint, GRAFT_S3_ENDPOINT).
	// Defaults to "" (AWS).
	Endpoint string
	// Bucket holds every object; setting it selects S3 (--s3-bucket,
	// GRAFT_S3_BUCKET). Defaults to "" (no S3).
	Bucket string
	// Prefix is a key prefix inside the bucket, without leading or trailing
	// '/' (--s3-prefix, GRAFT_S3_PREFIX). Defaults to "".
	Prefix string
	// Region is the signing region (--s3-region, GRAFT_S3_REGION). Defaults
	// to "" (us-east-1).
	Region string
	// PathStyle addresses the bucket in the URL path (--s3-path-style,
	// GRAFT_S3_PATH_STYLE). Defaults to false.
	PathStyle bool
}

// Defaults of the command line.
const (
	DefaultTemporalAddress = "127.0.0.1:7233"
	DefaultNamespace       = "default"
	DefaultStoreDir        = "./.graft-data"
	DefaultMetricsAddr     = "127.0.0.1:9464"
	DefaultDialTimeout     = 10 * time.Second
	DefaultShutdownTimeout = 30 * time.Second
)

// DefaultConfig returns the configuration the command line starts from.
func DefaultConfig() Config {
	return Config{
		TemporalAddress: DefaultTemporalAddress,
		Namespace:       DefaultNamespace,
		DialTimeout:     DefaultDialTimeout,
		TaskQueue:       worker.DefaultTaskQueue,
		StoreDir:        DefaultStoreDir,
		DatabaseURL:     catalog.DefaultDatabaseURL,
		Migrate:         true,
		MetricsAddr:     DefaultMetricsAddr,
		LogLevel:        slog.LevelInfo,
		ShutdownTimeout: DefaultShutdownTimeout,
	}
}

// Flag names.
const (
	flagTemporalAddress  = "temporal-address"
	flagNamespace        = "namespace"
	flagTLS              = "tls"
	flagTLSCert          = "tls-cert"
	flagTLSKey           = "tls-key"
	flagTLSCA            = "tls-ca"
	flagTLSServerName    = "tls-server-name"
	flagDialTimeout      = "dial-timeout"
	flagTaskQueue        = "task-queue"
	flagStoreDir         = "store-dir"
	flagS3Endpoint       = "s3-endpoint"
	flagS3Bucket         = "s3-bucket"
	flagS3Prefix         = "s3-prefix"
	flagS3Region         = "s3-region"
	flagS3PathStyle      = "s3-path-style"
	flagDBSchema         = "db-schema"
	flagMaxActivities    = "max-concurrent-activities"
	flagMaxLocal         = "max-concurrent-local-activities"
	flagMaxWorkflowTasks = "max-concurrent-workflow-tasks"
	flagMigrate          = "migrate"
	flagMetricsAddr      = "metrics-addr"
	flagLogLevel         = "log-level"
	flagShutdownTimeout  = "shutdown-timeout"
)

// envDatabaseURL is the only source of the database URL.
const envDatabaseURL = catalog.DatabaseURLEnv

// envNames maps each flag that has an environment variable to it.
var envNames = map[string]string{
	flagTemporalAddress:  "GRAFT_TEMPORAL_ADDRESS",
	flagNamespace:        "GRAFT_NAMESPACE",
	flagTLS:              "GRAFT_TLS",
	flagTLSCert:          "GRAFT_TLS_CERT",
	flagTLSKey:           "GRAFT_TLS_KEY",
	flagTLSCA:            "GRAFT_TLS_CA",
	flagTLSServerName:    "GRAFT_TLS_SERVER_NAME",
	flagDialTimeout:      "GRAFT_DIAL_TIMEOUT",
	flagTaskQueue:        "GRAFT_TASK_QUEUE",
	flagStoreDir:         "GRAFT_STORE_DIR",
	flagS3Endpoint:       "GRAFT_S3_ENDPOINT",
	flagS3Bucket:         "GRAFT_S3_BUCKET",
	flagS3Prefix:         "GRAFT_S3_PREFIX",
	flagS3Region:         "GRAFT_S3_REGION",
	flagS3PathStyle:      "GRAFT_S3_PATH_STYLE",
	flagDBSchema:         "GRAFT_DB_SCHEMA",
	flagMaxActivities:    "GRAFT_MAX_CONCURRENT_ACTIVITIES",
	flagMaxLocal:         "GRAFT_MAX_CONCURRENT_LOCAL_ACTIVITIES",
	flagMaxWorkflowTasks: "GRAFT_MAX_CONCURRENT_WORKFLOW_TASKS",
	flagMigrate:          "GRAFT_MIGRATE",
	flagMetricsAddr:      "GRAFT_METRICS_ADDR",
	flagLogLevel:         "GRAFT_LOG_LEVEL",
	flagShutdownTimeout:  "GRAFT_SHUTDOWN_TIMEOUT",
}

// withEnv appends a flag's environment variable to its usage text.
func withEnv(flag, usage string) string {
	return usage + " [$" + envNames[flag] + "]"
}

// addCommonFlags adds the flags every command takes.
func addCommonFlags(fs *pflag.FlagSet, c *Config) {
	fs.StringVar(&c.DBSchema, flagDBSchema, c.DBSchema,
		withEnv(flagDBSchema, "Postgres schema holding the ledger's tables; empty means the connection's default (public)"))
	fs.Var((*levelValue)(&c.LogLevel), flagLogLevel,
		withEnv(flagLogLevel, "lowest level logged: debug, info, warn or error"))
}

// addRunFlags adds the flags of the run command.
func addRunFlags(fs *pflag.FlagSet, c *Config) {
	fs.StringVar(&c.TemporalAddress, flagTemporalAddress, c.TemporalAddress,
		withEnv(flagTemporalAddress, "Temporal frontend host:port"))
	fs.StringVar(&c.Namespace, flagNamespace, c.Namespace, withEnv(flagNamespace, "Temporal namespace"))
	fs.BoolVar(&c.TLS.Enabled, flagTLS, c.TLS.Enabled,
		withEnv(flagTLS, "use TLS to Temporal with the system's roots (implied by any --tls-* flag)"))
	fs.StringVar(&c.TLS.CertFile, flagTLSCert, c.TLS.CertFile,
		withEnv(flagTLSCert, "PEM client certificate for mTLS to Temporal (with --tls-key)"))
	fs.StringVar(&c.TLS.KeyFile, flagTLSKey, c.TLS.KeyFile,
		withEnv(flagTLSKey, "PEM private key of --tls-cert"))
	fs.StringVar(&c.TLS.CAFile, flagTLSCA, c.TLS.CAFile,
		withEnv(flagTLSCA, "PEM roots to verify Temporal's certificate, instead of the system's"))
	fs.StringVar(&c.TLS.ServerName, flagTLSServerName, c.TLS.ServerName,
		withEnv(flagTLSServerName, "server name expected in Temporal's certificate (default: the address's host)"))
	fs.DurationVar(&c.DialTimeout, flagDialTimeout, c.DialTimeout,
		withEnv(flagDialTimeout, "give up connecting to Temporal at start after this long"))
	fs.StringVar(&c.TaskQueue, flagTaskQueue, c.TaskQueue, withEnv(flagTaskQueue, "Temporal task queue to poll"))
	fs.StringVar(&c.StoreDir, flagStoreDir, c.StoreDir,
		withEnv(flagStoreDir, "local directory store (exclusive with --s3-*)"))
	fs.StringVar(&c.S3.Endpoint, flagS3Endpoint, c.S3.Endpoint,
		withEnv(flagS3Endpoint, "S3 endpoint URL (default: AWS); credentials come from the AWS SDK's standard chain"))
	fs.StringVar(&c.S3.Bucket, flagS3Bucket, c.S3.Bucket, withEnv(flagS3Bucket, "S3 bucket; setting it selects the S3 store"))
	fs.StringVar(&c.S3.Prefix, flagS3Prefix, c.S3.Prefix,
		withEnv(flagS3Prefix, "key prefix inside the bucket, without leading or trailing '/'"))
	fs.StringVar(&c.S3.Region, flagS3Region, c.S3.Region, withEnv(flagS3Region, "S3 signing region (default us-east-1)"))
	fs.BoolVar(&c.S3.PathStyle, flagS3PathStyle, c.S3.PathStyle,
		withEnv(flagS3PathStyle, "address the bucket in the URL path (MinIO, versitygw)"))
	fs.IntVar(&c.MaxConcurrentActivities, flagMaxActivities, c.MaxConcurrentActivities,
		withEnv(flagMaxActivities, "activities run at once; 0 is the SDK's default (1000)"))
	fs.IntVar(&c.MaxConcurrentLocalActivities, flagMaxLocal, c.MaxConcurrentLocalActivities,
		withEnv(flagMaxLocal, "local activities run at once; 0 is the SDK's default (1000)"))
	fs.IntVar(&c.MaxConcurrentWorkflowTasks, flagMaxWorkflowTasks, c.MaxConcurrentWorkflowTasks,
		withEnv(flagMaxWorkflowTasks, "workflow tasks run at once, at least 2; 0 is the SDK's default (1000)"))
	fs.BoolVar(&c.Migrate, flagMigrate, c.Migrate,
		withEnv(flagMigrate, "apply the ledger's migrations at start (--migrate=false to only check them)"))
	fs.StringVar(&c.MetricsAddr, flagMetricsAddr, c.MetricsAddr,
		withEnv(flagMetricsAddr, `host:port serving /metrics and /healthz; "" disables`))
	fs.DurationVar(&c.ShutdownTimeout, flagShutdownTimeout, c.ShutdownTimeout,
		withEnv(flagShutdownTimeout, "on SIGTERM/SIGINT, how long to wait for running activities"))
}

// levelValue is a slog.Level as a pflag.Value.
type levelValue slog.Level

var _ pflag.Value = (*levelValue)(nil)

func (l *levelValue) String() string { return strings.ToLower(slog.Level(*l).String()) }
func (l *levelValue) Type() string   { return "level" }
func (l *levelValue) Set(s string) error {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(s)); err != nil {
		return fmt.Errorf("want debug, info, warn or error, got %q", s)
	}
	*l = levelValue(lv)
	return nil
}

// LookupEnv reads one environment variable, like os.LookupEnv.
type LookupEnv func(name string) (string, bool)

// sources records where each flag's value came from, so errors name it as
// the operator wrote it.
type sources struct {
	from map[string]string // flag name → "--flag" or "ENV_NAME"
}

// applyEnv fills every flag not given on the command line from its
// environment variable. An empty variable counts as unset, except
// GRAFT_METRICS_ADDR, where empty disables the metrics server.
func applyEnv(fs *pflag.FlagSet, lookup LookupEnv) (*sources, error) {
	s := &sources{from: map[string]string{}}
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed {
			s.from[f.Name] = "--" + f.Name
			return
		}
		env, ok := envNames[f.Name]
		if !ok {
			return
		}
		v, set := lookup(env)
		if !set || (v == "" && f.Name != flagMetricsAddr) {
			return
		}
		if err := f.Value.Set(v); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %v", env, v, err))
			return
		}
		s.from[f.Name] = env
	})
	return s, errors.Join(errs...)
}

// name is how an error refers to flag: as the operator gave it, or as
// "--flag (or ENV_NAME)" when neither flag nor environment set it.
func (s *sources) name(flag string) string {
	if n, ok := s.from[flag]; ok {
		return n
	}
	if env, ok := envNames[flag]; ok {
		return "--" + flag + " (or " + env + ")"
	}
	return "--" + flag
}

func (s *sources) given(flag string) bool {
	_, ok := s.from[flag]
	return ok
}

// resolveCommon completes and checks the settings every command uses.
func resolveCommon(c *Config, s *sources, lookup LookupEnv) error {
	if v, ok := lookup(envDatabaseURL); ok && v != "" {
		c.DatabaseURL = v
	}
	if c.DatabaseURL == "" {
		c.DatabaseURL = catalog.DefaultDatabaseURL
	}
	var errs []error
	if _, err := pgconn.ParseConfig(c.DatabaseURL); err != nil {
		// pgconn redacts the password in a parse error's text.
		errs = append(errs, fmt.Errorf("%s: %v", envDatabaseURL, err))
	}
	if err := catalog.ValidateSchema(c.DBSchema); err != nil {
		errs = append(errs, fmt.Errorf("%s: %v", s.name(flagDBSchema), err))
	}
	return errors.Join(errs...)
}

// resolveRun checks the settings of the run command. Every error names the
// flag or environment variable it came from.
func resolveRun(c *Config, s *sources) error {
	var errs []error
	bad := func(flag, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", s.name(flag), fmt.Sprintf(format, args...)))
	}
	if err := checkHostPort(c.TemporalAddress); err != nil {
		bad(flagTemporalAddress, "%v", err)
	}
	if strings.TrimSpace(c.Namespace) == "" {
		bad(flagNamespace, "must not be empty")
	}
	if strings.TrimSpace(c.TaskQueue) == "" {
		bad(flagTaskQueue, "must not be empty")
	}
	if c.DialTimeout <= 0 {
		bad(flagDialTimeout, "must be positive, got %s", c.DialTimeout)
	}
	if c.ShutdownTimeout < 0 {
		bad(flagShutdownTimeout, "must not be negative, got %s", c.ShutdownTimeout)
	}
	if c.MaxConcurrentActivities < 0 {
		bad(flagMaxActivities, "must be 0 (the SDK's default) or positive, got %d", c.MaxConcurrentActivities)
	}
	if c.MaxConcurrentLocalActivities < 0 {
		bad(flagMaxLocal, "must be 0 (the SDK's default) or positive, got %d", c.MaxConcurrentLocalActivities)
	}
	if c.MaxConcurrentWorkflowTasks < 0 || c.MaxConcurrentWorkflowTasks == 1 {
		bad(flagMaxWorkflowTasks, "must be 0 (the SDK's default) or at least 2, got %d", c.MaxConcurrentWorkflowTasks)
	}
	if c.MetricsAddr != "" {
		if err := checkHostPort(c.MetricsAddr); err != nil {
			bad(flagMetricsAddr, "%v", err)
		}
	}
	errs = append(errs, checkTLS(c.TLS, s)...)
	errs = append(errs, checkStore(c, s)...)
	return errors.Join(errs...)
}

func checkHostPort(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return fmt.Errorf("want host:port, got %q", addr)
	}
	return nil
}

// checkTLS loads the TLS files now, so a missing or bad file is a
// configuration error naming its flag rather than a failure at dial time.
func checkTLS(t TLSFiles, s *sources) []error {
	var errs []error
	switch {
	case (t.CertFile == "") != (t.KeyFile == ""):
		errs = append(errs, fmt.Errorf("%s and %s must be given together", s.name(flagTLSCert), s.name(flagTLSKey)))
	case t.CertFile != "":
		if _, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile); err != nil {
			errs = append(errs, fmt.Errorf("%s, %s: %v", s.name(flagTLSCert), s.name(flagTLSKey), err))
		}
	}
	if t.CAFile != "" {
		if _, err := loadRoots(t.CAFile); err != nil {
			errs = append(errs, fmt.Errorf("%s: %v", s.name(flagTLSCA), err))
		}
	}
	return errs
}

var s3Flags = []string{flagS3Bucket, flagS3Endpoint, flagS3Prefix, flagS3Region, flagS3PathStyle}

// checkStore enforces that the store is either a local directory or S3.
func checkStore(c *Config, s *sources) []error {
	var errs []error
	var s3Given []string
	for _, f := range s3Flags {
		if s.given(f) {
			s3Given = append(s3Given, f)
		}
	}
	if len(s3Given) == 0 {
		if strings.TrimSpace(c.StoreDir) == "" {
			errs = append(errs, fmt.Errorf("%s: must not be empty", s.name(flagStoreDir)))
		}
		return errs
	}
	if s.given(flagStoreDir) {
		errs = append(errs, fmt.Errorf("%s and %s are mutually exclusive: the store is a local directory or S3, not both",
			s.name(flagStoreDir), s.name(s3Given[0])))
	}
	if c.S3.Bucket == "" {
		errs = append(errs, fmt.Errorf("%s needs %s", s.name(s3Given[0]), s.name(flagS3Bucket)))
		return errs
	}
	if c.S3.Prefix != "" {
		if err := storage.ValidateKey(c.S3.Prefix); err != nil {
			errs = append(errs, fmt.Errorf("%s: %v", s.name(flagS3Prefix), err))
		}
	}
	if c.S3.Endpoint != "" {
		u, err := url.Parse(c.S3.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("%s: want an http:// or https:// URL, got %q", s.name(flagS3Endpoint), c.S3.Endpoint))
		}
	}
	return errs
}

func loadRoots(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no PEM certificate in %s", file)
	}
	return pool, nil
}

// tlsConfig builds the TLS configuration for Temporal, or nil for plain TCP.
func tlsConfig(t TLSFiles) (*tls.Config, error) {
	if !t.On() {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("load TLS client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	if t.CAFile != "" {
		roots, err := loadRoots(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("load TLS roots: %w", err)
		}
		cfg.RootCAs = roots
	}
	return cfg, nil
}

// LoadConfig resolves the run command's configuration from args (flags only,
// no subcommand) and the environment, the way graft-worker run does.
func LoadConfig(args []string, lookup LookupEnv) (Config, error) {
	c := DefaultConfig()
	fs := pflag.NewFlagSet("graft-worker run", pflag.ContinueOnError)
	fs.SetOutput(discard{})
	addCommonFlags(fs, &c)
	addRunFlags(fs, &c)
	if err := fs.Parse(args); err != nil {
		return Config{}, usageError{err}
	}
	if fs.NArg() > 0 {
		return Config{}, usageError{fmt.Errorf("unexpected arguments %q", fs.Args())}
	}
	if err := resolve(fs, &c, lookup, true); err != nil {
		return Config{}, err
	}
	return c, nil
}

// resolve applies the environment and checks c; run adds the run command's checks.
func resolve(fs *pflag.FlagSet, c *Config, lookup LookupEnv, run bool) error {
	s, err := applyEnv(fs, lookup)
	if err != nil {
		return usageError{err}
	}
	errs := []error{resolveCommon(c, s, lookup)}
	if run {
		errs = append(errs, resolveRun(c, s))
	}
	if err := errors.Join(errs...); err != nil {
		return usageError{err}
	}
	return nil
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// usageError is a bad command line or configuration: exit code 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }
