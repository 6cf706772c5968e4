package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/spf13/cobra"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/workflows"
)

func (a *app) mergeCommand() *cobra.Command {
	var (
		req           client.MergeRequest
		detach, final bool
	)
	cmd := &cobra.Command{
		Use:   "merge GRAPH SOURCE [--into TARGET]",
		Short: "Merge a branch into another (main by default), table by table",
		Long: `merge starts graft.Merge and waits for its outcome. The merge finds the
merge base of SOURCE's and TARGET's heads and classifies every table: the
target adopts a table only SOURCE changed, keeps one only TARGET changed, and
a table both changed is a conflict. With no conflict one commit is appended
to TARGET: merged (exit 0), or adopted (exit 0) when TARGET's head was an
ancestor of SOURCE's; already_up_to_date (exit 0) when there is nothing to
adopt. Any conflict writes nothing and exits 5, listing every conflicting
table (in json mode also as "conflicts" in the error object).

--preview plans the merge and prints the plan with the outcome the merge
would have, writing nothing to the store or the ledger; a conflict still
exits 5. in_doubt (exit 4) means the merge commit's put answered
ambiguously and the workflow is settling it; --wait-settled waits through
that instead. --expected-head makes the merge a conflict unless TARGET's
head is that commit.

Into a protected branch (graft branch protect) a merge that would write
waits after its plan, in phase waiting, for the branch rule's checks and
approvals, and this command waits with it, showing on stderr what it waits
for; graft merge approve and graft merge reject review it. It commits once
every check passed and enough reviewers approved its source head; a failed
check, a rejection, or --wait-timeout passing first ends it rejected
(exit 11) with nothing written. --detach returns as soon as the workflow has
started, with its operation id: graft op wait follows it, graft op list
--waiting lists the merges waiting now.`,
		Args: exactArgs("GRAPH", "SOURCE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Graph, req.Source = args[0], args[1]
			var itself error
			if req.Source == req.Target {
				itself = outcome.Errorf(outcome.Invalid, "", "cannot merge %q into itself; name another target with --into", req.Source)
			}
			c, err := a.begin(cmd.Context(), &req.IdempotencyKey, checkBranch(req.Graph, req.Source), checkFlag("--into", req.Target, format.ValidateBranchName),
				itself, checkFlag("--expected-head", req.ExpectedHead, validCommit), checkCommitText(req.Author, req.Message),
				checkOpKey(req.IdempotencyKey), usageIf(detach && final, "--detach and --wait-settled are mutually exclusive"),
				usageIf(detach && req.Preview, "--detach does not go with --preview: a preview is not an operation to follow"), req.Validate())
			if err != nil {
				return err
			}
			h, err := c.StartMerge(cmd.Context(), req)
			if err != nil {
				return err
			}
			if detach {
				st := startedMerge{Graph: req.Graph, Source: req.Source, Target: req.Target, OpID: h.OpID, WorkflowID: h.WorkflowID, RunID: h.RunID}
				return a.emitf(cmd, st, "started merge of %s into %s in %s\n  workflow  %s\n  run       %s\n  op        %s\nwatch it with `graft op wait %s`\n",
					st.Source, st.Target, st.Graph, st.WorkflowID, st.RunID, st.OpID, st.OpID)
			}
			res, err := waitMerge(cmd.Context(), h, final, a.progress(cmd))
			if err != nil {
				return mergeError(req, res, err)
			}
			return a.emit(cmd, res, func(w io.Writer) error { return printMerge(w, res) })
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Target, "into", graph.DefaultBranch, "the branch to merge into")
	f.StringVar(&req.ExpectedHead, "expected-head", "", "conflict unless the target's head is this commit id")
	f.BoolVar(&req.Preview, "preview", false, "print the plan and the outcome the merge would have; write nothing")
	f.StringVar(&req.Author, "author", "", `author of the merge commit (default "graft")`)
	f.StringVarP(&req.Message, "message", "m", "", `message of the merge commit (default "merge SOURCE into TARGET")`)
	f.StringVar(&req.IdempotencyKey, "idempotency-key", "", "operation id; the same request repeated with it attaches to the first merge, another request is a conflict (default: a fresh ULID)")
	f.BoolVar(&final, "wait-settled", false, "wait through an in-doubt settle for the definitive outcome")
	f.BoolVar(&detach, "detach", false, "return as soon as the workflow has started, with its operation id")
	f.DurationVar(&req.WaitTimeout, "wait-timeout", 0, "into a protected branch: end rejected if the checks and approvals are not in by then (default: no deadline)")
	cmd.AddCommand(a.mergeReviewCommand(true), a.mergeReviewCommand(false))
	return cmd
}

type startedMerge struct {
	Graph      string `json:"graph"`
	Source     string `json:"source"`
	Target     string `json:"target"`
	OpID       string `json:"op_id"`
	WorkflowID string `json:"workflow_id"`
	RunID      string `json:"run_id"`
}

// waitMerge waits for the merge's outcome as waitFor does; while the merge waits for
// its target's checks and approvals, pr shows what it waits for.
func waitMerge(ctx context.Context, h *client.MergeHandle, final bool, pr *lineProgress) (workflows.MergeResult, error) {
	if pr != nil {
		stop := pollEvery(ctx, func(pctx context.Context) {
			if st, err := h.Status(pctx); err == nil && st.Phase == workflows.PhaseWaiting {
				pr.Update(workflows.PhaseWaiting+": "+st.Pending, 0, 0)
			}
		})
		defer func() { stop(); pr.Finish() }()
	}
	return waitFor(ctx, final, h.Wait, h.WaitFinal)
}

// reviewRetry bounds how long a review retries a merge that is not waiting (planning
// again after a moved head) before it gives up.
const reviewRetry = 10 * time.Second

func (a *app) mergeReviewCommand(approve bool) *cobra.Command {
	req := client.ReviewRequest{Approve: approve}
	cmd := &cobra.Command{
		Use:   "approve OP --as NAME [--comment TEXT] [--head COMMIT]",
		Short: "Approve a merge waiting for a protected branch's approvals",
		Long: `approve records an approval of the waiting merge OP in the ledger, through
the merge's workflow (the graft.review update), and prints what the merge
waits for now. An approval counts for the source head the merge would now
merge, once per reviewer; when the source moves, the merge plans again and
needs new approvals. --head names the source head you looked at: the
approval is then refused (conflict, exit 5) if the merge would now merge
another. --as is who approves, as recorded: graft does not authenticate it.

A merge that is not waiting — it ended, or it is planning again, which this
command retries for a few seconds — is a conflict (exit 5). graft op list
--waiting lists the merges waiting now; graft op show OP their reviews.`,
		Args: exactArgs("OP"),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.OpID = args[0]
			what := "approved"
			if !req.Approve {
				what = "rejected"
			}
			ops, err := a.ops(cmd.Context(), true, checkOpID(req.OpID), usageIf(req.Reviewer == "", "--as NAME is required: who reviews"),
				usageIf(!req.Approve && req.Comment == "", "--reason TEXT is required: why the merge is rejected"),
				checkFlag("--head", req.SourceHead, validCommit), req.Validate())
			if err != nil {
				return err
			}
			if a.tcErr != nil {
				return a.tcErr
			}
			w, err := review(cmd.Context(), ops, req)
			if err != nil {
				return nextOn(opNotFound(err), outcome.Conflict, "`graft op show %s` says where the merge stands", req.OpID)
			}
			rv := reviewed{OpID: req.OpID, Review: client.Review{Reviewer: req.Reviewer, Approve: req.Approve, Comment: req.Comment,
				SourceHead: w.SourceHead}, Wait: w}
			now := "waits for  " + w.Summary()
			switch {
			case !req.Approve:
				now = "it ends rejected and writes nothing"
			case w.Cleared():
				now = "nothing more: it commits now"
			}
			return a.emitf(cmd, rv, "%s merge %s as %s (source head %s)\n  %s\n", what, req.OpID, req.Reviewer, w.SourceHead, now)
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Reviewer, "as", "", "who reviews, as recorded in the ledger (required)")
	if approve {
		f.StringVar(&req.Comment, "comment", "", "a comment recorded with the approval")
		f.StringVar(&req.SourceHead, "head", "", "the source head you reviewed: conflict if the merge would now merge another")
		return cmd
	}
	cmd.Use = "reject OP --as NAME --reason TEXT"
	cmd.Short = "Reject a merge waiting for a protected branch's approvals: it ends rejected"
	cmd.Long = `reject records a rejection of the waiting merge OP in the ledger, with its
reason, through the merge's workflow (the graft.review update): the merge
ends rejected (exit 11 for whoever waits for it) and writes nothing. It is
also how an operator ends a merge that waits with a rule that was changed
or removed since it planned. --as is who rejects, as recorded: graft does
not authenticate it.

A merge that is not waiting — it ended, or it is planning again, which this
command retries for a few seconds — is a conflict (exit 5).`
	f.StringVar(&req.Comment, "reason", "", "why the merge is rejected, recorded and in the merge's message (required)")
	return cmd
}

// reviewed is a review as approve and reject print it, with what the merge waits for after it.
type reviewed struct {
	OpID string `json:"op_id"`
	client.Review
	Wait client.MergeWait `json:"wait"`
}

// review sends req, retrying for up to reviewRetry while the merge is not waiting (it
// is planning again).
func review(ctx context.Context, ops *client.Ops, req client.ReviewRequest) (client.MergeWait, error) {
	deadline := time.Now().Add(reviewRetry)
	for {
		w, err := ops.Review(ctx, req)
		var oe *outcome.Error
		if !errors.As(err, &oe) || oe.Outcome != outcome.Conflict || !strings.Contains(oe.Message, "not waiting") || time.Now().After(deadline) {
			return w, err
		}
		select {
		case <-ctx.Done():
			return w, err
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// mergeError adds the next step to a failed merge and, for a conflict over
// tables, names every one of them.
func mergeError(req client.MergeRequest, res workflows.MergeResult, err error) error {
	var oe *outcome.Error
	if !errors.As(err, &oe) {
		return err
	}
	switch oe.Outcome {
	case outcome.InDoubt:
		return settlingNext(err, "the merge commit")
	case outcome.Conflict:
		conflicts := slices.DeleteFunc(slices.Clone(res.Tables), func(t workflows.MergeTable) bool { return t.Action != workflows.MergeConflict })
		if len(conflicts) == 0 {
			return withNext(err, "look at %s with `graft branch show %s %s`, then merge again", req.Target, req.Graph, req.Target)
		}
		names := make([]string, len(conflicts))
		for i, t := range conflicts {
			names[i] = t.Table
			if len(t.Conflicts) > 0 { // the objects both sides changed differently
				names[i] += " (objects " + strings.Join(t.Conflicts, ", ")
				if more := t.ConflictCount - int64(len(t.Conflicts)); more > 0 {
					names[i] += fmt.Sprintf(" and %d more", more)
				}
				names[i] += ")"
			}
		}
		e := &outcome.Error{Outcome: oe.Outcome, OpID: oe.OpID,
			Message: fmt.Sprintf("%s; conflicting tables: %s", oe.Message, strings.Join(names, ", "))}
		return &nextStepError{tables: conflicts, err: e, next: fmt.Sprintf(
			"write the version each conflicting table should have on %s or %s, then merge again "+
				"(`graft merge %s %s --into %s --preview` shows the plan and writes nothing)",
			req.Source, req.Target, req.Graph, req.Source, req.Target)}
	case outcome.Rejected:
		return withNext(err, "nothing was written: `graft op show %s` lists the reviews; fix what was reported on %s, then merge again "+
			"(a new merge runs every check again and needs new approvals; `graft branch protection %s %s` shows the rule)",
			oe.OpID, req.Source, req.Graph, req.Target)
	case outcome.NotFound:
		return withNext(err, "check the graph and both branches; `graft branch list %s` lists the graph's branches", req.Graph)
	case outcome.NotRetained:
		return withNext(err, "cleanup reclaimed a commit the merge needs (often an old fork point); "+
			"keep branches within cleanup's window, or tag their fork points")
	}
	return err
}

func printMerge(w io.Writer, res workflows.MergeResult) error {
	switch {
	case res.Preview:
		fmt.Fprintf(w, "preview of merge %s into %s in %s: would be %s (nothing was written)\n", res.Source, res.Target, res.Graph, res.Outcome)
	case res.Outcome == outcome.AlreadyUpToDate:
		fmt.Fprintf(w, "%s is already up to date with %s in %s: nothing was written\n", res.Target, res.Source, res.Graph)
	default:
		fmt.Fprintf(w, "%s %s into %s in %s\n", res.Outcome, res.Source, res.Target, res.Graph)
	}
	tw := newTable(w)
	rows(tw, "  commit", res.Commit)
	fmt.Fprintf(tw, "  source head\t%s\n  target head\t%s\n", res.SourceHead, res.TargetHead)
	fmt.Fprintf(tw, "  bases\t%s\n", strings.Join(res.Bases, ", "))
	rows(tw, "  op", res.OpID)
	if err := tw.Flush(); err != nil {
		return err
	}
	tw = newTable(w)
	objects := "" // the column of per-table object counts, when any table has one
	for _, t := range res.Tables {
		if t.Added != 0 || t.Removed != 0 || t.Replaced != 0 || t.ConflictCount != 0 {
			objects = "OBJECTS\t"
		}
	}
	if len(res.Tables) > 0 {
		fmt.Fprintln(tw, "TABLE\tACTION\t"+objects+"BASE\tSOURCE\tTARGET")
	}
	for _, t := range res.Tables {
		counts := ""
		if t.ConflictCount > 0 {
			counts = fmt.Sprintf("%d in conflict\t", t.ConflictCount)
		} else if objects != "" {
			counts = fmt.Sprintf("+%d -%d ~%d\t", t.Added, t.Removed, t.Replaced)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s%s\t%s\t%s\n", t.Table, t.Action, counts, orDash(t.Base), orDash(t.Source), orDash(t.Target))
	}
	fmt.Fprintf(tw, "%d table(s) unchanged\n", res.Unchanged)
	return tw.Flush()
}

// begin ends a mutating command's local checks: the first failed check, in
// order, is the command's error, so nothing is contacted. Otherwise the request
// gets a fresh operation id when it has none — the operation the command
// reports if it is interrupted (refineNext) — and the command its client.
func (a *app) begin(ctx context.Context, key *string, checks ...error) (*client.Client, error) {
	if err := cmp.Or(checks...); err != nil {
		return nil, err
	}
	if *key == "" {
		*key = ulid.Make().String()
	}
	a.startedOp = *key
	return a.client(ctx)
}

// waitFor waits for a started operation's outcome: the first definitive one, or
// with --wait-settled (final) the outcome after any in-doubt settle.
func waitFor[R any](ctx context.Context, final bool, wait, waitFinal func(context.Context) (R, error)) (R, error) {
	if final {
		return waitFinal(ctx)
	}
	return wait(ctx)
}

func settlingNext(err error, what string) error {
	var oe *outcome.Error
	if errors.As(err, &oe) && oe.Outcome == outcome.InDoubt {
		return withNext(err, "operation %s is settling %s; watch it with `graft op wait %s`", oe.OpID, what, oe.OpID)
	}
	return err
}
