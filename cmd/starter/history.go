package main

import (
	"fmt"
	"io"
	"path"
	"path/filepath"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
)

// Reading what happened, in the manner of git log and lakectl: log, diff,
// and the objects of a table version with the URIs engines read them at.

const refHelp = `A REF is a commit id, a branch (its head) or a tag; "branch:NAME" and
"tag:NAME" say which when a name could be both.`

func (a *app) logCommand() *cobra.Command {
	var limit int
	cmd := a.readCommand(&cobra.Command{
		Use:   "log GRAPH BRANCH",
		Short: "Show a branch's history: its first-parent commits, newest first, merges and restores marked",
		Long: `log walks BRANCH's first parents from its head, newest first, as git log
--first-parent does: one line per commit with its time, author and message;
a merge names the branch head it merged, a restore the commit whose tables it
restored. A fork commit is the first commit of a branch; its parent is on the
source branch. History ends at the graph's root commit, at -n commits, or
where cleanup reclaimed older commits.`,
		Args: exactArgs("GRAPH", "BRANCH"),
	}, func(args []string) error { return checkBranch(args[0], args[1]) }, func(cmd *cobra.Command, r *client.Reader, args []string) error {
		log, err := r.Log(cmd.Context(), args[0], args[1], limit)
		if err != nil {
			return err
		}
		return a.emit(cmd, log, func(w io.Writer) error { return printLog(w, log) })
	})
	cmd.Flags().IntVarP(&limit, "limit", "n", client.DefaultLogLimit, "at most this many commits")
	return cmd
}

func printLog(w io.Writer, l client.Log) error {
	tw := newTable(w)
	for i, e := range l.Entries {
		var marks []string
		if e.Merged != "" {
			marks = append(marks, "merge of "+e.Merged)
		}
		if e.RestoredFrom != "" {
			marks = append(marks, "restore of "+e.RestoredFrom)
		}
		if i+1 < len(l.Entries) && l.Entries[i+1].Branch != e.Branch {
			marks = append(marks, "fork of "+l.Entries[i+1].Branch)
		}
		if e.Branch != l.Branch {
			marks = append(marks, "on "+e.Branch)
		}
		mark := ""
		if len(marks) > 0 {
			mark = " (" + strings.Join(marks, "; ") + ")"
		}
		message, _, _ := strings.Cut(e.Message, "\n") // its first line
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s%s\n", e.Commit, stamp(e.Time), e.Author, message, mark)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if l.Truncated != "" {
		_, err := fmt.Fprintf(w, "(history stops here: %s)\n", l.Truncated)
		return err
	}
	return nil
}

func (a *app) diffCommand() *cobra.Command {
	return a.readCommand(&cobra.Command{
		Use:   "diff GRAPH FROM TO",
		Short: "Show the tables added, changed and removed from one commit, branch or tag to another",
		Long: `diff compares the table versions two commits pin: added (only TO pins the
table), removed (only FROM does) and changed (they pin different versions).

` + refHelp,
		Args: exactArgs("GRAPH", "FROM", "TO"),
	}, graphArg, func(cmd *cobra.Command, r *client.Reader, args []string) error {
		d, err := r.Diff(cmd.Context(), args[0], args[1], args[2])
		if err != nil {
			return err
		}
		return a.emitTable(cmd, d, func(tw io.Writer) {
			fmt.Fprintf(tw, "%s %s (%s) .. %s %s (%s)\n", d.From.Kind, d.From.Ref, d.From.Commit, d.To.Kind, d.To.Ref, d.To.Commit)
			for _, c := range d.Tables {
				sign := map[string]string{"added": "+", "removed": "-", "changed": "~"}[c.Change]
				fmt.Fprintf(tw, "%s %s\t%s\t%s -> %s\n", sign, c.Table, c.Change, orDash(c.From), orDash(c.To))
			}
			fmt.Fprintf(tw, "%d table(s) changed, %d unchanged\n", len(d.Tables), d.Unchanged)
		})
	})
}

func (a *app) tableObjectsCommand() *cobra.Command {
	var verify bool
	cmd := a.readCommand(&cobra.Command{
		Use:   "objects GRAPH REF TABLE",
		Short: "List the data objects of a table as of a commit, branch or tag, with the URIs engines read them at",
		Long: `objects lists the data objects of the version of TABLE that REF pins, one
URI per line (s3://bucket/prefix/key for an S3 store, file:///dir/key for a
local one), so DuckDB, Spark or pandas can read exactly that version:

  duckdb -c "SELECT count(*) FROM read_csv([$(graft table objects demo main people | sed "s/.*/'&'/" | paste -sd,)])"

-o json adds each object's key, size and SHA-256. The listing reads the
version only; it does not check that the objects are there.

--verify HEADs every object as well (one request each, progress on stderr)
and reports how many are there as their entries say. Objects that are gone
exit not_found (6) and changed ones conflict (5), naming them: how to notice
that a branch names an object that was deleted.

` + refHelp,
		Args: exactArgs("GRAPH", "REF", "TABLE"),
	}, graphArg, func(cmd *cobra.Command, r *client.Reader, args []string) error {
		r.Locator = a.locator()
		if verify {
			return a.verifyTableObjects(cmd, r, args[0], args[1], args[2])
		}
		l, err := r.TableObjects(cmd.Context(), args[0], args[1], args[2])
		if err != nil {
			return err
		}
		return a.emit(cmd, l, func(w io.Writer) error {
			for _, o := range l.Objects {
				if _, err := fmt.Fprintln(w, o.URI); err != nil {
					return err
				}
			}
			return nil
		})
	})
	cmd.Flags().BoolVar(&verify, "verify", false, "HEAD every object and report the missing or changed ones (one request per object)")
	return cmd
}

// verifyListMax bounds the keys a failed verification names in its message.
const verifyListMax = 10

// verifyTableObjects runs table objects --verify: the verification on stdout, or an
// error naming what is missing (not_found) or changed (conflict).
func (a *app) verifyTableObjects(cmd *cobra.Command, r *client.Reader, graph, ref, table string) error {
	pr := a.progress(cmd)
	var mu sync.Mutex
	v, err := r.VerifyTableObjects(cmd.Context(), graph, ref, table, func(done, total int64) {
		mu.Lock()
		defer mu.Unlock()
		pr.Update("verify objects", done, total)
	})
	if n := int64(v.Objects); err == nil {
		pr.Update("checked", n, n) // the last line, also where lines are drawn only now and then
	}
	pr.Finish()
	if err != nil {
		return err
	}
	name := func(n int, key func(int) string) string {
		keys := make([]string, 0, verifyListMax)
		for i := 0; i < n && i < verifyListMax; i++ {
			keys = append(keys, key(i))
		}
		if n > verifyListMax {
			keys = append(keys, fmt.Sprintf("and %d more", n-verifyListMax))
		}
		return strings.Join(keys, ", ")
	}
	at := fmt.Sprintf("table %s at %s (commit %s, version %s)", v.Table, v.Ref.Ref, v.Ref.Commit, v.Version)
	switch {
	case len(v.Missing) > 0:
		err := outcome.Errorf(outcome.NotFound, "", "%d of %d objects of %s are missing: %s", len(v.Missing), v.Objects, at,
			name(len(v.Missing), func(i int) string { return v.Missing[i].Key }))
		return withNext(err, "the store no longer holds objects this version names: put them back at the same keys from a backup, or write the table again")
	case len(v.Changed) > 0:
		err := outcome.Errorf(outcome.Conflict, "", "%d of %d objects of %s differ from their entries: %s", len(v.Changed), v.Objects, at,
			name(len(v.Changed), func(i int) string { return v.Changed[i].Key + " (" + v.Changed[i].Reason + ")" }))
		return withNext(err, "something rewrote these keys after they were written or imported; write the table again from the data you trust")
	}
	return a.emitf(cmd, v, "verified %d of %d objects of %s: all there\n", v.Verified, v.Objects, at)
}

func (a *app) locator() func(string) string {
	base := "file://" + filepath.ToSlash(a.storeDir()) + "/"
	if a.cfg.S3.Bucket != "" {
		base = "s3://" + path.Join(a.cfg.S3.Bucket, a.cfg.S3.Prefix) + "/"
	}
	return func(key string) string { return base + key }
}
