package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
)

func (a *app) opCommand() *cobra.Command {
	cmd := asGroup(&cobra.Command{
		Use:   "op",
		Short: "List, show and wait for operations recorded in the ledger",
	})
	cmd.AddCommand(a.opListCommand(), a.opShowCommand(), a.opWaitCommand())
	return cmd
}

// opView is an operation as the CLI shows it.
type opView struct {
	ID         string          `json:"id"`
	Kind       string          `json:"kind"`
	Graph      string          `json:"graph"`
	State      string          `json:"state"`
	Outcome    string          `json:"outcome,omitempty"`
	Error      string          `json:"error,omitempty"`
	WorkflowID string          `json:"workflow_id,omitempty"`
	RunID      string          `json:"run_id,omitempty"`
	Inputs     json.RawMessage `json:"inputs,omitempty"`
	CreatedAt  time.Time       `json:"created_at"`
	UpdatedAt  time.Time       `json:"updated_at"`
	FinishedAt *time.Time      `json:"finished_at,omitempty"`
}

func viewOp(op catalog.Operation) opView {
	v := opView{
		ID: op.ID, Kind: string(op.Kind), Graph: op.Graph, State: string(op.State), Outcome: string(op.Outcome),
		Error: op.Error, WorkflowID: op.WorkflowID, RunID: op.RunID, CreatedAt: op.CreatedAt, UpdatedAt: op.UpdatedAt,
	}
	if len(op.Inputs) > 0 && json.Valid(op.Inputs) {
		v.Inputs = op.Inputs
	}
	if !op.FinishedAt.IsZero() {
		t := op.FinishedAt
		v.FinishedAt = &t
	}
	return v
}

// opOutcomeExit is the exit code of a finished operation's outcome: the
// vocabulary's (merged, adopted, already_up_to_date and deleted are
// successes like created and done); the ledger's failed is a failure.
func opOutcomeExit(o catalog.Outcome) int {
	if oc := outcome.Outcome(o); oc.Valid() {
		return oc.ExitCode()
	}
	if o == catalog.OutcomeFailed {
		return outcome.ExitFailure
	}
	return outcome.ExitOK
}

// opList is op list's JSON result.
type opList struct {
	Operations []opView `json:"operations"`
}

func (a *app) opListCommand() *cobra.Command {
	var f client.OpsFilter
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List operations, newest first",
		Args:  exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.Graph != "" {
				if err := checkGraph(f.Graph); err != nil {
					return err
				}
			}
			cat, err := a.catalog(cmd.Context())
			if err != nil {
				return err
			}
			ops, err := client.NewOps(cat, nil).List(cmd.Context(), f)
			if err != nil {
				return err
			}
			res := opList{Operations: make([]opView, len(ops))}
			for i, op := range ops {
				res.Operations[i] = viewOp(op)
			}
			return a.emit(cmd, res, func(w io.Writer) error {
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tKIND\tGRAPH\tSTATE\tOUTCOME\tCREATED")
				for _, op := range res.Operations {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", op.ID, op.Kind, op.Graph, op.State, op.Outcome,
						op.CreatedAt.UTC().Format(time.RFC3339))
				}
				return tw.Flush()
			})
		},
	}
	cmd.Flags().StringVar(&f.Graph, "graph", "", "only this graph's operations")
	cmd.Flags().StringVar(&f.Kind, "kind", "", "only this kind: init_graph, write_table, create_branch, merge, restore, delete_branch, tag, cleanup")
	cmd.Flags().StringVar(&f.State, "state", "", "only this state: running, in_doubt or done")
	cmd.Flags().IntVar(&f.Limit, "limit", 0, "at most this many (default 100, at most 1000)")
	return cmd
}

func (a *app) opShowCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "show OP_ID",
		Short: "Show one operation from the ledger",
		Args:  exactArgs("OP_ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			cat, err := a.catalog(cmd.Context())
			if err != nil {
				return err
			}
			op, err := client.NewOps(cat, nil).Show(cmd.Context(), args[0])
			if err != nil {
				return opNotFound(err)
			}
			v := viewOp(op)
			return a.emit(cmd, v, func(w io.Writer) error { return printOp(w, v) })
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
			cat, err := a.catalog(cmd.Context())
			if err != nil {
				return err
			}
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			op, err := client.NewOps(cat, c).Wait(cmd.Context(), args[0])
			if err != nil {
				return opNotFound(err)
			}
			v := viewOp(op)
			if code := opOutcomeExit(op.Outcome); code != outcome.ExitOK {
				msg := op.Error
				if msg == "" {
					msg = fmt.Sprintf("operation %s ended %s", op.ID, op.Outcome)
				}
				if o := outcome.Outcome(op.Outcome); o.Valid() {
					return &outcome.Error{Outcome: o, OpID: op.ID, Message: msg}
				}
				return withNext(fmt.Errorf("%s", msg), "`graft op show %s` and the workflow %s in the Web UI say more", op.ID, op.WorkflowID)
			}
			return a.emit(cmd, v, func(w io.Writer) error { return printOp(w, v) })
		},
	}
}

// opNotFound points an unknown operation id at the listing.
func opNotFound(err error) error {
	if o, ok := outcome.Of(err); ok && o == outcome.NotFound {
		return withNext(err, "`graft op list` lists recent operations (--graph, --kind and --state narrow it)")
	}
	return err
}

func printOp(w io.Writer, v opView) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "operation\t%s\n", v.ID)
	fmt.Fprintf(tw, "kind\t%s\n", v.Kind)
	fmt.Fprintf(tw, "graph\t%s\n", v.Graph)
	fmt.Fprintf(tw, "state\t%s\n", v.State)
	if v.Outcome != "" {
		fmt.Fprintf(tw, "outcome\t%s\n", v.Outcome)
	}
	if v.Error != "" {
		fmt.Fprintf(tw, "error\t%s\n", v.Error)
	}
	fmt.Fprintf(tw, "workflow\t%s (run %s)\n", v.WorkflowID, v.RunID)
	fmt.Fprintf(tw, "created\t%s\n", v.CreatedAt.UTC().Format(time.RFC3339))
	if v.FinishedAt != nil {
		fmt.Fprintf(tw, "finished\t%s\n", v.FinishedAt.UTC().Format(time.RFC3339))
	}
	if len(v.Inputs) > 0 {
		fmt.Fprintf(tw, "inputs\t%s\n", v.Inputs)
	}
	return tw.Flush()
}
