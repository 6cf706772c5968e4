package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/format"
)

func (a *app) tagCreateCommand() *cobra.Command {
	var req client.CreateTagRequest
	cmd := &cobra.Command{
		Use:   "create GRAPH NAME [--commit C | --branch B]",
		Short: "Tag a commit, a branch's head, or (by default) main's head",
		Long: `create starts graft.CreateTag and waits for its outcome: created (exit 0).
Creating a tag that already names the same commit is idempotent: created,
with "existing": true, and nothing written. The name on another commit, or a
deleted name, is a conflict (exit 5). in_doubt (exit 4) means the tag's put
answered ambiguously and the workflow is settling it.`,
		Args: exactArgs("GRAPH", "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Graph, req.Name = args[0], args[1]
			c, err := a.begin(cmd.Context(), &req.IdempotencyKey, checkTag(req.Graph, req.Name),
				usageIf(req.Commit != "" && req.Branch != "", "give at most one of --commit and --branch"),
				checkFlag("--commit", req.Commit, validCommit), checkFlag("--branch", req.Branch, format.ValidateBranchName),
				checkOpKey(req.IdempotencyKey), req.Validate())
			if err != nil {
				return err
			}
			res, err := c.CreateTag(cmd.Context(), req)
			if err != nil {
				return tagCreateError(req, err)
			}
			if res.Existing {
				return a.emitf(cmd, res, "tag %s in %s already names %s: nothing was written\n  op      %s\n", res.Name, res.Graph, res.Commit, res.OpID)
			}
			return a.emitf(cmd, res, "created tag %s in %s\n  commit  %s\n  op      %s\n", res.Name, res.Graph, res.Commit, res.OpID)
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Commit, "commit", "", "tag this commit id")
	f.StringVar(&req.Branch, "branch", "", "tag this branch's head")
	f.StringVar(&req.IdempotencyKey, "idempotency-key", "", "operation id (default: a fresh ULID)")
	return cmd
}

func tagCreateError(req client.CreateTagRequest, err error) error {
	err = nextOn(err, outcome.Conflict, "a tag is never re-pointed and a deleted name never reused; `graft tag show %s %s` shows what it names, "+
		"or pick another name", req.Graph, req.Name)
	return nextOn(settlingNext(err, "the tag"), outcome.NotFound,
		"check the graph, the branch or the commit id; `graft branch list %s` lists the graph's branches", req.Graph)
}

type tagList struct {
	Graph string           `json:"graph"`
	Tags  []client.TagInfo `json:"tags"`
}

func (a *app) tagListCommand() *cobra.Command {
	var all bool
	cmd := a.readCommand(&cobra.Command{
		Use:   "list GRAPH",
		Short: "List a graph's live tags by name (read from the store); --all adds deleted ones",
		Args:  exactArgs("GRAPH"),
	}, graphArg, func(cmd *cobra.Command, r *client.Reader, args []string) error {
		tags, err := r.ListTags(cmd.Context(), args[0], all)
		if err != nil {
			return err
		}
		tags = append([]client.TagInfo{}, tags...) // [] in JSON, not null
		return a.emitTable(cmd, tagList{Graph: args[0], Tags: tags}, func(tw io.Writer) {
			fmt.Fprintln(tw, "TAG\tCOMMIT\tSTATE\tCREATED\tOP")
			for _, t := range tags {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.Name, t.Commit, t.State, stamp(t.CreatedAt), t.Op)
			}
		})
	})
	cmd.Flags().BoolVar(&all, "all", false, "list deleted (retired) tags too")
	return cmd
}

func (a *app) tagShowCommand() *cobra.Command {
	return a.readCommand(&cobra.Command{
		Use:   "show GRAPH NAME",
		Short: "Show a tag, live or deleted, and the commit it names (read from the store)",
		Args:  exactArgs("GRAPH", "NAME"),
	}, func(args []string) error { return checkTag(args[0], args[1]) }, func(cmd *cobra.Command, r *client.Reader, args []string) error {
		graph := args[0]
		d, err := r.ShowTag(cmd.Context(), graph, args[1])
		if err != nil {
			return nextOn(err, outcome.NotFound, "`graft tag list %s --all` lists the graph's tags", graph)
		}
		return a.emitTable(cmd, d, func(tw io.Writer) {
			fmt.Fprintf(tw, "tag\t%s (graph %s)\nstate\t%s\ncommit\t%s\n", d.Name, graph, d.State, d.Commit)
			fmt.Fprintf(tw, "created\t%s (op %s)\n", stamp(d.CreatedAt), d.Op)
			rows(tw, "deleted by", d.RetiredOp)
			if !d.Retained {
				fmt.Fprintf(tw, "retained\tno: cleanup reclaimed the commit\n")
				return
			}
			fmt.Fprintf(tw, "branch\t%s\ntime\t%s\n", d.Branch, stamp(d.Time))
			fmt.Fprintf(tw, "author\t%s\nmessage\t%s\n", d.Author, d.Message)
			printPins(tw, d.Pins)
		})
	})
}

func (a *app) tagDeleteCommand() *cobra.Command {
	var req client.DeleteTagRequest
	cmd := &cobra.Command{
		Use:   "delete GRAPH NAME",
		Short: "Delete a tag: its commit is no longer kept by it, and the name is never reused",
		Long: `delete starts graft.DeleteTag and waits for its outcome: deleted (exit 0).
The tag is replaced by a retired tag that keeps the name for good.
not_found (exit 6) when there is no such tag or it was deleted already.`,
		Args: exactArgs("GRAPH", "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Graph, req.Name = args[0], args[1]
			c, err := a.begin(cmd.Context(), &req.IdempotencyKey, checkTag(req.Graph, req.Name), checkOpKey(req.IdempotencyKey))
			if err != nil {
				return err
			}
			res, err := c.DeleteTag(cmd.Context(), req)
			if err != nil {
				return nextOn(settlingNext(err, "the tag's delete"), outcome.NotFound,
					"`graft tag list %s --all` lists the graph's tags, deleted ones too", req.Graph)
			}
			return a.emitf(cmd, res, "deleted tag %s in %s\n  commit  %s\n  op      %s\n", res.Name, res.Graph, res.Commit, res.OpID)
		},
	}
	cmd.Flags().StringVar(&req.IdempotencyKey, "idempotency-key", "", "operation id (default: a fresh ULID)")
	return cmd
}
