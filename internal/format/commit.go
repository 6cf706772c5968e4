package format

import (
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/oklog/ulid/v2"
)

// Commit is an immutable commit at CommitKey(graph, ID.Tree, ID.Seq). It is
// self-contained: reading a branch at a commit needs only the commit and the
// table versions it pins.
type Commit struct {
	ID     CommitID
	Branch string // logical name of the branch the tree belongs to
	// Parents are 0..2 commits: the first parent, then an optional merged
	// parent. Seq 0 has no parent (main's root commit) or one in another
	// tree (a fork commit); seq n > 0 has first parent {Tree, n-1}.
	Parents []CommitID
	// Pins maps table name to the version of it this commit reads.
	Pins map[string]ulid.ULID
	// RestoredFrom is the commit whose pins a restore copied; zero if none.
	RestoredFrom CommitID
	// Lineage maps every other tree with an ancestor of this commit to the
	// highest seq of that tree that is an ancestor. It never holds ID.Tree.
	// See Lineage for how it is derived from the parents.
	Lineage map[ulid.ULID]int64
	Author  string
	Message string
	Time    time.Time
	Op      string
}

type commitWire struct {
	Format       int               `json:"format"`
	Kind         Kind              `json:"kind"`
	ID           string            `json:"id"`
	Tree         string            `json:"tree"`
	Seq          int64             `json:"seq"`
	Branch       string            `json:"branch"`
	Parents      []string          `json:"parents"`
	Pins         map[string]string `json:"pins"`
	RestoredFrom string            `json:"restored_from,omitempty"`
	Lineage      map[string]int64  `json:"lineage"`
	Author       string            `json:"author"`
	Message      string            `json:"message"`
	Time         string            `json:"time"`
	Op           string            `json:"op"`
}

var commitFields = fieldSet{
	required: []string{"format", "kind", "id", "tree", "seq", "branch", "parents", "pins", "lineage", "author", "message", "time", "op"},
	optional: []string{"restored_from"},
}

// Lineage returns the lineage of a commit in tree whose parents are given,
// first parent first: the max-union over the parents p of p.Lineage and
// {p.ID.Tree: p.ID.Seq}, without tree itself. So a fork commit's lineage is
// its parent's plus the parent's own position, an ordinary append inherits
// its parent's, and a merge combines both parents'.
func Lineage(tree ulid.ULID, parents ...Commit) map[ulid.ULID]int64 {
	out := map[ulid.ULID]int64{}
	raise := func(t ulid.ULID, seq int64) {
		if cur, ok := out[t]; !ok || seq > cur {
			out[t] = seq
		}
	}
	for _, p := range parents {
		for t, seq := range p.Lineage {
			raise(t, seq)
		}
		raise(p.ID.Tree, p.ID.Seq)
	}
	delete(out, tree)
	return out
}

// Validate reports the first invalid field of c.
func (c Commit) Validate() error {
	const k = KindCommit
	if c.ID.Tree.IsZero() {
		return malformed(k, "tree", "zero ULID")
	}
	if c.ID.Seq < 0 {
		return malformed(k, "seq", "negative")
	}
	if c.ID.IsV2() {
		return malformed(k, "id", "a format-2 id (with a digest) in a format-1 commit")
	}
	for i, p := range c.Parents {
		if p.IsV2() {
			return malformed(k, "parents", "parent "+strconv.Itoa(i)+": a format-2 id in a format-1 commit")
		}
	}
	if c.RestoredFrom.IsV2() {
		return malformed(k, "restored_from", "a format-2 id in a format-1 commit")
	}
	if err := ValidateBranchName(c.Branch); err != nil {
		return malformedErr(k, "branch", err)
	}
	if err := c.validateParents(); err != nil {
		return err
	}
	for _, table := range sortedKeys(c.Pins) {
		version := c.Pins[table]
		if err := ValidateTableName(table); err != nil {
			return malformedErr(k, "pins", err)
		}
		if version.IsZero() {
			return malformed(k, "pins", "table "+table+": zero version ULID")
		}
	}
	if !c.RestoredFrom.IsZero() && c.RestoredFrom.Tree.IsZero() {
		return malformed(k, "restored_from", "zero tree ULID")
	}
	for _, tree := range sortedTrees(c.Lineage) {
		seq := c.Lineage[tree]
		switch {
		case tree.IsZero():
			return malformed(k, "lineage", "zero tree ULID")
		case tree == c.ID.Tree:
			return malformed(k, "lineage", "holds the commit's own tree")
		case seq < 0:
			return malformed(k, "lineage", "tree "+tree.String()+": negative seq")
		}
	}
	for i, p := range c.Parents {
		if p.Tree != c.ID.Tree {
			if seq, ok := c.Lineage[p.Tree]; !ok || seq < p.Seq {
				return malformed(k, "lineage", fmt.Sprintf("parent %d (%s) is not covered", i, p))
			}
		}
	}
	if err := ValidateAuthor(c.Author); err != nil {
		return err
	}
	if err := ValidateMessage(c.Message); err != nil {
		return err
	}
	if why := checkTime(c.Time); why != "" {
		return malformed(k, "time", why)
	}
	if why := checkOp(c.Op); why != "" {
		return malformed(k, "op", why)
	}
	return nil
}

func (c Commit) validateParents() error {
	const k = KindCommit
	if len(c.Parents) > 2 {
		return malformed(k, "parents", "more than 2")
	}
	for i, p := range c.Parents {
		if p.Tree.IsZero() {
			return malformed(k, "parents", "parent "+strconv.Itoa(i)+": zero tree ULID")
		}
		if p.Seq < 0 {
			return malformed(k, "parents", "parent "+strconv.Itoa(i)+": negative seq")
		}
	}
	if c.ID.Seq == 0 {
		switch {
		case len(c.Parents) > 1:
			return malformed(k, "parents", "a tree's first commit has at most one parent")
		case len(c.Parents) == 1 && c.Parents[0].Tree == c.ID.Tree:
			return malformed(k, "parents", "a fork commit's parent must be in another tree")
		}
		return nil
	}
	want := CommitID{Tree: c.ID.Tree, Seq: c.ID.Seq - 1}
	if len(c.Parents) == 0 || c.Parents[0] != want {
		return malformed(k, "parents", "first parent must be "+want.String())
	}
	if len(c.Parents) == 2 && c.Parents[1].Tree == c.ID.Tree {
		return malformed(k, "parents", "merged parent must be in another tree")
	}
	return nil
}

// EncodeCommit returns the canonical bytes of c.
func EncodeCommit(c Commit) ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	w := commitWire{
		Format:  Version,
		Kind:    KindCommit,
		ID:      c.ID.String(),
		Tree:    c.ID.Tree.String(),
		Seq:     c.ID.Seq,
		Branch:  c.Branch,
		Parents: make([]string, 0, len(c.Parents)),
		Pins:    make(map[string]string, len(c.Pins)),
		Lineage: make(map[string]int64, len(c.Lineage)),
		Author:  c.Author,
		Message: c.Message,
		Time:    FormatTime(c.Time),
		Op:      c.Op,
	}
	for _, p := range c.Parents {
		w.Parents = append(w.Parents, p.String())
	}
	for table, version := range c.Pins {
		w.Pins[table] = version.String()
	}
	if !c.RestoredFrom.IsZero() {
		w.RestoredFrom = c.RestoredFrom.String()
	}
	for tree, seq := range c.Lineage {
		w.Lineage[tree.String()] = seq
	}
	return encodeWire(KindCommit, w)
}

// DecodeCommit strictly decodes a commit. Pins and Lineage are never nil.
func DecodeCommit(b []byte) (Commit, error) {
	const k = KindCommit
	if _, err := decodeEnvelope(b, k, commitFields); err != nil {
		return Commit{}, err
	}
	var w commitWire
	if err := unmarshalWire(k, b, &w); err != nil {
		return Commit{}, err
	}
	id, err := ParseCommitID(w.ID)
	if err != nil {
		return Commit{}, malformedErr(k, "id", err)
	}
	tree, err := ParseULID(w.Tree)
	if err != nil {
		return Commit{}, malformedErr(k, "tree", err)
	}
	if id.Tree != tree || id.Seq != w.Seq {
		return Commit{}, malformed(k, "id", "does not match tree and seq")
	}
	c := Commit{
		ID:      id,
		Branch:  w.Branch,
		Pins:    make(map[string]ulid.ULID, len(w.Pins)),
		Lineage: make(map[ulid.ULID]int64, len(w.Lineage)),
		Author:  w.Author,
		Message: w.Message,
		Op:      w.Op,
	}
	for _, p := range w.Parents {
		pid, err := ParseCommitID(p)
		if err != nil {
			return Commit{}, malformedErr(k, "parents", err)
		}
		c.Parents = append(c.Parents, pid)
	}
	for table, version := range w.Pins {
		v, err := ParseULID(version)
		if err != nil {
			return Commit{}, malformedErr(k, "pins", err)
		}
		c.Pins[table] = v
	}
	if w.RestoredFrom != "" {
		if c.RestoredFrom, err = ParseCommitID(w.RestoredFrom); err != nil {
			return Commit{}, malformedErr(k, "restored_from", err)
		}
	}
	for treeText, seq := range w.Lineage {
		t, err := ParseULID(treeText)
		if err != nil {
			return Commit{}, malformedErr(k, "lineage", err)
		}
		c.Lineage[t] = seq
	}
	var why string
	if c.Time, why = parseTime(w.Time); why != "" {
		return Commit{}, malformed(k, "time", why)
	}
	if err := c.Validate(); err != nil {
		return Commit{}, err
	}
	return c, nil
}

// sortedKeys returns m's keys in ascending order, so validation reports the
// same first error every time.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func sortedTrees(m map[ulid.ULID]int64) []ulid.ULID {
	trees := make([]ulid.ULID, 0, len(m))
	for t := range m {
		trees = append(trees, t)
	}
	sort.Slice(trees, func(i, j int) bool { return trees[i].Compare(trees[j]) < 0 })
	return trees
}
