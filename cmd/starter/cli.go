package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/cmd/internal/conncfg"
)

// Main runs graft with args (without the program name) and returns the exit
// code. SIGINT and SIGTERM cancel the running command; a second signal kills
// the process at once.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stop()
	context.AfterFunc(ctx, stop) // after the first signal, the default action again
	return Execute(ctx, args, os.LookupEnv, stdout, stderr)
}

// Execute runs the command line with the environment read through lookup.
func Execute(ctx context.Context, args []string, lookup conncfg.LookupEnv, stdout, stderr io.Writer) int {
	a := &app{cfg: defaultConfig(), lookup: lookup, stdout: stdout, stderr: stderr}
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	ran, err := root.ExecuteContextC(ctx)
	if err == nil {
		a.close()
		return 0
	}
	r := classify(err)
	if ran == nil { // the command line named no command
		ran = root
	}
	r.Next = strings.ReplaceAll(r.Next, "graft <command>", ran.CommandPath())
	a.refineNext(ctx, &r, err)
	a.close()
	a.writeError(r)
	return r.ExitCode
}

// app is one invocation's state, shared by its commands.
type app struct {
	cfg            Config
	lookup         conncfg.LookupEnv
	stdout, stderr io.Writer
	resolved       bool
	src            *conncfg.Sources // where each setting came from
	// startedOp is the operation this invocation started (or attached to),
	// so an interrupted or failed wait can point at it.
	startedOp string
	deps
}

const rootLong = `graft runs branch operations on versioned data in object storage as
Temporal workflows, and shows what they did.

Every global flag can also be set by the environment variable shown in
brackets, or by the profile graft dev writes ($GRAFT_CONFIG, by default
~/.config/graft/config.json); a flag on the command line wins over its
variable, which wins over the profile. The ledger's database comes from
DATABASE_URL (or the profile's database-url). S3 credentials come from the
AWS SDK's standard chain.

With --output json (-o json) a result is one JSON object on stdout and an
error one JSON object on stderr. Exit codes: 0 ok, 1 failure, 2 invalid input
or bad flags, 3 unpublished, 4 in_doubt, 5 conflict, 6 not_found,
7 not_retained, 8 refused, 9 unavailable, 10 abandoned, 11 rejected
(docs/outcomes.md).

Start here: graft dev`

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:               "graft",
		Short:             "Branch operations on versioned data in object storage, run as Temporal workflows",
		Long:              rootLong,
		SilenceErrors:     true,
		SilenceUsage:      true,
		PersistentPreRunE: a.prepare,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.SetUsageTemplate(usageTemplate)
	addGlobalFlags(root.PersistentFlags(), &a.cfg)
	return asGroup(root,
		asGroup(&cobra.Command{Use: "graph", Short: "Create graphs"}, a.graphInitCommand()),
		asGroup(&cobra.Command{Use: "table", Short: "Write table versions; list a version's objects"},
			a.tableWriteCommand(), a.tableObjectsCommand()),
		asGroup(&cobra.Command{Use: "branch", Short: "Create, list, show, delete, repair, abandon and protect branches"},
			a.branchCreateCommand(), a.branchListCommand(), a.branchShowCommand(),
			a.branchDeleteCommand(), a.branchRepairCommand(), a.branchAbandonCommand(),
			a.branchProtectCommand(), a.branchProtectionCommand(), a.branchUnprotectCommand()),
		a.mergeCommand(), a.restoreCommand(),
		asGroup(&cobra.Command{Use: "tag", Short: "Create, list, show and delete tags: immutable names for commits",
			Long: `A tag is an immutable, graph-wide name for a commit, and keeps that commit
(and every table version it pins) from cleanup while it is live. A tag is
never re-pointed and a deleted tag's name is never reused.`},
			a.tagCreateCommand(), a.tagListCommand(), a.tagShowCommand(), a.tagDeleteCommand()),
		a.logCommand(), a.diffCommand(),
		asGroup(&cobra.Command{Use: "cleanup",
			Short: "Reclaim what no live branch, tag or running operation can reach; schedule it per graph"},
			a.cleanupRunCommand(), a.cleanupScheduleCommand()),
		asGroup(&cobra.Command{Use: "op", Short: "List, show, wait for and reconcile operations recorded in the ledger"},
			a.opListCommand(), a.opShowCommand(), a.opWaitCommand(), a.opReconcileCommand(),
			a.opLatePutsCommand(), a.opReleaseLatePutsCommand()),
		a.devCommand())
}

// asGroup makes cmd the group of subs: without a subcommand it prints its
// help; an unknown subcommand is a usage error.
func asGroup(cmd *cobra.Command, subs ...*cobra.Command) *cobra.Command {
	cmd.AddCommand(subs...)
	cmd.SuggestionsMinimumDistance = 2
	cmd.Args = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return nil
		}
		err := fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			for i := range s {
				s[i] = strconv.Quote(s[i])
			}
			err = fmt.Errorf("%w; did you mean %s?", err, strings.Join(s, " or "))
		}
		return usageError{err}
	}
	cmd.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	return cmd
}

// exactArgs requires one argument per name, and names them in the error.
func exactArgs(names ...string) cobra.PositionalArgs { return countArgs("", names) }

// countArgs requires len(names) arguments, or more when atLeast is "at least ".
func countArgs(atLeast string, names []string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) == len(names) || (atLeast != "" && len(args) > len(names)) {
			return nil
		}
		return usageError{fmt.Errorf("%s takes %s%d argument(s) (%s), got %d",
			cmd.CommandPath(), atLeast, len(names), strings.Join(names, " "), len(args))}
	}
}

func (a *app) prepare(cmd *cobra.Command, _ []string) error {
	if cmd.Name() == "help" || cmd.Name() == "completion" || (cmd.Parent() != nil && cmd.Parent().Name() == "completion") {
		return nil
	}
	src, err := resolveConfig(cmd.Flags(), &a.cfg, a.lookup)
	a.src = src
	if err != nil {
		return usageError{err}
	}
	a.resolved = true
	return nil
}

// jsonMode reports whether output is JSON, also for an error found before the
// configuration was resolved.
func (a *app) jsonMode() bool {
	if a.resolved || a.cfg.Output == outputJSON {
		return a.cfg.Output == outputJSON
	}
	v, _ := a.lookup(envNames[flagOutput])
	return v == outputJSON
}

// emit writes a command's result: v as one JSON object in json mode, else text.
func (a *app) emit(cmd *cobra.Command, v any, text func(w io.Writer) error) error {
	if a.cfg.Output == outputJSON {
		return writeJSON(cmd.OutOrStdout(), v)
	}
	return text(cmd.OutOrStdout())
}

// emitTable is emit with a text result in aligned columns.
func (a *app) emitTable(cmd *cobra.Command, v any, text func(tw io.Writer)) error {
	return a.emit(cmd, v, func(w io.Writer) error {
		tw := newTable(w)
		text(tw)
		return tw.Flush()
	})
}

func (a *app) emitf(cmd *cobra.Command, v any, format string, args ...any) error {
	return a.emit(cmd, v, func(w io.Writer) error {
		_, err := fmt.Fprintf(w, format, args...)
		return err
	})
}

func (a *app) writeError(r Report) {
	if a.jsonMode() {
		_ = writeJSON(a.stderr, r)
		return
	}
	fmt.Fprintf(a.stderr, "graft: %s: %s%s\n", r.Outcome, r.Message, outcome.OpSuffix(r.Message, r.OpID))
	if r.Next != "" {
		fmt.Fprintf(a.stderr, "next: %s\n", r.Next)
	}
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

func newTable(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }

// rows writes label and value pairs as table rows, leaving out a row whose
// value is empty.
func rows(w io.Writer, kv ...string) {
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			fmt.Fprintf(w, "%s\t%s\n", kv[i], kv[i+1])
		}
	}
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// usageTemplate is cobra's, with the global flags listed only by `graft
// --help`: under every other command one line points at them, so a
// group's subcommands are not buried under them.
const usageTemplate = `Usage:{{if .Runnable}}
  {{.UseLine}}{{end}}{{if .HasAvailableSubCommands}}
  {{.CommandPath}} [command]{{end}}{{if gt (len .Aliases) 0}}

Aliases:
  {{.NameAndAliases}}{{end}}{{if .HasExample}}

Examples:
{{.Example}}{{end}}{{if .HasAvailableSubCommands}}

Available Commands:{{range .Commands}}{{if (or .IsAvailableCommand (eq .Name "help"))}}
  {{rpad .Name .NamePadding }} {{.Short}}{{end}}{{end}}{{end}}{{if .HasAvailableLocalFlags}}

Flags:
{{.LocalFlags.FlagUsages | trimTrailingWhitespaces}}{{end}}{{if .HasAvailableInheritedFlags}}

Global flags (connection settings, --output): see "graft --help".{{end}}{{if .HasAvailableSubCommands}}

Use "{{.CommandPath}} [command] --help" for more information about a command.{{end}}
`
