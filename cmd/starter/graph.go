package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
)

func (a *app) graphCommand() *cobra.Command {
	cmd := asGroup(&cobra.Command{
		Use:   "graph",
		Short: "Create and upgrade graphs",
	})
	cmd.AddCommand(a.graphInitCommand(), a.graphUpgradeCommand())
	return cmd
}

func (a *app) graphInitCommand() *cobra.Command {
	var req client.InitGraphRequest
	cmd := &cobra.Command{
		Use:   "init GRAPH",
		Short: "Create a graph: main's root commit, main's ref and the graph record",
		Long: `init starts graft.InitGraph and waits for it. Repeating an init of the same
graph with the same operation is idempotent and reports the graph as already
there (exit 0); a graph created by another operation is a conflict (exit 5).
A graph owns its whole prefix GRAPH/ (docs/format.md, "Ownership"): a prefix
that already holds objects graft did not write for this graph — another tool's
files, another deployment's graph — is a conflict too (exit 5) naming one of
them, and nothing is written or recorded.`,
		Args: exactArgs("GRAPH"),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Graph = args[0]
			if err := req.Validate(); err != nil {
				return err
			}
			a.startedOp = req.IdempotencyKey
			if a.startedOp == "" {
				a.startedOp = client.InitGraphWorkflowID(req.Graph)
			}
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			res, err := c.InitGraph(cmd.Context(), req)
			if o, ok := outcome.Of(err); ok && o == outcome.Conflict && res.ForeignKey != "" {
				return withNext(err, "a graph owns its whole prefix %s/: move the objects there that graft did not write (such as %s) elsewhere, then run the init again; or init a graph of another name",
					req.Graph, res.ForeignKey)
			}
			if o, ok := outcome.Of(err); ok && o == outcome.Conflict {
				return withNext(err, "graph %s already exists; `graft branch list %s` shows its branches", req.Graph, req.Graph)
			}
			if err != nil {
				return err
			}
			return a.emit(cmd, res, func(w io.Writer) error {
				verb := "created graph"
				if !res.Created {
					verb = "graph already there:"
				}
				_, err := fmt.Fprintf(w, "%s %s\n  main  %s\n  root  %s\n  op    %s\n", verb, res.Graph, res.Main, res.Root, res.OpID)
				return err
			})
		},
	}
	cmd.Flags().StringVar(&req.Author, "author", "", `author of main's root commit (default "graft")`)
	cmd.Flags().StringVar(&req.IdempotencyKey, "idempotency-key", "", "operation id (default: derived from the graph name, so a repeated init is idempotent)")
	cmd.Flags().IntVar(&req.Format, "format", 0, "on-storage format to write, 1 or 2 (default 2; docs/format.md)")
	return cmd
}

func (a *app) graphUpgradeCommand() *cobra.Command {
	var req client.UpgradeGraphRequest
	cmd := &cobra.Command{
		Use:   "upgrade GRAPH",
		Short: "Upgrade a format-1 graph to format 2 (graph record and live refs; no data is touched)",
		Long: `upgrade starts graft.UpgradeGraph and waits for it. It rewrites the graph
record and every live branch ref as format 2 and nothing else (docs/format.md,
"Upgrading a format-1 graph"). It is idempotent and resumable: run it again
after any failure; a graph that is format 2 already is done (exit 0). A
format-1 operation in flight on the graph is a conflict (exit 5): wait for it
(graft op wait ID), then run the upgrade again.`,
		Args: exactArgs("GRAPH"),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Graph = args[0]
			if err := req.Validate(); err != nil {
				return err
			}
			a.startedOp = req.IdempotencyKey
			if a.startedOp == "" {
				a.startedOp = client.UpgradeGraphWorkflowID(req.Graph)
			}
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			res, err := c.UpgradeGraph(cmd.Context(), req)
			if o, ok := outcome.Of(err); ok && o == outcome.Conflict {
				return withNext(err, "`graft op list --graph %s` shows what is in flight", req.Graph)
			}
			if err != nil {
				return err
			}
			return a.emit(cmd, res, func(w io.Writer) error {
				verb := "upgraded graph"
				if !res.GraphRecord {
					verb = "graph already format 2:"
				}
				if _, err := fmt.Fprintf(w, "%s %s\n  refs  %d\n  op    %s\n", verb, res.Graph, len(res.Refs), res.OpID); err != nil {
					return err
				}
				for _, n := range res.Refs {
					if _, err := fmt.Fprintf(w, "    %s\n", n); err != nil {
						return err
					}
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&req.IdempotencyKey, "idempotency-key", "", "operation id (default: derived from the graph name, so a repeated upgrade is idempotent)")
	return cmd
}
