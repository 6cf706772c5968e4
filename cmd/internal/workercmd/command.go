package workercmd

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/graftworks/graft/cmd/internal/conncfg"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/migrations"
)

// Exit codes of graft-worker.
const (
	ExitOK      = 0 // success, or a graceful stop after SIGTERM/SIGINT
	ExitFailure = 1 // a runtime failure: a dependency unreachable, a migration failed, a fatal worker error
	ExitUsage   = 2 // a bad command line or configuration
)

// Main runs graft-worker with args (without the program name) and returns its
// exit code. SIGTERM and SIGINT stop a running worker gracefully; a second
// signal kills the process at once.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stop()
	context.AfterFunc(ctx, stop) // after the first signal, the default action again
	return Execute(ctx, args, os.LookupEnv, stdout, stderr)
}

// Execute runs the command line with the environment read through lookup;
// usage errors go to stderr as text, runtime errors as a JSON log line.
func Execute(ctx context.Context, args []string, lookup conncfg.LookupEnv, stdout, stderr io.Writer) int {
	a := &app{cfg: DefaultConfig(), lookup: lookup, stdout: stdout, stderr: stderr, output: outputText}
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	var ue usageError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "graft-worker: %v\nRun 'graft-worker --help' for usage.\n", err)
		return ExitUsage
	case a.log != nil:
		a.log.Error("graft-worker failed", "err", err.Error())
		return ExitFailure
	default:
		fmt.Fprintf(stderr, "graft-worker: %v\n", err)
		return ExitFailure
	}
}

const (
	outputText = "text"
	outputJSON = "json"
)

type app struct {
	cfg            Config
	lookup         conncfg.LookupEnv
	stdout, stderr io.Writer
	log            *slog.Logger
	output         string
}

const rootLong = `graft-worker runs graft's Temporal worker: it polls a task queue for graft's
workflows and activities, working on a local directory or an S3 bucket and
recording intent in the Postgres ledger.

Every flag can also be set by the environment variable shown in brackets; a
flag on the command line wins over its variable. An empty variable counts as
unset, except GRAFT_METRICS_ADDR, where empty turns the metrics server off.

The database comes only from DATABASE_URL, so a password never shows in ps
(default ` + catalog.DefaultDatabaseURL + `);
pgx also honours PGPASSWORD and ~/.pgpass.
S3 credentials come only from the AWS SDK's standard chain (AWS_ACCESS_KEY_ID
and AWS_SECRET_ACCESS_KEY, AWS_PROFILE and shared files, or an instance role).

Logs are JSON lines on stderr. SIGTERM or SIGINT stops polling and waits up to
--shutdown-timeout for running activities, then exits 0.

Exit codes: 0 success or graceful stop; 1 runtime failure; 2 usage or
configuration error.`

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:               "graft-worker",
		Short:             "Run graft's Temporal worker (the default command) or manage the ledger's schema",
		Long:              rootLong,
		Args:              noArgs,
		SilenceErrors:     true,
		SilenceUsage:      true,
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
		PersistentPreRunE: a.prepare,
		RunE:              a.run,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	addCommonFlags(root.PersistentFlags(), &a.cfg)
	addRunFlags(root.Flags(), &a.cfg)

	runCmd := &cobra.Command{
		Use:   "run",
		Short: "Run the worker until SIGTERM or SIGINT (the default command)",
		Long:  rootLong,
		Args:  noArgs,
		RunE:  a.run,
	}
	addRunFlags(runCmd.Flags(), &a.cfg)

	migrateCmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply the ledger's migrations to --db-schema and exit",
		Long: `migrate brings the ledger's schema up to date and exits. It is safe to run
beside workers and other migrators: appliers of one schema take turns.
The database comes from DATABASE_URL.`,
		Args: noArgs,
		RunE: a.migrate,
	}
	migrateCmd.PersistentFlags().StringVarP(&a.output, "output", "o", a.output, "output format: text or json")
	statusCmd := &cobra.Command{
		Use:   "status",
		Short: "Show which of the ledger's migrations --db-schema has applied",
		Args:  noArgs,
		RunE:  a.migrateStatus,
	}
	migrateCmd.AddCommand(statusCmd)
	root.AddCommand(runCmd, migrateCmd)
	return root
}

func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	if cmd.HasSubCommands() {
		return usageError{fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())}
	}
	return usageError{fmt.Errorf("%q takes no arguments, got %q", cmd.CommandPath(), args)}
}

func (a *app) prepare(cmd *cobra.Command, _ []string) error {
	if cmd.Name() == "help" {
		return nil // help needs no configuration, however broken
	}
	isRun := cmd.Parent() == nil || cmd.Name() == "run"
	if err := resolve(cmd.Flags(), &a.cfg, a.lookup, isRun); err != nil {
		return err
	}
	if f := cmd.Flags().Lookup("output"); f != nil && !slices.Contains([]string{outputText, outputJSON}, a.output) {
		return usageError{fmt.Errorf("--output: want text or json, got %q", a.output)}
	}
	a.log = NewLogger(a.stderr, a.cfg.LogLevel)
	return nil
}

func (a *app) run(cmd *cobra.Command, _ []string) error {
	return Run(cmd.Context(), a.cfg, a.log, nil)
}

type migrateResult struct {
	Schema  string  `json:"schema"`
	Applied []int64 `json:"applied"`
	Current int64   `json:"current"`
}

func (a *app) migrate(cmd *cobra.Command, _ []string) error {
	applied, err := migrations.Apply(cmd.Context(), a.cfg.DatabaseURL, a.cfg.DBSchema)
	if err != nil {
		return err
	}
	a.log.Info("migrations applied", "database", catalog.RedactURL(a.cfg.DatabaseURL),
		"db_schema", a.cfg.DBSchema, "applied", applied)
	res := migrateResult{Schema: a.cfg.DBSchema, Applied: append([]int64{}, applied...), Current: migrations.Latest()}
	if a.output == outputJSON {
		return writeJSON(a.stdout, res)
	}
	schema := cmp.Or(res.Schema, "(default)")
	if len(applied) == 0 {
		_, err = fmt.Fprintf(a.stdout, "schema %s: already at version %d\n", schema, res.Current)
		return err
	}
	vs := strings.ReplaceAll(strings.Trim(fmt.Sprint(applied), "[]"), " ", ", ")
	_, err = fmt.Fprintf(a.stdout, "schema %s: applied %s; now at version %d\n", schema, vs, res.Current)
	return err
}

func (a *app) migrateStatus(cmd *cobra.Command, _ []string) error {
	report, err := migrations.Status(cmd.Context(), a.cfg.DatabaseURL, a.cfg.DBSchema)
	if err != nil {
		return err
	}
	if a.output == outputJSON {
		return writeJSON(a.stdout, report)
	}
	_, err = io.WriteString(a.stdout, report.String())
	return err
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
