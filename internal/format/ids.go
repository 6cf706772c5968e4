package format

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
)

// CommitID names a commit: its tree's ULID, its seq in the tree (0 is the
// tree's first commit) and the digest of its content, "{tree}-{seq}-{digest}".
// It locates the commit in one GET, and names one byte string only: decoding
// checks the digest. The zero CommitID means "no commit".
type CommitID struct {
	Tree   ulid.ULID
	Seq    int64
	Digest Digest
}

// Digest is the 128-bit content digest in a commit id.
type Digest [16]byte

// IsZero reports whether d is zero (an unsealed commit).
func (d Digest) IsZero() bool { return d == Digest{} }

// String returns d as 32 lower-case hex digits.
func (d Digest) String() string { return hex.EncodeToString(d[:]) }

// String returns "{tree}-{seq}-{digest}" ("{tree}-{seq}" while unsealed).
func (c CommitID) String() string {
	s := c.Tree.String() + "-" + strconv.FormatInt(c.Seq, 10)
	if !c.Digest.IsZero() {
		s += "-" + c.Digest.String()
	}
	return s
}

// IsZero reports whether c is the zero CommitID.
func (c CommitID) IsZero() bool { return c == CommitID{} }

// valid reports whether c can name a commit: a tree, a seq ≥ 0 and a digest.
func (c CommitID) valid() bool { return !c.Tree.IsZero() && c.Seq >= 0 && !c.Digest.IsZero() }

// ParseCommitID parses "{tree}-{seq}-{digest}": a canonical non-zero ULID, a
// canonical non-negative decimal and 32 lower-case hex digits, not all zero.
func ParseCommitID(s string) (CommitID, error) {
	bad := func(why string) error { return &NameError{What: "commit id", Name: s, Reason: why} }
	tree, rest, ok := strings.Cut(s, "-")
	if !ok {
		return CommitID{}, bad("missing '-' between tree and seq")
	}
	id, why := parseULID(tree)
	if why != "" {
		return CommitID{}, bad("tree: " + why)
	}
	seqText, digestText, hasDigest := strings.Cut(rest, "-")
	seq, err := strconv.ParseInt(seqText, 10, 64)
	if err != nil || seq < 0 || strconv.FormatInt(seq, 10) != seqText {
		return CommitID{}, bad("seq is not a canonical non-negative decimal integer")
	}
	if !hasDigest {
		return CommitID{}, bad("missing '-' and the digest after seq")
	}
	d, why := parseDigest(digestText)
	if why != "" {
		return CommitID{}, bad("digest: " + why)
	}
	return CommitID{Tree: id, Seq: seq, Digest: d}, nil
}

func parseDigest(s string) (Digest, string) {
	var d Digest
	why := parseHex(d[:], s, "digest")
	return d, why
}

// parseHex decodes 2*len(dst) lower-case hex digits, not all zero, into dst,
// or says why not.
func parseHex(dst []byte, s, what string) string {
	switch {
	case len(s) != 2*len(dst):
		return fmt.Sprintf("not %d hex digits", 2*len(dst))
	case !isLowerHex(s):
		return "not lower-case hex"
	case strings.Trim(s, "0") == "":
		return "zero " + what
	}
	hex.Decode(dst, []byte(s))
	return ""
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// Hash is the SHA-256 of a chunk's bytes, which names the chunk's key.
type Hash [32]byte

// IsZero reports whether h is the zero hash (no chunk).
func (h Hash) IsZero() bool { return h == Hash{} }

// String returns h as 64 lower-case hex digits.
func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// HashOf returns the hash of b.
func HashOf(b []byte) Hash { return sha256.Sum256(b) }

// ParseHash parses 64 lower-case hex digits that are not all zero.
func ParseHash(s string) (Hash, error) {
	var h Hash
	why := parseHex(h[:], s, "hash")
	return h, nameErr("chunk hash", s, why)
}

// TimeLayout is how every time is written: RFC 3339 in UTC with nine
// fractional digits.
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
