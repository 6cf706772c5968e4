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

// Config is a resolved worker configuration; DefaultConfig gives the values
// the command line starts from.
type Config struct {
	conncfg.Settings
	// The Max fields bound what runs at once; 0 is the SDK's default (1000),
	// and 1 workflow task is not allowed.
	MaxConcurrentActivities      int
	MaxConcurrentLocalActivities int
	MaxConcurrentWorkflowTasks   int
	Migrate                      bool          // apply the ledger's migrations before starting
	MetricsAddr                  string        // serves /metrics and /healthz; "" disables the server
	LogLevel                     slog.Level    // the lowest level logged
	ShutdownTimeout              time.Duration // how long a stopping worker waits for running activities
}

// DefaultConfig returns the configuration the command line starts from.
func DefaultConfig() Config {
	return Config{
		Settings:        conncfg.Defaults(),
		Migrate:         true,
		MetricsAddr:     "127.0.0.1:9464",
		LogLevel:        slog.LevelInfo,
		ShutdownTimeout: 30 * time.Second,
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

// envNames maps each flag to its environment variable.
var envNames = conncfg.EnvNames(flagMaxActivities, flagMaxLocal, flagMaxWorkflowTasks, flagMigrate, flagMetricsAddr,
	flagLogLevel, flagShutdownTimeout)

func addCommonFlags(fs *pflag.FlagSet, c *Config) {
	c.AddLedgerFlags(fs)
	fs.Var((*levelValue)(&c.LogLevel), flagLogLevel,
		envNames.Usage(flagLogLevel, "lowest level logged: debug, info, warn or error"))
}

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

// LoadConfig resolves the run command's configuration from args (flags only,
// no subcommand) and the environment, the way graft-worker run does.
func LoadConfig(args []string, lookup conncfg.LookupEnv) (Config, error) {
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

// resolve applies the environment and checks c, and with run the run
// command's settings; every error names the flag or variable it came from.
// An empty GRAFT_METRICS_ADDR is a value: it disables the server.
func resolve(fs *pflag.FlagSet, c *Config, lookup conncfg.LookupEnv, run bool) error {
	s, err := envNames.Bind(fs, lookup, flagMetricsAddr)
	if err != nil {
		return usageError{err}
	}
	c.ReadDatabaseURL(lookup)
	errs := []error{c.ValidateLedger(s)}
	if run {
		var addr error
		if c.MetricsAddr != "" {
			addr = conncfg.CheckHostPort(c.MetricsAddr)
		}
		const sdkDefault = "must be 0 (the SDK's default) or "
		errs = append(errs, c.ValidateTemporal(s), c.ValidateTLSFiles(s), c.ValidateStore(s),
			s.Check(c.ShutdownTimeout < 0, flagShutdownTimeout, "must not be negative, got %s", c.ShutdownTimeout),
			s.Check(c.MaxConcurrentActivities < 0, flagMaxActivities, sdkDefault+"positive, got %d",
				c.MaxConcurrentActivities),
			s.Check(c.MaxConcurrentLocalActivities < 0, flagMaxLocal, sdkDefault+"positive, got %d",
				c.MaxConcurrentLocalActivities),
			s.Check(c.MaxConcurrentWorkflowTasks < 0 || c.MaxConcurrentWorkflowTasks == 1, flagMaxWorkflowTasks,
				sdkDefault+"at least 2, got %d", c.MaxConcurrentWorkflowTasks),
			s.Check(addr != nil, flagMetricsAddr, "%v", addr))
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
