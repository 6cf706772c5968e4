package format

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/oklog/ulid/v2"
)

// Commit is a commit at CommitIDKey(graph, ID). Its id carries its content's
// digest, so a late or re-issued put writes the same bytes at the same key.
// Its pins and lineage are maps, so neither has a ceiling.
type Commit struct {
	ID     CommitID // the commit's tree, seq and digest; SealCommit computes the digest
	Branch string   // logical name of the branch the tree belongs to
	// Parents: the first parent, then an optional merged parent. Seq 0 has none
	// (main's root) or one in another tree (a fork); seq n has first {Tree, n-1}.
	Parents []CommitID
	// Fork is the commit the tree was forked from, on every commit of the tree so
	// a merge's base search starts there; zero for main's first tree.
	Fork         CommitID
	Pins         MapRef[PinEntry]     // table name → the version of it this commit reads
	RestoredFrom CommitID             // the commit whose pins a restore copied; zero if none
	Lineage      MapRef[LineageEntry] // every other tree with an ancestor → its highest ancestor seq
	Author       string
	Message      string
	Time         time.Time
	Op           string
}

// FirstParent returns the commit's first parent, zero for a root commit.
func (c Commit) FirstParent() CommitID {
	if len(c.Parents) == 0 {
		return CommitID{}
	}
	return c.Parents[0]
}

// MergedParent returns the commit's merged parent, zero if none.
func (c Commit) MergedParent() CommitID {
	if len(c.Parents) < 2 {
		return CommitID{}
	}
	return c.Parents[1]
}

type commitWire struct {
	Format       int        `json:"format"`
	Kind         Kind       `json:"kind"`
	ID           string     `json:"id,omitempty"`
	Tree         string     `json:"tree"`
	Seq          int64      `json:"seq"`
	Branch       string     `json:"branch"`
	Parents      []string   `json:"parents"`
	Fork         string     `json:"fork,omitempty"`
	Pins         mapRefJSON `json:"pins"`
	RestoredFrom string     `json:"restored_from,omitempty"`
	Lineage      mapRefJSON `json:"lineage"`
	Author       string     `json:"author"`
	Message      string     `json:"message"`
	Time         string     `json:"time"`
	Op           string     `json:"op"`
}

// commitFields is not fieldsOf[commitWire]: "id" is omitted only from the bytes hashed.
var commitFields = fieldSet{
	required: []string{"format", "kind", "id", "tree", "seq", "branch", "parents", "pins", "lineage", "author", "message", "time", "op"},
	optional: []string{"fork", "restored_from"},
}

// Validate reports the first invalid field of c (not its digest).
func (c Commit) Validate() error {
	const k = KindCommit
	switch branchErr := ValidateBranchName(c.Branch); {
	case c.ID.Tree.IsZero():
		return malformed(k, "tree", "zero ULID")
	case c.ID.Seq < 0:
		return malformed(k, "seq", "negative")
	case branchErr != nil:
		return malformedErr(k, "branch", branchErr)
	case len(c.Parents) > 2:
		return malformed(k, "parents", "more than 2")
	}
	for i, p := range c.Parents {
		if !p.valid() {
			return malformed(k, "parents", "parent "+strconv.Itoa(i)+": not a commit id")
		}
	}
	if c.ID.Seq == 0 {
		switch {
		case len(c.Parents) > 1:
			return malformed(k, "parents", "a tree's first commit has at most one parent")
		case len(c.Parents) == 1 && c.Parents[0].Tree == c.ID.Tree:
			return malformed(k, "parents", "a fork commit's parent must be in another tree")
		case len(c.Parents) == 1 && c.Fork != c.Parents[0]:
			return malformed(k, "fork", "a fork commit's fork must be its parent")
		case len(c.Parents) == 0 && !c.Fork.IsZero():
			return malformed(k, "fork", "set on a root commit")
		}
	} else {
		if len(c.Parents) == 0 || c.Parents[0].Tree != c.ID.Tree || c.Parents[0].Seq != c.ID.Seq-1 {
			return malformed(k, "parents", fmt.Sprintf("first parent must be seq %d of tree %s", c.ID.Seq-1, c.ID.Tree))
		}
		if len(c.Parents) == 2 && c.Parents[1].Tree == c.ID.Tree {
			return malformed(k, "parents", "merged parent must be in another tree")
		}
	}
	switch {
	case !c.Fork.IsZero() && (c.Fork.Tree == c.ID.Tree || !c.Fork.valid()):
		return malformed(k, "fork", "must be a commit of another tree")
	case !c.RestoredFrom.IsZero() && !c.RestoredFrom.valid():
		return malformed(k, "restored_from", "not a commit id")
	}
	if _, err := PinsMap.refWire(k, "pins", c.Pins); err != nil {
		return err
	}
	if _, err := LineageMap.refWire(k, "lineage", c.Lineage); err != nil {
		return err
	}
	if c.Lineage.IsInline() {
		// Checkable when inline: the lineage never holds the commit's own tree and
		// covers every parent in another tree and the fork.
		seqs := make(map[ulid.ULID]LineageEntry, len(c.Lineage.Entries))
		for _, e := range c.Lineage.Entries {
			if e.Tree == c.ID.Tree {
				return malformed(k, "lineage", "holds the commit's own tree")
			}
			seqs[e.Tree] = e
		}
		for _, p := range append(slices.Clip(c.Parents), c.Fork) {
			if p.IsZero() || p.Tree == c.ID.Tree {
				continue
			}
			e, ok := seqs[p.Tree]
			if !ok || e.Seq < p.Seq || e.Seq == p.Seq && e.ID() != p {
				return malformed(k, "lineage", fmt.Sprintf("ancestor %s is not covered", p))
			}
		}
	}
	if err := ValidateAuthor(c.Author); err != nil {
		return err
	}
	if err := ValidateMessage(c.Message); err != nil {
		return err
	}
	return firstBad(k, fieldCheck{"time", checkTime(c.Time), nil}, fieldCheck{"op", checkOp(c.Op), nil})
}

func (c Commit) wire() commitWire {
	w := commitWire{Format: Version, Kind: KindCommit, Tree: c.ID.Tree.String(), Seq: c.ID.Seq,
		Branch: c.Branch, Parents: make([]string, 0, len(c.Parents)), Fork: optionalID(c.Fork),
		RestoredFrom: optionalID(c.RestoredFrom), Author: c.Author, Message: c.Message,
		Time: FormatTime(c.Time), Op: c.Op}
	for _, p := range c.Parents {
		w.Parents = append(w.Parents, p.String())
	}
	w.Pins, _ = PinsMap.refWire(KindCommit, "pins", c.Pins)
	w.Lineage, _ = LineageMap.refWire(KindCommit, "lineage", c.Lineage)
	return w
}

// optionalID is id's text, "" for the zero id (an omitted field).
func optionalID(id CommitID) string {
	if id.IsZero() {
		return ""
	}
	return id.String()
}

// commitDigest is the digest of a commit's canonical encoding without "id".
func commitDigest(w commitWire) (Digest, error) {
	w.ID = ""
	b, err := json.Marshal(w)
	if err != nil {
		return Digest{}, &MalformedError{Kind: KindCommit, Reason: "encode", Err: err}
	}
	sum := sha256.Sum256(b)
	return Digest(sum[:len(Digest{})]), nil
}

// SealCommit computes c's digest and returns c with its full id and its canonical bytes.
func SealCommit(c Commit) (Commit, []byte, error) {
	if err := c.Validate(); err != nil {
		return Commit{}, nil, err
	}
	w := c.wire()
	d, err := commitDigest(w)
	if err != nil {
		return Commit{}, nil, err
	}
	c.ID.Digest = d
	w.ID = c.ID.String()
	b, err := encodeWire(KindCommit, nil, w)
	return c, b, err
}

// DecodeCommit strictly decodes a commit and checks its id's digest.
func DecodeCommit(b []byte) (Commit, error) {
	const k = KindCommit
	top, err := decodeEnvelope(b, k, commitFields)
	if err != nil {
		return Commit{}, err
	}
	for _, f := range []string{"pins", "lineage"} {
		if raw := top[f]; len(raw) == 0 || raw[0] != '{' {
			return Commit{}, malformed(k, f, "not an object")
		}
	}
	// pins and lineage are decoded from top (mapRefJSON takes nothing from JSON).
	var w commitWire
	if err := unmarshalWire(k, b, &w); err != nil {
		return Commit{}, err
	}
	p := fieldParser{k: k}
	id, tree := p.commitID("id", w.ID, false), p.ulid("tree", w.Tree, false)
	if p.err == nil && (id.Tree != tree || id.Seq != w.Seq) {
		p.err = malformed(k, "id", "does not match tree and seq")
	}
	c := Commit{ID: id, Branch: w.Branch, Author: w.Author, Message: w.Message, Op: w.Op}
	for _, parent := range w.Parents {
		c.Parents = append(c.Parents, p.commitID("parents", parent, false))
	}
	c.Fork = p.commitID("fork", w.Fork, true)
	c.RestoredFrom = p.commitID("restored_from", w.RestoredFrom, true)
	if p.err != nil {
		return Commit{}, p.err
	}
	if c.Pins, err = PinsMap.decodeRef(k, "pins", top["pins"]); err != nil {
		return Commit{}, err
	}
	if c.Lineage, err = LineageMap.decodeRef(k, "lineage", top["lineage"]); err != nil {
		return Commit{}, err
	}
	if c.Time = p.time("time", w.Time); p.err != nil {
		return Commit{}, p.err
	}
	sealed, again, err := SealCommit(c)
	if err != nil {
		return Commit{}, err
	}
	if sealed.ID != id || !bytes.Equal(again, b) {
		return Commit{}, malformed(k, "id", "digest does not match the commit's content, or the bytes are not canonical")
	}
	return c, nil
}
