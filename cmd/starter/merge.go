package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

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
		req   client.MergeRequest
		final bool
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
head is that commit.`,
		Args: exactArgs("GRAPH", "SOURCE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Graph, req.Source = args[0], args[1]
			var itself error
			if req.Source == req.Target {
				itself = outcome.Errorf(outcome.Invalid, "", "cannot merge %q into itself; name another target with --into", req.Source)
			}
			c, err := a.begin(cmd.Context(), &req.IdempotencyKey, checkBranch(req.Graph, req.Source), checkFlag("--into", req.Target, format.ValidateBranchName),
				itself, checkFlag("--expected-head", req.ExpectedHead, validCommit), checkCommitText(req.Author, req.Message),
				checkOpKey(req.IdempotencyKey), req.Validate())
			if err != nil {
				return err
			}
			h, err := c.StartMerge(cmd.Context(), req)
			if err != nil {
				return err
			}
			res, err := waitFor(cmd.Context(), final, h.Wait, h.WaitFinal)
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
	return cmd
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
