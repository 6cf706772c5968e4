package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/workflows"
)

// checkGraph, checkBranch and checkTag validate names locally with the
// workflows' own rules, through the client's requests, so a typo is invalid
// (exit 2) before anything is contacted.
func checkGraph(graph string) error { return client.InitGraphRequest{Graph: graph}.Validate() }

// graphArg checks a command whose first argument is the graph.
func graphArg(args []string) error { return checkGraph(args[0]) }

func checkBranch(graph, branch string) error {
	return client.DeleteBranchRequest{Graph: graph, Branch: branch}.Validate()
}

func checkTag(graph, name string) error {
	return client.DeleteTagRequest{Graph: graph, Name: name}.Validate()
}

func inDoubtNext(opID, graph, branch string) string {
	return fmt.Sprintf("operation %s is settling; watch it with `graft op wait %s` or settle it now with `graft branch abandon %s %s`",
		opID, opID, graph, branch)
}

type startedCreate struct {
	Graph      string `json:"graph"`
	Branch     string `json:"branch"`
	OpID       string `json:"op_id"`
	WorkflowID string `json:"workflow_id"`
	RunID      string `json:"run_id"`
}

func (a *app) branchCreateCommand() *cobra.Command {
	var (
		req           client.CreateBranchRequest
		detach, final bool
	)
	cmd := &cobra.Command{
		Use:   "create GRAPH BRANCH",
		Short: "Create a branch from main's head, another branch, a commit or a tag",
		Long: `create starts graft.CreateBranch and waits for its outcome. By default it
returns as soon as the outcome is known: created (exit 0), or in_doubt (exit 4)
when a storage write answered ambiguously and the workflow is settling it —
the operation id then says what to watch. --wait-settled waits through the
settle instead; --detach returns as soon as the workflow has started.

Repeating the same create with the same --idempotency-key attaches to it
while it runs; one create per branch name runs at a time, and a different
create of the name while one runs is a conflict (exit 5), as is another
request under a key already used.`,
		Args: exactArgs("GRAPH", "BRANCH"),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Graph, req.Branch = args[0], args[1]
			c, err := a.begin(cmd.Context(), &req.IdempotencyKey, checkBranch(req.Graph, req.Branch), checkSource(req),
				usageIf(detach && final, "--detach and --wait-settled are mutually exclusive"), req.Validate())
			if err != nil {
				return err
			}
			h, err := c.StartCreateBranch(cmd.Context(), req)
			if err != nil {
				return err
			}
			if detach {
				st := startedCreate{Graph: req.Graph, Branch: req.Branch, OpID: req.IdempotencyKey, WorkflowID: h.WorkflowID, RunID: h.RunID}
				return a.emitf(cmd, st, "started create of %s in %s\n  workflow  %s\n  run       %s\n  op        %s\nwatch it with `graft op wait %s`\n",
					st.Branch, st.Graph, st.WorkflowID, st.RunID, st.OpID, st.OpID)
			}
			res, err := waitFor(cmd.Context(), final, h.WaitCreateBranch, h.WaitFinal)
			if h.Attached(res) && a.cfg.Output == outputText {
				fmt.Fprintf(a.stderr, "graft: a create of %s in %s was already running as operation %s: this command followed it, "+
					"and operation %s was not started\n", req.Branch, req.Graph, res.OpID, req.IdempotencyKey)
			}
			return a.createResult(cmd, req.Graph, req.Branch, res, err)
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.FromBranch, "from-branch", "", "start from this branch's head (default: main)")
	f.StringVar(&req.FromCommit, "from-commit", "", "start from this commit id")
	f.StringVar(&req.FromTag, "from-tag", "", "start from this tag's commit")
	f.StringVar(&req.Author, "author", "", "author recorded on the fork commit")
	f.StringVarP(&req.Message, "message", "m", "", "message recorded on the fork commit")
	f.StringVar(&req.IdempotencyKey, "idempotency-key", "", "operation id; the same request repeated with it attaches to the running create, another request is a conflict (default: a fresh ULID)")
	f.BoolVar(&detach, "detach", false, "return as soon as the workflow has started")
	f.BoolVar(&final, "wait-settled", false, "wait through an in-doubt settle for the definitive outcome")
	return cmd
}

func checkSource(req client.CreateBranchRequest) error {
	given := slices.DeleteFunc([]string{req.FromBranch, req.FromCommit, req.FromTag},
		func(s string) bool { return s == "" })
	return cmp.Or(usageIf(len(given) > 1, "give at most one of --from-branch, --from-commit, --from-tag"),
		checkFlag("--from-branch", req.FromBranch, format.ValidateBranchName),
		checkFlag("--from-commit", req.FromCommit, validCommit), checkFlag("--from-tag", req.FromTag, format.ValidateTagName))
}

// createResult prints a create's result, or returns its outcome error with
// the next step for this graph and branch.
func (a *app) createResult(cmd *cobra.Command, graph, branch string, res workflows.CreateBranchResult, err error) error {
	if oe := (*outcome.Error)(nil); errors.As(err, &oe) {
		switch oe.Outcome {
		case outcome.InDoubt:
			return withNext(err, "%s", inDoubtNext(oe.OpID, graph, branch))
		case outcome.NotFound:
			return withNext(err, "check the graph and the source; `graft branch list %s` lists the graph's branches", graph)
		case outcome.Unpublished:
			return withNext(err, "branch %s was not created and never will be by operation %s; run `graft branch create %s %s` again",
				branch, oe.OpID, graph, branch)
		}
	}
	if err != nil {
		return err
	}
	return a.emitf(cmd, res, "%s branch %s in %s\n  native  %s\n  head    %s\n  from    %s\n  op      %s\n",
		res.Outcome, res.Branch, res.Graph, res.Native, res.Head, res.SourceCommit, res.OpID)
}

func (a *app) branchAbandonCommand() *cobra.Command {
	var (
		reason string
		noWait bool
	)
	cmd := &cobra.Command{
		Use:   "abandon GRAPH BRANCH",
		Short: "Settle an in-doubt create now, by fencing its ref instead of waiting for the put",
		Long: `abandon sends graft.abandon to the running create of BRANCH: the workflow
writes a fence at the ref key, so a late put can never land, and ends the
create. It then waits for the create's definitive outcome and exits with it:
unpublished (exit 3) when the fence won, created (exit 0) when the ref had
already landed. --no-wait returns once the signal is delivered.`,
		Args: exactArgs("GRAPH", "BRANCH"),
		RunE: func(cmd *cobra.Command, args []string) error {
			graph, branch := args[0], args[1]
			c, err := a.client(cmd.Context(), checkBranch(graph, branch))
			if err != nil {
				return err
			}
			if err := c.AbandonCreate(cmd.Context(), graph, branch, reason); err != nil {
				return nextOn(err, outcome.NotFound, "nothing to abandon; `graft branch show %s %s` says whether the branch exists", graph, branch)
			}
			if noWait {
				return a.emitf(cmd, map[string]string{"graph": graph, "branch": branch, "workflow_id": client.CreateBranchWorkflowID(graph, branch)},
					"abandon sent to the create of %s in %s\n", branch, graph)
			}
			res, err := c.AttachCreateBranch(cmd.Context(), graph, branch).WaitFinal(cmd.Context())
			if o, _ := outcome.Of(err); o == outcome.Unpublished {
				return withNext(err, "the branch does not exist and this create will never publish it; "+
					"run `graft branch create %s %s` to try again", graph, branch)
			}
			return a.createResult(cmd, graph, branch, res, err)
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "graft branch abandon", "why, recorded in the workflow's history and the create's message")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "return once the signal is delivered")
	return cmd
}

type branchList struct {
	Graph    string              `json:"graph"`
	Branches []client.BranchInfo `json:"branches"`
}

func (a *app) branchListCommand() *cobra.Command {
	return a.readCommand(&cobra.Command{
		Use:   "list GRAPH",
		Short: "List a graph's live branches with their heads (read from the store)",
		Args:  exactArgs("GRAPH"),
	}, graphArg, func(cmd *cobra.Command, r *client.Reader, args []string) error {
		bs, err := r.ListBranches(cmd.Context(), args[0])
		if err != nil {
			return err
		}
		bs = append([]client.BranchInfo{}, bs...) // [] in JSON, not null
		return a.emitTable(cmd, branchList{Graph: args[0], Branches: bs}, func(tw io.Writer) {
			fmt.Fprintln(tw, "BRANCH\tHEAD\tHEAD TIME\tTABLES\tNATIVE")
			for _, b := range bs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", b.Branch, b.Head, stamp(b.HeadTime), b.Tables, b.Native)
			}
		})
	})
}

func (a *app) branchShowCommand() *cobra.Command {
	return a.readCommand(&cobra.Command{
		Use:   "show GRAPH BRANCH",
		Short: "Show a branch: its live incarnation, ref and head commit (read from the store)",
		Args:  exactArgs("GRAPH", "BRANCH"),
	}, func(args []string) error { return checkBranch(args[0], args[1]) }, func(cmd *cobra.Command, r *client.Reader, args []string) error {
		graph := args[0]
		d, err := r.ShowBranch(cmd.Context(), graph, args[1])
		if err != nil {
			return nextOn(err, outcome.NotFound, "`graft branch list %s` lists the live branches; a create still running shows in `graft op list --graph %s`", graph, graph)
		}
		return a.emitTable(cmd, d, func(tw io.Writer) {
			fmt.Fprintf(tw, "branch\t%s (graph %s)\n", d.Branch, d.Graph)
			fmt.Fprintf(tw, "native\t%s\n", d.Native)
			fmt.Fprintf(tw, "ref\t%s (%s, op %s)\n", d.Ref.Key, d.Ref.State, d.Ref.Op)
			fmt.Fprintf(tw, "head\t%s\ntime\t%s\n", d.Head, stamp(d.HeadTime))
			fmt.Fprintf(tw, "author\t%s\nmessage\t%s\nop\t%s\n", d.Author, d.Message, d.Op)
			fmt.Fprintf(tw, "parents\t%s\n", strings.Join(d.Parents, ", "))
			rows(tw, "restored from", d.RestoredFrom)
			printPins(tw, d.Pins)
		})
	})
}

func (a *app) branchRepairCommand() *cobra.Command {
	var req client.RepairBranchRequest
	cmd := &cobra.Command{
		Use:   "repair GRAPH BRANCH --keep NATIVE",
		Short: "Make a branch with several live incarnations live through one again",
		Long: `repair starts graft.RepairBranch: every live ref of BRANCH but --keep's is
retired by compare-and-swap and stays as a fence. branch list and branch show
name the candidates when a branch needs repair (they report a conflict).`,
		Args: exactArgs("GRAPH", "BRANCH"),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Graph, req.Branch = args[0], args[1]
			c, err := a.begin(cmd.Context(), &req.IdempotencyKey, checkBranch(req.Graph, req.Branch),
				usageIf(req.Keep == "", "--keep NATIVE is required: the incarnation to keep live"),
				checkFlag("--keep", req.Keep, format.ValidateNative), req.Validate())
			if err != nil {
				return err
			}
			res, err := c.RepairBranch(cmd.Context(), req)
			if err != nil {
				return err
			}
			res.Retired = append([]string{}, res.Retired...)
			retired := cmp.Or(strings.Join(res.Retired, ", "), "(none: it was live through one already)")
			return a.emitf(cmd, res, "repaired branch %s in %s\n  kept     %s\n  retired  %s\n  op       %s\n",
				res.Branch, res.Graph, res.Kept, retired, res.OpID)
		},
	}
	cmd.Flags().StringVar(&req.Keep, "keep", "", "native name ({branch}.{ULID}) of the incarnation to keep live")
	cmd.Flags().StringVar(&req.IdempotencyKey, "idempotency-key", "", "operation id (default: a fresh ULID)")
	return cmd
}

func (a *app) branchDeleteCommand() *cobra.Command {
	var req client.DeleteBranchRequest
	cmd := &cobra.Command{
		Use:   "delete GRAPH BRANCH",
		Short: "Delete a branch: retire its live ref into a fence; cleanup reclaims its commits later",
		Long: `delete starts graft.DeleteBranch and waits for its outcome: deleted (exit 0).
The branch's live ref is retired by compare-and-swap and stays as a fence, so
the name can be created again as a fresh branch. Nothing else is deleted:
cleanup reclaims the branch's commits later, except those a tag names.

main is never deleted (invalid, exit 2). A branch a live tag names a commit
of is a conflict (exit 5) unless --force; forcing is safe, the tags keep
their commits. A branch whose create is still settling is a conflict too.`,
		Args: exactArgs("GRAPH", "BRANCH"),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Graph, req.Branch = args[0], args[1]
			var isMain error
			if req.Branch == graph.DefaultBranch {
				isMain = withNext(outcome.Errorf(outcome.Invalid, "", "%s cannot be deleted: it is every graph's default branch", req.Branch),
					"restore main to an earlier commit instead: `graft restore %s main --commit C` or `--tag T`", req.Graph)
			}
			c, err := a.begin(cmd.Context(), &req.IdempotencyKey, checkBranch(req.Graph, req.Branch), isMain, checkOpKey(req.IdempotencyKey))
			if err != nil {
				return err
			}
			res, err := c.DeleteBranch(cmd.Context(), req)
			if err != nil {
				return branchDeleteError(req, res, err)
			}
			return a.emitTable(cmd, res, func(tw io.Writer) {
				fmt.Fprintf(tw, "deleted branch %s in %s\n", res.Branch, res.Graph)
				rows(tw, "  native", res.Native+" (its ref is now a fence)", "  head", res.Head,
					"  kept by tags", strings.Join(res.Tags, ", "), "  op", res.OpID)
			})
		},
	}
	cmd.Flags().BoolVar(&req.Force, "force", false, "delete although live tags name commits of the branch (the tags keep them)")
	cmd.Flags().StringVar(&req.IdempotencyKey, "idempotency-key", "", "operation id (default: a fresh ULID)")
	return cmd
}

func branchDeleteError(req client.DeleteBranchRequest, res workflows.DeleteBranchResult, err error) error {
	if len(res.Tags) > 0 && !req.Force {
		err = nextOn(err, outcome.Conflict, "delete the tags first (`graft tag delete %s NAME`), or run `graft branch delete %s %s --force`: the tags keep their commits",
			req.Graph, req.Graph, req.Branch)
	}
	return nextOn(settlingNext(err, "the delete"), outcome.NotFound, "`graft branch list %s` lists the graph's live branches", req.Graph)
}

func firstRow(i int, label string) string {
	if i == 0 {
		return label
	}
	return ""
}

func printPins(w io.Writer, pins []client.TablePin) {
	for i, p := range pins {
		fmt.Fprintf(w, "%s\t%s @ %s\n", firstRow(i, "tables"), p.Table, p.Version)
	}
}

// defaultCheckQueue is the task queue of a --check written without @QUEUE.
const defaultCheckQueue = "graft-checks"

func (a *app) branchProtectCommand() *cobra.Command {
	var (
		checks []string
		queue  string
		rule   client.BranchRule
	)
	cmd := &cobra.Command{
		Use:   "protect GRAPH BRANCH --check NAME[@QUEUE]... [--approvals N]",
		Short: "Protect a branch: merges into it wait for checks and approvals",
		Long: `protect sets the rule of BRANCH in the ledger, replacing any it had; the
branch need not exist yet. A merge into a protected branch plans as any merge,
then waits: it starts every check of the rule as a child workflow on the
plan, and commits once every check passed and --approvals reviewers approved
its source head (graft merge approve). A failed check, a rejection (graft
merge reject) or a passed --wait-timeout ends it rejected (exit 11), with
nothing written. There is no override: to merge without the rule, remove it
(graft branch unprotect).

A check is the name of a Temporal workflow type, started on task queue QUEUE
by a worker of your own (examples/checks is one); --check-queue gives the
queue of every --check written without @QUEUE. A rule needs at least one
check or one approval. --as records who set the rule, as they name
themselves: graft does not authenticate it.`,
		Args: exactArgs("GRAPH", "BRANCH"),
		RunE: func(cmd *cobra.Command, args []string) error {
			rule.Graph, rule.Branch = args[0], args[1]
			rule.SetBy = cmp.Or(rule.SetBy, a.lookupOr("USER", "graft"))
			rule.Checks = make([]client.BranchCheck, len(checks))
			for i, c := range checks {
				name, q, found := strings.Cut(c, "@")
				if !found {
					q = queue
				}
				rule.Checks[i] = client.BranchCheck{Name: name, TaskQueue: q}
			}
			ops, err := a.ops(cmd.Context(), false, checkBranch(rule.Graph, rule.Branch), rule.Validate())
			if err != nil {
				return err
			}
			got, err := ops.Protect(cmd.Context(), rule)
			if err != nil {
				return err
			}
			return a.emitTable(cmd, got, func(tw io.Writer) {
				fmt.Fprintf(tw, "protected branch %s in %s\n", got.Branch, got.Graph)
				printRule(tw, got)
			})
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&checks, "check", nil, "a check: the workflow type NAME, started on task queue QUEUE (repeat for more)")
	f.StringVar(&queue, "check-queue", defaultCheckQueue, "the task queue of a --check written without @QUEUE")
	f.IntVar(&rule.Approvals, "approvals", 0, "approvals by distinct reviewers a merge needs")
	f.StringVar(&rule.SetBy, "as", "", `who sets the rule, as recorded in the ledger (default: $USER, else "graft")`)
	return cmd
}

// lookupOr is the environment variable name, or def when it is unset or empty.
func (a *app) lookupOr(name, def string) string {
	v, _ := a.lookup(name)
	return cmp.Or(v, def)
}

type branchRules struct {
	Graph string              `json:"graph"`
	Rules []client.BranchRule `json:"rules"`
}

func (a *app) branchProtectionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "protection GRAPH [BRANCH]",
		Short: "Show a branch's rule, or every rule of a graph (read from the ledger)",
		Long: `protection shows the rule of BRANCH — its checks (NAME@QUEUE), the approvals
it needs, who set it and when — and is not_found (exit 6) for a branch
without one. Without BRANCH it lists every rule of GRAPH, by branch.`,
		Args: func(cmd *cobra.Command, args []string) error {
			return usageIf(len(args) < 1 || len(args) > 2,
				fmt.Sprintf("%s takes GRAPH and optionally BRANCH, got %d argument(s)", cmd.CommandPath(), len(args)))
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			graph := args[0]
			if len(args) == 1 {
				ops, err := a.ops(cmd.Context(), false, checkGraph(graph))
				if err != nil {
					return err
				}
				rules, err := ops.Protections(cmd.Context(), graph)
				if err != nil {
					return err
				}
				return a.emitTable(cmd, branchRules{Graph: graph, Rules: rules}, func(tw io.Writer) {
					if len(rules) == 0 {
						fmt.Fprintf(tw, "no branch of %s is protected\n", graph)
						return
					}
					fmt.Fprintln(tw, "BRANCH\tCHECKS\tAPPROVALS\tSET BY\tUPDATED")
					for _, r := range rules {
						fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", r.Branch, orDash(checkList(r)), r.Approvals, orDash(r.SetBy), stamp(r.UpdatedAt))
					}
				})
			}
			ops, err := a.ops(cmd.Context(), false, checkBranch(graph, args[1]))
			if err != nil {
				return err
			}
			r, err := ops.Protection(cmd.Context(), graph, args[1])
			if err != nil {
				return unprotectedNext(err, graph)
			}
			return a.emitTable(cmd, r, func(tw io.Writer) {
				fmt.Fprintf(tw, "branch %s in %s is protected\n", r.Branch, r.Graph)
				printRule(tw, r)
			})
		},
	}
}

func (a *app) branchUnprotectCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "unprotect GRAPH BRANCH",
		Short: "Remove a branch's rule: merges into it no longer wait",
		Long: `unprotect deletes the rule of BRANCH from the ledger (not_found, exit 6, when
it has none); the ledger keeps no record of the removal. A merge already
waiting keeps the rule it planned with until it plans again: end it with
graft merge reject and merge again.`,
		Args: exactArgs("GRAPH", "BRANCH"),
		RunE: func(cmd *cobra.Command, args []string) error {
			graph, branch := args[0], args[1]
			ops, err := a.ops(cmd.Context(), false, checkBranch(graph, branch))
			if err != nil {
				return err
			}
			if err := ops.Unprotect(cmd.Context(), graph, branch); err != nil {
				return unprotectedNext(err, graph)
			}
			return a.emitf(cmd, map[string]any{"graph": graph, "branch": branch, "protected": false},
				"branch %s in %s is no longer protected\n", branch, graph)
		},
	}
}

func unprotectedNext(err error, graph string) error {
	return nextOn(err, outcome.NotFound, "`graft branch protection %s` lists the graph's rules", graph)
}

// printRule writes a rule's rows.
func printRule(tw io.Writer, r client.BranchRule) {
	rows(tw, "  checks", checkList(r))
	fmt.Fprintf(tw, "  approvals\t%d\n", r.Approvals)
	rows(tw, "  set by", r.SetBy)
	fmt.Fprintf(tw, "  updated\t%s\n", stamp(r.UpdatedAt))
}

// checkList is a rule's checks as --check takes them: NAME@QUEUE, ...
func checkList(r client.BranchRule) string {
	s := make([]string, len(r.Checks))
	for i, c := range r.Checks {
		s[i] = c.Name + "@" + c.TaskQueue
	}
	return strings.Join(s, ", ")
}
