package format

import (
	"strconv"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
)

// CommitID names a commit: the ULID of its tree and its sequence number in
// that tree (0 is the tree's first commit: main's root commit or a branch's
// fork commit). Its string form "{tree}-{seq}" locates the commit object in
// one GET (CommitKey). The zero CommitID means "no commit".
type CommitID struct {
	Tree ulid.ULID
	Seq  int64
}

// String returns "{tree}-{seq}" with seq in decimal.
func (c CommitID) String() string {
	return c.Tree.String() + "-" + strconv.FormatInt(c.Seq, 10)
}

// IsZero reports whether c is the zero CommitID.
func (c CommitID) IsZero() bool { return c == CommitID{} }

// ParseCommitID parses "{tree}-{seq}": a canonical non-zero ULID, '-', and a
// non-negative decimal without sign or leading zeros.
func ParseCommitID(s string) (CommitID, error) {
	bad := func(why string) error { return &NameError{What: "commit id", Name: s, Reason: why} }
	tree, seqText, ok := strings.Cut(s, "-")
	if !ok {
		return CommitID{}, bad("missing '-' between tree and seq")
	}
	id, why := parseULID(tree)
	if why != "" {
		return CommitID{}, bad("tree: " + why)
	}
	seq, err := strconv.ParseInt(seqText, 10, 64)
	if err != nil || seq < 0 || strconv.FormatInt(seq, 10) != seqText {
		return CommitID{}, bad("seq is not a canonical non-negative decimal integer")
	}
	return CommitID{Tree: id, Seq: seq}, nil
}

// TimeLayout is how every time is written: RFC 3339 in UTC with exactly
// nine fractional digits, e.g. "2025-01-02T03:04:05.000000000Z".
const TimeLayout = "2006-01-02T15:04:05.000000000Z07:00"

// FormatTime returns t in TimeLayout, converted to UTC.
func FormatTime(t time.Time) string { return t.UTC().Format(TimeLayout) }

// checkTime returns why t cannot be written, or "".
func checkTime(t time.Time) string {
	if t.IsZero() {
		return "zero time"
	}
	if y := t.UTC().Year(); y < 1 || y > 9999 {
		return "year outside 0001..9999"
	}
	return ""
}

// parseTime parses a time written by FormatTime, rejecting any other spelling.
func parseTime(s string) (time.Time, string) {
	t, err := time.Parse(TimeLayout, s)
	if err != nil {
		return time.Time{}, "not an RFC 3339 time: " + err.Error()
	}
	t = t.UTC()
	if FormatTime(t) != s {
		return time.Time{}, "not in canonical form " + TimeLayout
	}
	if why := checkTime(t); why != "" {
		return time.Time{}, why
	}
	return t, ""
}
