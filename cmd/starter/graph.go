package main

import (
	"cmp"

	"github.com/spf13/cobra"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
)

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
			a.startedOp = cmp.Or(req.IdempotencyKey, client.InitGraphWorkflowID(req.Graph))
			c, err := a.client(cmd.Context(), req.Validate())
			if err != nil {
				return err
			}
			res, err := c.InitGraph(cmd.Context(), req)
			if err != nil && res.ForeignKey != "" {
				return nextOn(err, outcome.Conflict, "a graph owns its whole prefix %s/: move the objects there that graft did not write (such as %s) elsewhere, then run the init again; or init a graph of another name",
					req.Graph, res.ForeignKey)
			}
			if err != nil {
				return nextOn(err, outcome.Conflict, "graph %s already exists; `graft branch list %s` shows its branches", req.Graph, req.Graph)
			}
			verb := "created graph"
			if !res.Created {
				verb = "graph already there:"
			}
			return a.emitf(cmd, res, "%s %s\n  main  %s\n  root  %s\n  op    %s\n", verb, res.Graph, res.Main, res.Root, res.OpID)
		},
	}
	cmd.Flags().StringVar(&req.Author, "author", "", `author of main's root commit (default "graft")`)
	cmd.Flags().StringVar(&req.IdempotencyKey, "idempotency-key", "", "operation id (default: derived from the graph name, so a repeated init is idempotent)")
	return cmd
}
