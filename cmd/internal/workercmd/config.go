package workercmd

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/graftworks/graft/cmd/internal/conncfg"
)

// Config is a resolved worker configuration. DefaultConfig gives the values
// the command line starts from; envNames names each field's flag and
// environment variable.
type Config struct {
	// Settings reach Temporal, the store and the ledger. Defaults to conncfg.Defaults().
	conncfg.Settings
	// MaxConcurrentActivities, MaxConcurrentLocalActivities and
	// MaxConcurrentWorkflowTasks bound what runs at once; 0 is the SDK's
	// default (1000), and 1 workflow task is not allowed. Default to 0.
	MaxConcurrentActivities      int
	MaxConcurrentLocalActivities int
	MaxConcurrentWorkflowTasks   int
	// Migrate applies the ledger's migrations before starting. Defaults to true.
	Migrate bool
	// MetricsAddr serves /metrics and /healthz; "" disables the server.
	// Defaults to 127.0.0.1:9464.
	MetricsAddr string
	// LogLevel is the lowest level logged. Defaults to info.
	LogLevel slog.Level
	// ShutdownTimeout is how long a stopping worker waits for running
	// activities. Defaults to 30s.
	ShutdownTimeout time.Duration
}

// LookupEnv reads one environment variable, like os.LookupEnv.
type LookupEnv = conncfg.LookupEnv

// Defaults of the worker's own settings; the connection settings' are conncfg's.
const (
	DefaultMetricsAddr     = "127.0.0.1:9464"
	DefaultShutdownTimeout = 30 * time.Second
)

// DefaultConfig returns the configuration the command line starts from.
func DefaultConfig() Config {
	return Config{
		Settings:        conncfg.Defaults(),
		Migrate:         true,
		MetricsAddr:     DefaultMetricsAddr,
		LogLevel:        slog.LevelInfo,
		ShutdownTimeout: DefaultShutdownTimeout,
	}
}

// Flag names of the worker's own settings; the connection settings' are conncfg's.
const (
	flagMaxActivities    = "max-concurrent-activities"
	flagMaxLocal         = "max-concurrent-local-activities"
	flagMaxWorkflowTasks = "max-concurrent-workflow-tasks"
	flagMigrate          = "migrate"
	flagMetricsAddr      = "metrics-addr"
	flagLogLevel         = "log-level"
	flagShutdownTimeout  = "shutdown-timeout"
)

// envNames maps each flag that has an environment variable to it.
var envNames = conncfg.EnvNames().With(conncfg.Env{
	flagMaxActivities:    "GRAFT_MAX_CONCURRENT_ACTIVITIES",
	flagMaxLocal:         "GRAFT_MAX_CONCURRENT_LOCAL_ACTIVITIES",
	flagMaxWorkflowTasks: "GRAFT_MAX_CONCURRENT_WORKFLOW_TASKS",
	flagMigrate:          "GRAFT_MIGRATE",
	flagMetricsAddr:      "GRAFT_METRICS_ADDR",
	flagLogLevel:         "GRAFT_LOG_LEVEL",
	flagShutdownTimeout:  "GRAFT_SHUTDOWN_TIMEOUT",
})

// addCommonFlags adds the flags every command takes.
func addCommonFlags(fs *pflag.FlagSet, c *Config) {
	c.AddLedgerFlags(fs)
	fs.Var((*levelValue)(&c.LogLevel), flagLogLevel,
		envNames.Usage(flagLogLevel, "lowest level logged: debug, info, warn or error"))
}

// addRunFlags adds the flags of the run command.
func addRunFlags(fs *pflag.FlagSet, c *Config) {
	c.AddTemporalFlags(fs)
	c.AddStoreFlags(fs)
	u := envNames.Usage
	fs.IntVar(&c.MaxConcurrentActivities, flagMaxActivities, c.MaxConcurrentActivities,
		u(flagMaxActivities, "activities run at once; 0 is the SDK's default (1000)"))
	fs.IntVar(&c.MaxConcurrentLocalActivities, flagMaxLocal, c.MaxConcurrentLocalActivities,
		u(flagMaxLocal, "local activities run at once; 0 is the SDK's default (1000)"))
	fs.IntVar(&c.MaxConcurrentWorkflowTasks, flagMaxWorkflowTasks, c.MaxConcurrentWorkflowTasks,
		u(flagMaxWorkflowTasks, "workflow tasks run at once, at least 2; 0 is the SDK's default (1000)"))
	fs.BoolVar(&c.Migrate, flagMigrate, c.Migrate,
		u(flagMigrate, "apply the ledger's migrations at start (--migrate=false to only check them)"))
	fs.StringVar(&c.MetricsAddr, flagMetricsAddr, c.MetricsAddr,
		u(flagMetricsAddr, `host:port serving /metrics and /healthz; "" disables`))
	fs.DurationVar(&c.ShutdownTimeout, flagShutdownTimeout, c.ShutdownTimeout,
		u(flagShutdownTimeout, "on SIGTERM/SIGINT, how long to wait for running activities"))
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

// resolveRun checks the settings of the run command. Every error names the
// flag or environment variable it came from.
func resolveRun(c *Config, s *conncfg.Sources) error {
	errs := []error{c.ValidateTemporal(s), c.ValidateTLSFiles(s), c.ValidateStore(s)}
	bad := func(flag, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", s.Name(flag), fmt.Sprintf(format, args...)))
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
		if err := conncfg.CheckHostPort(c.MetricsAddr); err != nil {
			bad(flagMetricsAddr, "%v", err)
		}
	}
	return errors.Join(errs...)
}

// LoadConfig resolves the run command's configuration from args (flags only,
// no subcommand) and the environment, the way graft-worker run does.
func LoadConfig(args []string, lookup LookupEnv) (Config, error) {
	c := DefaultConfig()
	fs := pflag.NewFlagSet("graft-worker run", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
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

// resolve applies the environment and checks c; run adds the run command's
// checks. An empty GRAFT_METRICS_ADDR is a value: it disables the server.
func resolve(fs *pflag.FlagSet, c *Config, lookup LookupEnv, run bool) error {
	s, err := envNames.Bind(fs, lookup, flagMetricsAddr)
	if err != nil {
		return usageError{err}
	}
	c.ReadDatabaseURL(lookup)
	errs := []error{c.ValidateLedger(s)}
	if run {
		errs = append(errs, resolveRun(c, s))
	}
	if err := errors.Join(errs...); err != nil {
		return usageError{err}
	}
	return nil
}

// usageError is a bad command line or configuration: exit code 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }
