package client

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
)

// Ref names a commit: a commit id, a branch (its head) or a tag. "branch:X" and "tag:X"
// say which; a bare name is a commit id if it parses as one, else a branch, else a tag.
type Ref = string

// ResolvedRef is a Ref and the commit it names.
type ResolvedRef struct {
	Ref string `json:"ref"`
	// Kind is commit, branch or tag.
	Kind   string `json:"kind"`
	Commit string `json:"commit"`
}

// LogEntry is one commit of a branch's first-parent history.
type LogEntry struct {
	Commit  string    `json:"commit"`
	Time    time.Time `json:"time"`
	Author  string    `json:"author"`
	Message string    `json:"message"`
	Op      string    `json:"op"` // the operation that wrote the commit
	// Branch is the branch the commit was written on (a fork commit's is the new branch;
	// its parent is on the source).
	Branch  string   `json:"branch"`
	Parents []string `json:"parents"` // first parent first
	// Merged is a merge commit's merged parent; RestoredFrom the commit a restore copied.
	Merged       string `json:"merged,omitempty"`
	RestoredFrom string `json:"restored_from,omitempty"`
	Tables       int    `json:"tables"` // how many the commit pins
}

// Log is a branch's first-parent history, newest first.
type Log struct {
	Graph   string     `json:"graph"`
	Branch  string     `json:"branch"`
	Entries []LogEntry `json:"entries"`
	// Truncated says why the history stops before the graph's root commit: the limit, or
	// an ancestor cleanup reclaimed ("" when it reached the root).
	Truncated string `json:"truncated,omitempty"`
}

// DefaultLogLimit is how many commits Log returns when asked for none.
const DefaultLogLimit = 50

// Log walks branch's first parents from its head, newest first, up to limit commits
// (DefaultLogLimit when limit <= 0): one GET per commit.
func (r *Reader) Log(ctx context.Context, graphName, branch string, limit int) (Log, error) {
	if err := firstInvalid(checkGraph(graphName), checkBranch(branch)); err != nil {
		return Log{}, err
	}
	if limit <= 0 {
		limit = DefaultLogLimit
	}
	_, c, err := r.branchHead(ctx, graphName, branch)
	if err != nil {
		return Log{}, err
	}
	log := Log{Graph: graphName, Branch: branch, Entries: []LogEntry{}}
	for {
		log.Entries = append(log.Entries, logEntry(c))
		if len(c.Parents) == 0 {
			return log, nil
		}
		if len(log.Entries) == limit {
			log.Truncated = fmt.Sprintf("limit of %d commits", limit)
			return log, nil
		}
		parent := c.Parents[0].String()
		c, err = graph.ReadCommitView(ctx, r.store, graphName, parent)
		if errors.Is(err, graph.ErrCommitNotFound) {
			log.Truncated = fmt.Sprintf("commit %s and older were reclaimed by cleanup", parent)
			return log, nil
		}
		if err != nil {
			return Log{}, readError(err, graphName, branch)
		}
	}
}

func logEntry(c graph.CommitView) LogEntry {
	e := LogEntry{Commit: c.ID.String(), Time: c.Time, Author: c.Author, Message: c.Message, Op: c.Op, Branch: c.Branch,
		Parents: []string{}, Tables: len(c.Pins)}
	for _, p := range c.Parents {
		e.Parents = append(e.Parents, p.String())
	}
	if len(c.Parents) > 1 {
		e.Merged = c.Parents[1].String()
	}
	if !c.RestoredFrom.IsZero() {
		e.RestoredFrom = c.RestoredFrom.String()
	}
	return e
}

type resolvedCommit struct {
	ref    ResolvedRef
	commit graph.CommitView
}

func (r *Reader) resolve(ctx context.Context, graphName string, ref Ref) (resolvedCommit, error) {
	if err := checkGraph(graphName); err != nil {
		return resolvedCommit{}, err
	}
	kind, name, explicit := strings.Cut(ref, ":")
	if !explicit || (kind != "branch" && kind != "tag" && kind != "commit") {
		kind, name = "", ref
	}
	readCommit := func(as, id string) (resolvedCommit, error) {
		c, err := graph.ReadCommitView(ctx, r.store, graphName, id)
		if err != nil {
			return resolvedCommit{}, readError(err, graphName, "")
		}
		return resolvedCommit{ref: ResolvedRef{Ref: ref, Kind: as, Commit: c.ID.String()}, commit: c}, nil
	}
	if kind == "commit" || kind == "" {
		if _, err := format.ParseCommitID(name); err == nil {
			return readCommit("commit", name)
		} else if kind == "commit" {
			return resolvedCommit{}, invalid("commit", err)
		}
	}
	if kind == "branch" || kind == "" {
		if err := format.ValidateBranchName(name); err == nil {
			b, err := graph.ResolveBranch(ctx, r.store, graphName, name)
			switch {
			case err == nil:
				c, err := graph.BranchHeadView(ctx, r.store, graphName, b)
				if err != nil {
					return resolvedCommit{}, readError(err, graphName, name)
				}
				return resolvedCommit{ref: ResolvedRef{Ref: ref, Kind: "branch", Commit: c.ID.String()}, commit: c}, nil
			case !errors.Is(err, graph.ErrBranchNotFound) || kind == "branch":
				return resolvedCommit{}, readError(err, graphName, name)
			}
		} else if kind == "branch" {
			return resolvedCommit{}, invalid("", err)
		}
	}
	if err := format.ValidateTagName(name); err != nil {
		return resolvedCommit{}, outcome.Errorf(outcome.Invalid, "", "%q is not a commit id, a branch or a tag name: %s", ref, format.Describe(err))
	}
	t, err := graph.ReadTag(ctx, r.store, graphName, name)
	switch {
	case errors.Is(err, graph.ErrTagNotFound) && kind == "":
		return resolvedCommit{}, outcome.Errorf(outcome.NotFound, "", "%q is no commit id, branch or tag of graph %q", ref, graphName)
	case errors.Is(err, graph.ErrTagNotFound):
		return resolvedCommit{}, outcome.Errorf(outcome.NotFound, "", "tag %q does not exist in graph %q", name, graphName)
	case err != nil:
		return resolvedCommit{}, readError(err, graphName, "")
	case t.Tag.State != format.TagLive:
		return resolvedCommit{}, outcome.Errorf(outcome.NotFound, "", "tag %q of graph %q was deleted", name, graphName)
	}
	c, err := readCommit("tag", t.Tag.Commit.String())
	if o, ok := outcome.Of(err); ok && o == outcome.NotFound {
		return resolvedCommit{}, outcome.Errorf(outcome.NotRetained, "", "tag %q names commit %s, which cleanup reclaimed", name, t.Tag.Commit)
	}
	return c, err
}

// TableChange is one table that differs between two commits: added, removed or changed.
// From or To is "" when that side does not pin the table.
type TableChange struct {
	Table  string `json:"table"`
	Change string `json:"change"`
	From   string `json:"from,omitempty"`
	To     string `json:"to,omitempty"`
}

// Diff is what changed from one commit to another, table by table.
type Diff struct {
	Graph     string        `json:"graph"`
	From      ResolvedRef   `json:"from"`
	To        ResolvedRef   `json:"to"`
	Tables    []TableChange `json:"tables"` // by name
	Unchanged int           `json:"unchanged"`
}

// Diff compares the tables the commits from and to pin: two commit reads after resolving
// the refs.
func (r *Reader) Diff(ctx context.Context, graphName string, from, to Ref) (Diff, error) {
	if _, err := r.Graph(ctx, graphName); err != nil {
		return Diff{}, err
	}
	a, err := r.resolve(ctx, graphName, from)
	if err != nil {
		return Diff{}, err
	}
	b, err := r.resolve(ctx, graphName, to)
	if err != nil {
		return Diff{}, err
	}
	d := Diff{Graph: graphName, From: a.ref, To: b.ref, Tables: []TableChange{}}
	names := append(slices.Collect(maps.Keys(a.commit.Pins)), slices.Collect(maps.Keys(b.commit.Pins))...)
	slices.Sort(names)
	for _, name := range slices.Compact(names) {
		va, inA := a.commit.Pins[name]
		vb, inB := b.commit.Pins[name]
		switch {
		case !inA:
			d.Tables = append(d.Tables, TableChange{Table: name, Change: "added", To: vb.String()})
		case !inB:
			d.Tables = append(d.Tables, TableChange{Table: name, Change: "removed", From: va.String()})
		case va != vb:
			d.Tables = append(d.Tables, TableChange{Table: name, Change: "changed", From: va.String(), To: vb.String()})
		default:
			d.Unchanged++
		}
	}
	return d, nil
}

// TableObject is one data object of a table version.
type TableObject struct {
	ID  string `json:"id"`
	Key string `json:"key"`
	// URI is where an engine reads the object (s3://…, file://…), with Reader.Locator set.
	URI    string `json:"uri,omitempty"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// TableListing is a table's version as of a commit, with its objects.
type TableListing struct {
	Graph   string        `json:"graph"`
	Ref     ResolvedRef   `json:"ref"`
	Table   string        `json:"table"`
	Version string        `json:"version"`
	Objects []TableObject `json:"objects"`
	Bytes   int64         `json:"bytes"`
}

// TableObjects lists the data objects of table as of ref, with their URIs when Locator is
// set: three GETs after resolving the ref.
func (r *Reader) TableObjects(ctx context.Context, graphName string, ref Ref, table string) (TableListing, error) {
	l, _, err := r.tableObjects(ctx, graphName, ref, table)
	return l, err
}

func (r *Reader) tableObjects(ctx context.Context, graphName string, ref Ref, table string) (TableListing, []graph.ObjectRef, error) {
	if err := invalid("", format.ValidateTableName(table)); err != nil {
		return TableListing{}, nil, err
	}
	if _, err := r.Graph(ctx, graphName); err != nil {
		return TableListing{}, nil, err
	}
	c, err := r.resolve(ctx, graphName, ref)
	if err != nil {
		return TableListing{}, nil, err
	}
	version, ok := c.commit.Pins[table]
	if !ok {
		return TableListing{}, nil, outcome.Errorf(outcome.NotFound, "", "commit %s (%s) does not pin table %q", c.ref.Commit, ref, table)
	}
	objs, err := graph.ListTableObjects(ctx, r.store, graphName, c.ref.Commit, table)
	if err != nil {
		return TableListing{}, nil, readError(err, graphName, "")
	}
	l := TableListing{Graph: graphName, Ref: c.ref, Table: table, Version: version.String(), Objects: make([]TableObject, len(objs))}
	for i, o := range objs {
		l.Objects[i] = TableObject{ID: o.ID.String(), Key: o.Key, Size: o.Size, SHA256: o.SHA256}
		if r.Locator != nil {
			l.Objects[i].URI = r.Locator(o.Key)
		}
		l.Bytes += o.Size
	}
	return l, objs, nil
}

// TableVerification is what VerifyTableObjects found.
type TableVerification struct {
	Graph   string      `json:"graph"`
	Ref     ResolvedRef `json:"ref"`
	Table   string      `json:"table"`
	Version string      `json:"version"`
	// Objects counts the version's objects; Verified those there as their entries say.
	Objects  int `json:"objects"`
	Verified int `json:"verified"`
	// Missing are the objects whose keys hold nothing; Changed, those whose size (or, for
	// an imported object, ETag) differs from the entry's.
	Missing []TableObject   `json:"missing"`
	Changed []ChangedObject `json:"changed"`
}

// ChangedObject is an object that is there but not as its entry says.
type ChangedObject struct {
	TableObject
	Reason string `json:"reason"`
}

// VerifyTableObjects lists the objects of table as of ref, as TableObjects does, then
// HEADs every one (8 at a time) to check it is there with the size its entry records.
// progress, when set, is called from several goroutines with the objects checked so far
// and their total. Missing or changed objects are in the result, not an error.
func (r *Reader) VerifyTableObjects(ctx context.Context, graphName string, ref Ref, table string, progress func(done, total int64)) (TableVerification, error) {
	l, objs, err := r.tableObjects(ctx, graphName, ref, table)
	if err != nil {
		return TableVerification{}, err
	}
	var each func(int64)
	if progress != nil {
		total := int64(len(objs))
		progress(0, total)
		each = func(done int64) { progress(done, total) }
	}
	problems, err := graph.VerifyObjects(ctx, r.store, objs, each)
	if err != nil {
		return TableVerification{}, fmt.Errorf("verify objects of table %s: %w", table, err)
	}
	v := TableVerification{Graph: l.Graph, Ref: l.Ref, Table: l.Table, Version: l.Version, Objects: len(objs),
		Verified: len(objs) - len(problems), Missing: []TableObject{}, Changed: []ChangedObject{}}
	for _, p := range problems {
		if p.Missing {
			v.Missing = append(v.Missing, l.Objects[p.Index])
		} else {
			v.Changed = append(v.Changed, ChangedObject{TableObject: l.Objects[p.Index], Reason: p.Reason})
		}
	}
	return v, nil
}
