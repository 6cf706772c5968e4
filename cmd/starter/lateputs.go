package main

import (
	"cmp"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/graftworks/graft/client"
)

type latePutList struct {
	LatePuts []client.LatePut `json:"late_puts"`
}

func (a *app) opLatePutsCommand() *cobra.Command {
	var f client.LatePutsFilter
	cmd := &cobra.Command{
		Use:   "late-puts",
		Short: "List keys kept after their operation ended because a put of them may still land",
		Long: `late-puts lists the keys the ledger keeps pinned after their operation
ended: a put of each answered ambiguously (its answer lost or held in the
network) and may still be delivered, whatever the operation settled. Cleanup
keeps each key and what it pins, so a late delivery can never put back a key
cleanup emptied. Once no such put can arrive any more (see docs/operations.md,
"Late-put pins"), release them with ` + "`graft op release-late-puts OP_ID`" + `.`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ops, err := a.ops(cmd.Context(), false, cmp.Or(ifGiven(f.Graph, checkGraph), ifGiven(f.OpID, checkOpID)))
			if err != nil {
				return err
			}
			list, err := ops.LatePuts(cmd.Context(), f)
			if err != nil {
				return err
			}
			res := latePutList{LatePuts: append([]client.LatePut{}, list...)}
			return a.emit(cmd, res, func(w io.Writer) error {
				if len(res.LatePuts) == 0 {
					_, err := fmt.Fprintln(w, "no key is held for a late put")
					return err
				}
				tw := newTable(w)
				fmt.Fprintln(tw, "OPERATION\tGRAPH\tKIND\tKEY\tHELD SINCE")
				for _, p := range res.LatePuts {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.OpID, p.Graph, p.Kind, p.Key, stamp(p.HeldSince))
				}
				return tw.Flush()
			})
		},
	}
	cmd.Flags().StringVar(&f.Graph, "graph", "", "only this graph's keys")
	cmd.Flags().StringVar(&f.OpID, "op", "", "only this operation's keys")
	return cmd
}

type latePutRelease struct {
	OpID     string `json:"op_id"`
	Released int    `json:"released"`
}

func (a *app) opReleaseLatePutsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "release-late-puts OP_ID",
		Short: "Release the keys a finished operation keeps for puts that may still land",
		Long: `release-late-puts is your word that no put the operation sent can be
delivered any more — every worker process that sent one has exited, or the
store's own request timeout has passed since the operation ended. Cleanup may
then reclaim the keys as it judges them. An unfinished operation is refused
(conflict): its end decides its pins. Releasing twice releases nothing.`,
		Args: exactArgs("OP_ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ops, err := a.ops(cmd.Context(), false, checkOpID(args[0]))
			if err != nil {
				return err
			}
			n, err := ops.ReleaseLatePuts(cmd.Context(), args[0])
			if err != nil {
				return opNotFound(err)
			}
			res := latePutRelease{OpID: args[0], Released: n}
			return a.emitf(cmd, res, "released %d late-put pin(s) of operation %s\n", n, args[0])
		},
	}
}
