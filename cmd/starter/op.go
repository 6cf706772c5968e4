package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
)

// opView is an operation as the op commands print it: the client's, with
// its ages as Go duration strings ("1m30s"), and the keys it keeps pinned
// past its end for puts that may still land (op show only).
type opView struct {
	client.OperationDetail
	Age        string           `json:"age,omitempty"`
	InStateFor string           `json:"in_state_for,omitempty"`
	LatePuts   []client.LatePut `json:"late_puts,omitempty"`
	// Reviews are a merge's approvals and rejections (op show only).
	Reviews []client.Review `json:"reviews,omitempty"`
}

func viewOp(op client.Operation) opView {
	return opView{OperationDetail: client.OperationDetail{Operation: op}}
}

// viewDetail is d's view; a finished operation's says only what the ledger row does.
func viewDetail(d client.OperationDetail) opView {
	if d.State == client.OperationDone {
		return viewOp(d.Operation)
	}
	return opView{OperationDetail: d, Age: d.Age.String(), InStateFor: d.InStateFor.String()}
}

type opList struct {
	Operations []opView `json:"operations"`
}

func (a *app) opListCommand() *cobra.Command {
	var (
		f          client.OpsFilter
		stuck      bool
		runningFor time.Duration
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List operations, newest first; --stuck lists those not moving on, with what each waits for",
		Long: `list reads the ledger's audit log, newest first.

--stuck lists instead, oldest first, the operations that are not moving on by
themselves or not quickly: in doubt (a write may still land), parked, or
running for longer than --running-for (default 10m) — each with its phase and
what it waits for, from the running workflow when it answers, else from its
pending step or from the ledger.

--waiting lists the merges waiting now for a protected branch's checks and
approvals, newest first, each with what it waits for ("checks: quality
passed, schema running; approvals 0/1"); graft merge approve and graft
merge reject review them.`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ops, err := a.ops(cmd.Context(), stuck, ifGiven(f.Graph, checkGraph),
				usageIf(!stuck && cmd.Flags().Changed("running-for"), "--running-for goes with --stuck"),
				usageIf(stuck && f.Waiting, "--stuck and --waiting are mutually exclusive"),
				usageIf(stuck && (f.Kind != "" || f.State != ""),
					"--stuck lists unfinished operations of every kind: drop --kind and --state"))
			if err != nil {
				return err
			}
			if !stuck {
				list, err := ops.List(cmd.Context(), f)
				if err != nil {
					return err
				}
				res := opList{Operations: make([]opView, len(list))}
				for i, op := range list {
					res.Operations[i] = viewOp(op)
				}
				if f.Waiting {
					return a.emitTable(cmd, res, func(tw io.Writer) {
						if len(list) == 0 {
							fmt.Fprintln(tw, "no merge is waiting for checks or approvals")
							return
						}
						fmt.Fprintln(tw, "ID\tGRAPH\tMERGE\tCREATED\tWAITS FOR")
						for _, op := range list {
							var in struct{ Source, Target string }
							_ = json.Unmarshal(op.Inputs, &in)
							fmt.Fprintf(tw, "%s\t%s\t%s into %s\t%s\t%s\n", op.ID, op.Graph, in.Source, in.Target, stamp(op.CreatedAt), op.Waiting)
						}
					})
				}
				return a.emitTable(cmd, res, func(tw io.Writer) {
					fmt.Fprintln(tw, "ID\tKIND\tGRAPH\tSTATE\tOUTCOME\tCREATED")
					for _, op := range res.Operations {
						fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", op.ID, op.Kind, op.Graph, op.State, op.Outcome, stamp(op.CreatedAt))
					}
				})
			}
			list, err := ops.Stuck(cmd.Context(), client.StuckFilter{Graph: f.Graph, RunningFor: runningFor, Limit: f.Limit})
			if err != nil {
				return err
			}
			res := opList{Operations: make([]opView, len(list))}
			for i, d := range list {
				res.Operations[i] = viewDetail(d)
			}
			return a.emit(cmd, res, func(w io.Writer) error {
				if len(res.Operations) == 0 {
					_, err := fmt.Fprintln(w, "no operation is in doubt, parked or running long")
					return err
				}
				tw := newTable(w)
				fmt.Fprintln(tw, "ID\tKIND\tGRAPH\tSTATE\tFOR\tPHASE\tWAITS FOR")
				for _, op := range res.Operations {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", op.ID, op.Kind, op.Graph, op.State, op.InStateFor, orDash(op.Phase), op.WaitsFor)
				}
				return flushNote(tw, w, a.temporalNote())
			})
		},
	}
	cmd.Flags().StringVar(&f.Graph, "graph", "", "only this graph's operations")
	cmd.Flags().StringVar(&f.Kind, "kind", "", "only this kind: "+strings.Join(client.OperationKinds, ", "))
	cmd.Flags().StringVar(&f.State, "state", "", "only this state: running, in_doubt or done")
	cmd.Flags().IntVar(&f.Limit, "limit", 0, "at most this many (default 100, at most 1000)")
	cmd.Flags().BoolVar(&f.Waiting, "waiting", false, "only merges waiting for a protected branch's checks and approvals, with what each waits for")
	cmd.Flags().BoolVar(&stuck, "stuck", false, "only operations in doubt, parked, or running longer than --running-for, with what each waits for")
	cmd.Flags().DurationVar(&runningFor, "running-for", 10*time.Minute, "with --stuck: how long a running operation may run before it is listed")
	return cmd
}

func (a *app) opShowCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "show OP_ID",
		Short: "Show one operation from the ledger; an unfinished one with its phase and what it waits for",
		Args:  exactArgs("OP_ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ops, err := a.ops(cmd.Context(), false, checkOpID(args[0]))
			if err != nil {
				return err
			}
			op, err := ops.Show(cmd.Context(), args[0])
			if err != nil {
				return opNotFound(err)
			}
			v, note := viewOp(op), ""
			if op.State != client.OperationDone {
				// Ask the workflow too: reopen Ops with Temporal when it answers.
				if withTemporal, err := a.ops(cmd.Context(), true); err == nil {
					ops = withTemporal
				}
				d, err := ops.Detail(cmd.Context(), args[0])
				if err != nil {
					return opNotFound(err)
				}
				v, note = viewDetail(d), a.temporalNote()
			}
			// A finished operation may still hold keys for a put that can land late.
			if v.LatePuts, err = ops.LatePuts(cmd.Context(), client.LatePutsFilter{OpID: op.ID}); err != nil {
				return err
			}
			if op.Kind == "merge" {
				if v.Reviews, err = ops.Reviews(cmd.Context(), op.ID); err != nil {
					return err
				}
			}
			return a.emit(cmd, v, func(w io.Writer) error { return printOp(w, v, note) })
		},
	}
}

func (a *app) opWaitCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "wait OP_ID",
		Short: "Wait until an operation is done, through any in-doubt settle, and exit with its outcome",
		Long: `wait follows the operation's workflow until it completes, then prints the
operation and exits with its outcome's exit code (docs/outcomes.md).`,
		Args: exactArgs("OP_ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ops, err := a.ops(cmd.Context(), false, checkOpID(args[0]))
			if err != nil {
				return err
			}
			if _, err := ops.Show(cmd.Context(), args[0]); err != nil { // before dialling Temporal
				return opNotFound(err)
			}
			if ops, err = a.ops(cmd.Context(), true); err != nil {
				return err
			}
			if a.tcErr != nil {
				return a.tcErr
			}
			op, err := ops.Wait(cmd.Context(), args[0])
			if err != nil {
				return withNext(opNotFound(err), "`graft op show %s` says what the ledger and the workflow say; "+
					"`graft op reconcile` settles an operation whose workflow ended without finishing it", args[0])
			}
			v := viewOp(op)
			// A finished operation exits with its outcome's code: the vocabulary's
			// (merged, adopted, already_up_to_date and deleted are successes like
			// created and done); the ledger's failed is a failure.
			if op.Outcome.Valid() && op.Outcome.ExitCode() != outcome.ExitOK || op.Outcome == client.OutcomeFailed {
				msg := cmp.Or(op.Error, fmt.Sprintf("operation %s ended %s", op.ID, op.Outcome))
				if op.Outcome.Valid() {
					return &outcome.Error{Outcome: op.Outcome, OpID: op.ID, Message: msg}
				}
				return withNext(errors.New(msg), "`graft op show %s` and the workflow %s in the Web UI say more", op.ID, op.WorkflowID)
			}
			return a.emit(cmd, v, func(w io.Writer) error { return printOp(w, v, "") })
		},
	}
}

func (a *app) opReconcileCommand() *cobra.Command {
	var req client.ReconcileRequest
	cmd := &cobra.Command{
		Use:   "reconcile",
		Short: "Settle ledger rows whose workflow ended without recording the end (terminated, timed out, reset, lost)",
		Long: `reconcile runs one pass of the reconciler (` + client.ReconcileWorkflowName + `, workflow id
` + client.ReconcileWorkflowID + `) now and waits for it: every ledger row whose workflow is
closed is settled as its own workflow would have settled it — a create is
fenced and reclaimed, or found created; a commit write is read back and
finished — and pins are released only once the outcome is definitive. The
worker also runs it on a schedule.`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client(cmd.Context(), req.Validate())
			if err != nil {
				return err
			}
			res, err := c.Reconcile(cmd.Context(), req)
			if err != nil {
				return err
			}
			return a.emit(cmd, res, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "reconciled: %d unfinished operation(s) examined, %d still running, %d settled or parked\n",
					res.Examined, res.Open, len(res.Settled))
				for _, op := range res.Settled {
					state := string(op.Outcome)
					if op.Parked {
						state = "parked (in doubt; the next pass tries again)"
					}
					fmt.Fprintf(w, "  %s  %s  %s  %s\n", op.OpID, op.Kind, state, op.Message)
				}
				return err
			})
		},
	}
	cmd.Flags().StringVar(&req.Graph, "graph", "", "only this graph's operations")
	return cmd
}

func opNotFound(err error) error {
	return nextOn(err, outcome.NotFound, "`graft op list` lists recent operations (--graph, --kind and --state narrow it)")
}

func printOp(w io.Writer, v opView, note string) error {
	tw := newTable(w)
	fmt.Fprintf(tw, "operation\t%s\nkind\t%s\ngraph\t%s\n", v.ID, v.Kind, v.Graph)
	state := string(v.State)
	if v.InStateFor != "" {
		state += " for " + v.InStateFor
	}
	witness, waits := v.Native, ""
	if v.Native != "" && v.WitnessState != "" {
		witness += " (" + v.WitnessState + ")"
	}
	if v.WaitsFor != "" {
		waits = fmt.Sprintf("%s (from the %s)", v.WaitsFor, v.From)
	}
	fmt.Fprintf(tw, "state\t%s\n", state)
	rows(tw, "outcome", string(v.Outcome), "error", v.Error, "phase", v.Phase, "native", witness, "waits for", waits)
	fmt.Fprintf(tw, "workflow\t%s (run %s)", v.WorkflowID, v.RunID)
	if v.Workflow != "" {
		fmt.Fprintf(tw, ", %s", v.Workflow)
	}
	fmt.Fprintf(tw, "\ncreated\t%s\n", stamp(v.CreatedAt))
	if !v.FinishedAt.IsZero() {
		fmt.Fprintf(tw, "finished\t%s\n", stamp(v.FinishedAt))
	}
	if v.PendingWrite != "" {
		fmt.Fprintf(tw, "pending write\t%s (re-issued %d times)\n", v.PendingWrite, v.SettleAttempts)
	}
	for _, p := range v.LatePuts {
		fmt.Fprintf(tw, "late-put pin\t%s %s, held since %s\n", p.Kind, p.Key, stamp(p.HeldSince))
	}
	for i, rv := range v.Reviews {
		verdict, why := "approved", ""
		if !rv.Approve {
			verdict, why = "rejected", "because "
		}
		line := fmt.Sprintf("%s by %s at %s, of source head %s", verdict, rv.Reviewer, rv.At, rv.SourceHead)
		if rv.Comment != "" {
			line += ": " + why + rv.Comment
		}
		fmt.Fprintf(tw, "%s\t%s\n", firstRow(i, "reviews"), line)
	}
	rows(tw, "inputs", string(v.Inputs))
	for _, k := range slices.Sorted(maps.Keys(v.Extra)) {
		fmt.Fprintf(tw, "%s\t%s\n", strings.ReplaceAll(k, "_", " "), v.Extra[k])
	}
	if len(v.LatePuts) > 0 && v.State == client.OperationDone {
		// the callers give a note only for an unfinished operation: none is lost
		note = fmt.Sprintf("next: once no put of it can arrive any more, `graft op release-late-puts %s` (docs/operations.md, \"Late-put pins\")", v.ID)
	}
	return flushNote(tw, w, note)
}

func flushNote(tw *tabwriter.Writer, w io.Writer, note string) error {
	if err := tw.Flush(); err != nil {
		return err
	}
	if note != "" {
		_, err := fmt.Fprintln(w, note)
		return err
	}
	return nil
}
