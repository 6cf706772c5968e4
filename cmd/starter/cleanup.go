package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/workflows"
)

// recordedWait bounds how long cleanup run without --wait waits for its run to be in the
// ledger before it returns.
const recordedWait = 15 * time.Second

// progressInterval is how often cleanup run --wait asks the workflow how far it got.
const progressInterval = 500 * time.Millisecond

type policyFlags struct {
	keepNewest    int
	keepNewerThan time.Duration
	guardWindow   time.Duration
}

func (p *policyFlags) add(fs *pflag.FlagSet) {
	fs.IntVar(&p.keepNewest, "keep-newest", 0, "keep the newest N commits of every live branch")
	fs.DurationVar(&p.keepNewerThan, "keep-newer-than", 0, "keep every commit of a live branch younger than this (e.g. 168h)")
	fs.DurationVar(&p.guardWindow, "guard-window", workflows.DefaultGuardWindow,
		"keep table versions and data objects younger than this; 0 turns the guard off")
}

func (p *policyFlags) check() error {
	return cmp.Or(usageIf(p.keepNewest < 0 || p.keepNewerThan < 0 || p.guardWindow < 0,
		"--keep-newest, --keep-newer-than and --guard-window must not be negative"),
		usageIf(p.keepNewest == 0 && p.keepNewerThan == 0,
			"give a retention window: --keep-newest N, --keep-newer-than DURATION, or both"))
}

// guard is --guard-window when given, else nil: the workflow's default.
func (p *policyFlags) guard(cmd *cobra.Command) *time.Duration {
	if !cmd.Flags().Changed("guard-window") {
		return nil
	}
	g := p.guardWindow
	return &g
}

func (a *app) cleanupRunCommand() *cobra.Command {
	var (
		pol          policyFlags
		dryRun, mark bool
		sweepRun     string
		wait         bool
	)
	cmd := &cobra.Command{
		Use:   "run GRAPH",
		Short: "Run one cleanup of a graph now",
		Long: `run starts graft.Cleanup on GRAPH (or attaches to the one running when it
is the same request; another request is a conflict, exit 5) in one of
three modes:

  (default)      mark and sweep: condemn what is garbage and delete it
  --dry-run      report what would be condemned; change nothing
  --mark         condemn and record a plan, delete nothing; review it, then
  --sweep RUN    delete what is still garbage of mark run RUN's plan

Nothing a live branch, a tag, or a running or in-doubt operation may still
name is ever deleted. Without --wait, run returns once the run is recorded
in the ledger, printing its operation and workflow ids; with --wait it
shows progress on stderr and prints the result.`,
		Args: exactArgs("GRAPH"),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := client.CleanupRequest{Graph: args[0], KeepNewest: pol.keepNewest, KeepNewerThan: pol.keepNewerThan,
				Mode: workflows.CleanupModeSweep, SweepRunID: sweepRun, GuardWindow: pol.guard(cmd)}
			switch {
			case dryRun:
				req.Mode = workflows.CleanupModeDryRun
			case mark:
				req.Mode = workflows.CleanupModeMark
			}
			c, err := a.client(cmd.Context(), checkGraph(req.Graph), pol.check(),
				usageIf(dryRun && mark || sweepRun != "" && (dryRun || mark), "give at most one of --dry-run, --mark, --sweep RUN"))
			if err != nil {
				return err
			}
			h, err := c.StartCleanup(cmd.Context(), req)
			if err != nil {
				return err
			}
			if !wait {
				// Return once the run is in the ledger, so that `graft op wait` finds it at
				// once; a run slow to record itself is still reported, with its workflow.
				rctx, cancel := context.WithTimeout(cmd.Context(), recordedWait)
				_ = h.WaitRecorded(rctx)
				cancel()
				opID, _ := h.OperationID(cmd.Context()) // "" until the run has named itself
				a.startedOp = opID
				st := map[string]string{"graph": req.Graph, "mode": string(req.Mode), "op_id": opID, "workflow_id": h.WorkflowID, "run_id": h.RunID}
				follow := "follow it in the Web UI"
				if opID != "" {
					follow = fmt.Sprintf("wait for it with `graft op wait %s`", opID)
				}
				return a.emitf(cmd, st, "started cleanup (%s) of %s\n  op        %s\n  workflow  %s\n%s\n",
					req.Mode, req.Graph, orDash(opID), h.WorkflowID, follow)
			}
			a.startedOp = h.OpID
			res, err := waitWithProgress(cmd.Context(), h, a.progress(cmd))
			if err != nil {
				if res.ActiveRunID == "" {
					return err
				}
				return nextOn(err, outcome.Conflict, "cleanup run %s of %s is still active; wait for it with `graft op wait %s`",
					res.ActiveRunID, req.Graph, res.ActiveRunID)
			}
			return a.emit(cmd, viewCleanup(res), func(w io.Writer) error { return printCleanupResult(w, res) })
		},
	}
	pol.add(cmd.Flags())
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "report what would be condemned; change nothing")
	cmd.Flags().BoolVar(&mark, "mark", false, "condemn and record a plan; delete nothing")
	cmd.Flags().StringVar(&sweepRun, "sweep", "", "delete what is still garbage of this mark run's plan")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait for the result, showing progress on stderr")
	return cmd
}

// waitWithProgress waits for the cleanup's result while feeding pr from the
// workflow's progress query (a failed query draws nothing); the last line is
// drawn from the result itself.
func waitWithProgress(ctx context.Context, h *client.CleanupHandle, pr *lineProgress) (workflows.CleanupResult, error) {
	stop := pollEvery(ctx, func(pctx context.Context) {
		p, err := h.Progress(pctx)
		if err != nil || pctx.Err() != nil {
			return
		}
		switch p.Phase {
		case "mark":
			pr.Update("mark", int64(p.TablesDone), int64(p.TablesTotal))
		case "sweep":
			pr.Update("sweep", p.Deleted, p.Condemned)
		case "done": // drawn from the result
		default:
			pr.Update(p.Phase, 0, 0)
		}
	})
	res, err := h.Wait(ctx)
	stop()
	if err == nil {
		if res.Mode == workflows.CleanupModeSweep {
			pr.Update("done", res.Deleted.Keys(), res.Condemned.Keys())
		} else {
			pr.Update("done", res.PlanKeyCount, 0)
		}
	}
	pr.Finish()
	return res, err
}

// cleanupView is a cleanup's result as -o json prints it: the workflow's
// result, with durations as Go duration strings ("1h0m0s") instead of
// nanoseconds.
type cleanupView struct {
	workflows.CleanupResult
	Policy cleanupPolicyView `json:"policy"`
	Mark   cleanupPhaseView  `json:"mark"`
	Sweep  cleanupPhaseView  `json:"sweep"`
}

type cleanupPolicyView struct {
	KeepNewest    int    `json:"keep_newest"`
	KeepNewerThan string `json:"keep_newer_than"`
	GuardWindow   string `json:"guard_window"`
}

type cleanupPhaseView struct {
	Duration       string                   `json:"duration"`
	Requests       *workflows.StoreRequests `json:"requests,omitempty"`
	Activities     int                      `json:"activities,omitempty"`
	ContinuedAsNew int                      `json:"continued_as_new,omitempty"`
}

func viewCleanup(r workflows.CleanupResult) cleanupView {
	return cleanupView{
		CleanupResult: r,
		Policy:        cleanupPolicyView{KeepNewest: r.Policy.KeepNewest, KeepNewerThan: r.Policy.KeepNewerThan.String(), GuardWindow: r.Policy.GuardWindow.String()},
		Mark:          cleanupPhaseView{Duration: r.Mark.Duration.String(), Requests: &r.Mark.Requests},
		Sweep:         cleanupPhaseView{Duration: r.Sweep.Duration.String(), Activities: r.Sweep.Activities, ContinuedAsNew: r.Sweep.ContinuedAsNew},
	}
}

func printCleanupResult(w io.Writer, r workflows.CleanupResult) error {
	tw := newTable(w)
	fmt.Fprintf(tw, "cleanup (%s) of %s: %s\n", r.Mode, r.Graph, r.Outcome)
	rows(tw, "  run", r.RunID, "  plan of", r.PlanRunID)
	fmt.Fprintf(tw, "  policy\tkeep newest %d, newer than %s, guard %s\n", r.Policy.KeepNewest, r.Policy.KeepNewerThan, r.Policy.GuardWindow)
	k := r.Kept
	fmt.Fprintf(tw, "  kept\thead %d, live window %d, merge base %d, tag %d, pinned %d, guard %d, in flight %d, unsettled %d, referenced %d, unknown %d\n",
		k.Head, k.LiveWindow, k.MergeBase, k.Tag, k.Pin, k.Guard, k.InFlightTree, k.Unsettled, k.Referenced, k.Unknown)
	verb := "condemned"
	if r.Mode == workflows.CleanupModeDryRun {
		verb = "would condemn"
	}
	c, d := r.Condemned, r.Deleted
	fmt.Fprintf(tw, "  %s\t%d commits, %d versions, %d objects (%d bytes)\n", verb, c.Commits, c.Versions, c.Objects, c.Bytes)
	fmt.Fprintf(tw, "  deleted\t%d commits, %d versions, %d objects (%d bytes)\n", d.Commits, d.Versions, d.Objects, d.Bytes)
	if r.Refused > 0 {
		keys := make([]string, len(r.RefusedKeys))
		for i, k := range r.RefusedKeys {
			keys[i] = k.Key
		}
		more, why := "", ""
		if int64(len(keys)) < r.Refused {
			more = fmt.Sprintf(" and %d more", r.Refused-int64(len(keys)))
		}
		if len(r.RefusedKeys) > 0 {
			why = "; the store said: " + r.RefusedKeys[0].Reason
		}
		fmt.Fprintf(tw, "  not deleted\t%d key(s) the store refused to delete (a 403, an object lock): %s%s%s; they stay, and a later run tries again\n",
			r.Refused, strings.Join(keys, ", "), more, why)
	}
	if len(r.SkippedUnsettled) > 0 {
		fmt.Fprintf(tw, "  left alone\t%d tree(s) a pending operation may still name; settle them (`graft op wait`, `graft branch abandon`) to reclaim them\n",
			len(r.SkippedUnsettled))
	}
	rows(tw, "  data kept", r.RetainAllData, "  would fence", strings.Join(r.WouldFence, ", "), "  fenced", strings.Join(r.Fenced, ", "))
	if r.Mode == workflows.CleanupModeMark {
		fmt.Fprintf(tw, "  next\treview the plan, then `graft cleanup run %s --sweep %s` with the same policy\n", r.Graph, r.RunID)
	}
	return tw.Flush()
}

type scheduleView struct {
	ID             string            `json:"id"`
	Graph          string            `json:"graph"`
	Every          string            `json:"every,omitempty"`
	Cron           string            `json:"cron,omitempty"`
	Mode           string            `json:"mode"`
	KeepNewest     int               `json:"keep_newest,omitempty"`
	KeepNewerThan  string            `json:"keep_newer_than,omitempty"`
	GuardWindow    string            `json:"guard_window,omitempty"`
	Paused         bool              `json:"paused"`
	Note           string            `json:"note,omitempty"`
	NextRuns       []time.Time       `json:"next_runs"`
	RecentRuns     []scheduleRunView `json:"recent_runs"`
	Running        []string          `json:"running"`
	Actions        int               `json:"actions"`
	SkippedOverlap int               `json:"skipped_overlap"`
}

type scheduleRunView struct {
	ScheduledAt time.Time `json:"scheduled_at"`
	StartedAt   time.Time `json:"started_at"`
	WorkflowID  string    `json:"workflow_id"`
	RunID       string    `json:"run_id"`
}

func viewSchedule(i client.CleanupScheduleInfo) scheduleView {
	v := scheduleView{
		ID: i.ID, Graph: i.Graph, Cron: i.Cron, Mode: string(i.Mode), KeepNewest: i.KeepNewest,
		Paused: i.Paused, Note: i.Note, NextRuns: append([]time.Time{}, i.NextRuns...), Running: append([]string{}, i.Running...),
		Actions: i.Actions, SkippedOverlap: i.SkippedOverlap, RecentRuns: []scheduleRunView{},
	}
	if i.Every > 0 {
		v.Every = i.Every.String()
	}
	if i.KeepNewerThan > 0 {
		v.KeepNewerThan = i.KeepNewerThan.String()
	}
	if i.GuardWindow != nil {
		v.GuardWindow = i.GuardWindow.String()
	}
	for _, r := range i.RecentRuns {
		v.RecentRuns = append(v.RecentRuns, scheduleRunView(r))
	}
	return v
}

func printSchedule(w io.Writer, v scheduleView) error {
	tw := newTable(w)
	fmt.Fprintf(tw, "schedule\t%s (graph %s)\n", v.ID, v.Graph)
	when := []string{}
	if v.Every != "" {
		when = append(when, "every "+v.Every)
	}
	if v.Cron != "" {
		when = append(when, "cron "+v.Cron)
	}
	fmt.Fprintf(tw, "runs\t%s\n", strings.Join(when, ", "))
	fmt.Fprintf(tw, "mode\t%s\n", v.Mode)
	fmt.Fprintf(tw, "policy\tkeep newest %d, newer than %s, guard %s\n", v.KeepNewest, orDash(v.KeepNewerThan), orDash(v.GuardWindow))
	state := "active"
	if v.Paused {
		state = "paused"
	}
	if v.Note != "" {
		state += " (" + v.Note + ")"
	}
	fmt.Fprintf(tw, "state\t%s\n", state)
	for i, t := range v.NextRuns[:min(len(v.NextRuns), shownNextRuns)] {
		fmt.Fprintf(tw, "%s\t%s\n", firstRow(i, "next runs"), stamp(t))
	}
	for i, r := range v.RecentRuns {
		fmt.Fprintf(tw, "%s\t%s  %s\n", firstRow(i, "recent runs"), stamp(r.StartedAt), r.WorkflowID)
	}
	fmt.Fprintf(tw, "started\t%d (skipped while one ran: %d)\n", v.Actions, v.SkippedOverlap)
	return tw.Flush()
}

// shownNextRuns is how many upcoming runs the text view lists (json lists all).
const shownNextRuns = 3

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (a *app) cleanupScheduleCommand() *cobra.Command {
	return asGroup(&cobra.Command{Use: "schedule", Short: "Manage a graph's cleanup schedule (a Temporal Schedule)"},
		a.scheduleWriteCommand("create", "Create a graph's cleanup schedule (an existing one is updated)"),
		a.scheduleWriteCommand("update", "Replace a graph's cleanup schedule: timing, policy and state"),
		a.schedulePauseCommand(true), a.schedulePauseCommand(false),
		a.scheduleSimpleCommand("trigger", "Start a scheduled cleanup now (skipped while one runs)",
			(*client.Client).CleanupScheduleTrigger),
		a.scheduleSimpleCommand("delete", "Delete a graph's cleanup schedule; running cleanups go on",
			(*client.Client).CleanupScheduleDelete),
		a.scheduleCommand("describe", "Show a graph's cleanup schedule: timing, policy, state, next and recent runs", a.describeAndEmit))
}

func (a *app) describeAndEmit(cmd *cobra.Command, c *client.Client, graph string) error {
	info, err := c.CleanupScheduleDescribe(cmd.Context(), graph)
	if err != nil {
		return err
	}
	v := viewSchedule(info)
	return a.emit(cmd, v, func(w io.Writer) error { return printSchedule(w, v) })
}

func scheduleNotFound(err error, graph string) error {
	return nextOn(err, outcome.NotFound, "create it with `graft cleanup schedule create %s --every 24h --keep-newer-than 168h`", graph)
}

func (a *app) scheduleWriteCommand(verb, short string) *cobra.Command {
	var (
		pol    policyFlags
		req    client.CleanupScheduleRequest
		mode   string
		paused bool
	)
	cmd := &cobra.Command{
		Use:   verb + " GRAPH (--every DURATION | --cron EXPR) (--keep-newest N | --keep-newer-than DURATION)",
		Short: short,
		Long: short + `.

Each scheduled run is graft.Cleanup with the policy given here; a run due
while the previous one still runs is skipped. --mode sweep (the default)
deletes; dry_run only reports. ` + verb + ` prints the schedule as it now stands.`,
		Args: exactArgs("GRAPH"),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Graph, req.Mode, req.GuardWindow = args[0], workflows.CleanupMode(mode), pol.guard(cmd)
			req.KeepNewest, req.KeepNewerThan, req.Paused = pol.keepNewest, pol.keepNewerThan, paused
			modes := []workflows.CleanupMode{workflows.CleanupModeDryRun, workflows.CleanupModeMark, workflows.CleanupModeSweep}
			c, err := a.client(cmd.Context(), checkGraph(req.Graph), pol.check(),
				usageIf(req.Every <= 0 && req.Cron == "", "give --every DURATION, --cron EXPR, or both"),
				usageIf(!slices.Contains(modes, req.Mode), fmt.Sprintf("--mode: want dry_run, mark or sweep, got %q", mode)))
			if err != nil {
				return err
			}
			write := c.CleanupScheduleUpdate
			if verb == "create" {
				write = c.CleanupScheduleCreate
			}
			if err := write(cmd.Context(), req); err != nil {
				return scheduleNotFound(err, req.Graph)
			}
			return a.describeAndEmit(cmd, c, req.Graph)
		},
	}
	pol.add(cmd.Flags())
	cmd.Flags().DurationVar(&req.Every, "every", 0, "run at this interval (e.g. 24h)")
	cmd.Flags().StringVar(&req.Cron, "cron", "", `run on this cron expression, UTC (e.g. "0 3 * * *")`)
	cmd.Flags().StringVar(&mode, "mode", string(workflows.CleanupModeSweep), "mode of each run: sweep, mark or dry_run")
	cmd.Flags().BoolVar(&paused, "paused", false, "leave the schedule paused")
	cmd.Flags().StringVar(&req.Note, "note", "", "note shown with the schedule's state")
	return cmd
}

// scheduleCommand is a schedule subcommand of GRAPH: run gets the client once
// the name is checked, and a missing schedule's error says how to create one.
func (a *app) scheduleCommand(use, short string, run func(*cobra.Command, *client.Client, string) error) *cobra.Command {
	return &cobra.Command{
		Use:   use + " GRAPH",
		Short: short,
		Args:  exactArgs("GRAPH"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client(cmd.Context(), checkGraph(args[0]))
			if err != nil {
				return err
			}
			return scheduleNotFound(run(cmd, c, args[0]), args[0])
		},
	}
}

func (a *app) schedulePauseCommand(pause bool) *cobra.Command {
	var note string
	use, short := "pause", "Pause a graph's cleanup schedule"
	if !pause {
		use, short = "unpause", "Resume a paused cleanup schedule"
	}
	cmd := a.scheduleCommand(use, short, func(cmd *cobra.Command, c *client.Client, graph string) error {
		if err := c.CleanupSchedulePause(cmd.Context(), graph, pause, note); err != nil {
			return err
		}
		return a.describeAndEmit(cmd, c, graph)
	})
	cmd.Flags().StringVar(&note, "note", "", "why, shown with the schedule's state")
	return cmd
}

func (a *app) scheduleSimpleCommand(verb, short string, do func(*client.Client, context.Context, string) error) *cobra.Command {
	return a.scheduleCommand(verb, short, func(cmd *cobra.Command, c *client.Client, graph string) error {
		if err := do(c, cmd.Context(), graph); err != nil {
			return err
		}
		res := map[string]string{"graph": graph, "schedule_id": client.CleanupScheduleID(graph), "done": verb}
		return a.emitf(cmd, res, "%s: cleanup schedule %s of %s\n", verb, res["schedule_id"], graph)
	})
}
