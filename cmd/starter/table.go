package main

import (
	"github.com/spf13/cobra"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
)

func (a *app) tableWriteCommand() *cobra.Command {
	var (
		req           client.WriteTableRequest
		detach, final bool
	)
	cmd := &cobra.Command{
		Use:   "write GRAPH BRANCH TABLE [FILE...]",
		Short: "Upload local files as a new version of a table on a branch",
		Long: `write hashes each FILE and starts graft.WriteTable, which pins the keys
the files will have; then it uploads each FILE to the store as one data object
(put-if-absent, straight from this machine), and the workflow publishes the
objects as a new table version and commits it on BRANCH. No cleanup reclaims
an object of the write while it runs, whatever its guard window. It waits like
branch create: done (exit 0), or in_doubt (exit 4) with the operation id when
the commit put answered ambiguously and the workflow is settling it.

If the upload does not finish within --upload-deadline (this command killed,
the network gone), the write ends abandoned (exit 10): nothing is published,
and the next cleanup reclaims what it had put.

The store flags must name the store the workers use. --expected-head makes
the write a conflict (exit 5) unless BRANCH's head is that commit.

Files above --multipart-threshold are multipart uploads
of --part-size parts; --append adds the files to the version BRANCH's head
pins instead of replacing it; --remove NAME drops an entry from that version
(repeatable); --import KEY registers an object already in the store by key,
without copying it (repeatable; its size and ETag come from a HEAD, and
cleanup never deletes it). A key a graph owns or may come to own — under any
graph's prefix, or shaped like a key graft writes — is invalid (exit 2,
docs/format.md "Ownership"). FILE may be omitted when --import or --remove is
given.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) >= 3 && (len(req.Import) > 0 || len(req.Remove) > 0) {
				return nil
			}
			return countArgs("at least ", []string{"GRAPH", "BRANCH", "TABLE", "FILE"})(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Graph, req.Branch, req.Table, req.Files = args[0], args[1], args[2], args[3:]
			c, err := a.begin(cmd.Context(), &req.IdempotencyKey, req.Validate(),
				usageIf(detach && final, "--detach and --wait-settled are mutually exclusive"))
			if err != nil {
				return err
			}
			store, err := a.openStore(cmd.Context())
			if err != nil {
				return err
			}
			h, err := c.StartWriteTable(cmd.Context(), store, req)
			if err != nil {
				return tableWriteError(req, err)
			}
			if detach {
				st := map[string]string{"graph": req.Graph, "branch": req.Branch, "table": req.Table,
					"op_id": h.OpID, "workflow_id": h.WorkflowID, "run_id": h.RunID}
				return a.emitf(cmd, st, "started write of %s on %s in %s\n  workflow  %s\n  op        %s\nwatch it with `graft op wait %s`\n",
					req.Table, req.Branch, req.Graph, h.WorkflowID, h.OpID, h.OpID)
			}
			res, err := waitFor(cmd.Context(), final, h.Wait, h.WaitFinal)
			if err != nil {
				return tableWriteError(req, err)
			}
			return a.emitf(cmd, res, "wrote table %s on %s in %s\n  version  %s\n  commit   %s\n  objects  %d (%d bytes)\n  op       %s\n",
				res.Table, res.Branch, res.Graph, res.Version, res.Commit, res.Objects, res.Bytes, res.OpID)
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.ExpectedHead, "expected-head", "", "conflict unless the branch's head is this commit id")
	f.StringVar(&req.Author, "author", "", `author of the commit (default "graft")`)
	f.StringVarP(&req.Message, "message", "m", "", "message of the commit")
	f.StringVar(&req.IdempotencyKey, "idempotency-key", "", "operation id; the same request repeated with it attaches to the first write and uploads nothing, another request is a conflict (default: a fresh ULID)")
	f.Int64Var(&req.Upload.Threshold, "multipart-threshold", 0, "files above this many bytes are multipart uploads (default 64 MiB)")
	f.Int64Var(&req.Upload.PartSize, "part-size", 0, "bytes per multipart part (default 64 MiB; at least the store's minimum)")
	f.BoolVar(&req.Append, "append", false, "add to the head's version of the table instead of replacing it")
	f.StringArrayVar(&req.Remove, "remove", nil, "drop this entry name from the head's version (repeatable)")
	f.StringArrayVar(&req.Import, "import", nil, "register the store's object at this key by reference, zero copy (repeatable)")
	f.DurationVar(&req.UploadDeadline, "upload-deadline", 0, "end the write abandoned unless its upload finishes within this long of its pins (default 24h)")
	f.BoolVar(&detach, "detach", false, "return once the files are uploaded and the workflow goes on to publish them")
	f.BoolVar(&final, "wait-settled", false, "wait through an in-doubt settle for the definitive outcome")
	return cmd
}

func tableWriteError(req client.WriteTableRequest, err error) error {
	return nextOn(settlingNext(err, "the write"), outcome.Conflict,
		"the branch moved; look at it with `graft branch show %s %s`, then write again", req.Graph, req.Branch)
}
