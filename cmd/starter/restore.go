package main

import (
	"cmp"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/format"
)

func (a *app) restoreCommand() *cobra.Command {
	var (
		req   client.RestoreRequest
		final bool
	)
	cmd := &cobra.Command{
		Use:   "restore GRAPH BRANCH (--commit C | --tag T)",
		Short: "Give a branch back the table versions of an earlier commit, by id or by tag",
		Long: `restore starts graft.Restore and waits for its outcome: done (exit 0) when a
new commit on BRANCH, on top of its head, pins exactly what the earlier
commit pins. History is kept: the earlier commit is named in the new
commit's restored_from, and nothing is rewritten.

Before anything else the head being replaced is tagged, by default
backup/BRANCH/<head commit id> (--backup-tag names it, --no-backup skips it); a restore
of the same head reuses that tag. not_retained (exit 7) means cleanup
reclaimed the commit or a version it pins, and nothing was written.
in_doubt (exit 4) means a write answered ambiguously and the workflow is
settling it; --wait-settled waits through that instead. --expected-head
makes the restore a conflict (exit 5) unless BRANCH's head is that commit.`,
		Args: exactArgs("GRAPH", "BRANCH"),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Graph, req.Branch = args[0], args[1]
			c, err := a.begin(cmd.Context(), &req.IdempotencyKey, checkBranch(req.Graph, req.Branch),
				usageIf((req.ToCommit == "") == (req.ToTag == ""),
					"give exactly one of --commit and --tag: the commit to restore"),
				usageIf(req.NoBackup && req.BackupTag != "", "--no-backup and --backup-tag are mutually exclusive"),
				checkFlag("--commit", req.ToCommit, validCommit), checkFlag("--tag", req.ToTag, format.ValidateTagName),
				checkFlag("--expected-head", req.ExpectedHead, validCommit), checkFlag("--backup-tag", req.BackupTag, format.ValidateTagName),
				checkCommitText(req.Author, req.Message), checkOpKey(req.IdempotencyKey), req.Validate())
			if err != nil {
				return err
			}
			h, err := c.StartRestore(cmd.Context(), req)
			if err != nil {
				return err
			}
			res, err := waitFor(cmd.Context(), final, h.Wait, h.WaitFinal)
			if err != nil {
				return restoreError(req, err)
			}
			return a.emitTable(cmd, res, func(tw io.Writer) {
				fmt.Fprintf(tw, "restored %s in %s to %s\n", res.Branch, res.Graph, cmp.Or(req.ToCommit, "tag "+req.ToTag))
				rows(tw, "  commit", res.Commit, "  restored from", res.RestoredFrom, "  previous head", res.PreviousHead,
					"  backup tag", cmp.Or(res.BackupTag, "(none: --no-backup)"), "  op", res.OpID)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.ToCommit, "commit", "", "restore this commit id's table versions")
	f.StringVar(&req.ToTag, "tag", "", "restore the table versions of the commit this tag names")
	f.StringVar(&req.ExpectedHead, "expected-head", "", "conflict unless the branch's head is this commit id")
	f.BoolVar(&req.NoBackup, "no-backup", false, "do not tag the head being replaced")
	f.StringVar(&req.BackupTag, "backup-tag", "", "name of the backup tag (default backup/BRANCH/<id of the head replaced>)")
	f.StringVar(&req.Author, "author", "", `author of the restore commit (default "graft")`)
	f.StringVarP(&req.Message, "message", "m", "", "message of the restore commit")
	f.StringVar(&req.IdempotencyKey, "idempotency-key", "", "operation id; the same request repeated with it attaches to the first restore, another request is a conflict (default: a fresh ULID)")
	f.BoolVar(&final, "wait-settled", false, "wait through an in-doubt settle for the definitive outcome")
	return cmd
}

func restoreError(req client.RestoreRequest, err error) error {
	notFound := fmt.Sprintf("check the names and the commit id; `graft branch list %s` lists the graph's branches", req.Graph)
	if req.ToTag != "" {
		notFound = fmt.Sprintf("check the names; `graft tag list %s --all` lists the graph's tags, `graft branch list %s` its branches",
			req.Graph, req.Graph)
	}
	err = nextOn(err, outcome.Conflict, "look at %s with `graft branch show %s %s` (and the backup tag with `graft tag list %s`), then restore again",
		req.Branch, req.Graph, req.Branch, req.Graph)
	err = nextOn(err, outcome.NotFound, "%s", notFound)
	err = nextOn(err, outcome.NotRetained, "cleanup reclaimed what that commit pins; restore a newer commit, or one a tag names (tags are retention roots)")
	return settlingNext(err, "the restore")
}
