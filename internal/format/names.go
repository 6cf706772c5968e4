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

// Name limits, in bytes.
const (
	MaxGraphNameLen  = 63
	MaxTableNameLen  = 64
	MaxBranchNameLen = 128                                     // also a tag name's
	MaxNativeNameLen = MaxBranchNameLen + 1 + ulid.EncodedSize // logical + "." + ULID
)

// ValidateGraphName checks a graph name: 1..63 bytes of [a-z0-9._-], starting
// with [a-z0-9], not ending in '.'.
func ValidateGraphName(name string) error {
	why := checkChars(name, MaxGraphNameLen, "[a-z0-9]", "[a-z0-9._-]")
	if why == "" && strings.HasSuffix(name, ".") {
		why = "must not end in '.'"
	}
	return nameErr("graph name", name, why)
}

// ValidateTableName checks a table name: 1..64 bytes of [a-z0-9_-], starting with [a-z0-9_].
func ValidateTableName(name string) error {
	return nameErr("table name", name, checkChars(name, MaxTableNameLen, "[a-z0-9_]", "[a-z0-9_-]"))
}

// nameErr is a *NameError when why is not "", else nil.
func nameErr(what, name, why string) error {
	if why == "" {
		return nil
	}
	return &NameError{What: what, Name: name, Reason: why}
}

// reason is the Reason of a *NameError, "" for nil.
func reason(err error) string {
	if err == nil {
		return ""
	}
	return err.(*NameError).Reason
}

// checkChars returns why s is not 1..max bytes with its first byte in class first
// and the rest in class rest, or "". A class is a bracket expression ('-' last).
func checkChars(s string, max int, first, rest string) string {
	switch {
	case s == "":
		return "empty"
	case len(s) > max:
		return fmt.Sprintf("longer than %d bytes", max)
	case !inClass(s[0], first):
		return "must start with " + first
	}
	for i := 1; i < len(s); i++ {
		if !inClass(s[i], rest) {
			return "may contain only " + rest
		}
	}
	return ""
}

func inClass(c byte, class string) bool {
	set := class[1 : len(class)-1]
	for i := 0; i < len(set); i++ {
		if i+2 < len(set) && set[i+1] == '-' {
			if set[i] <= c && c <= set[i+2] {
				return true
			}
			i += 2
		} else if c == set[i] {
			return true
		}
	}
	return false
}

// ValidateBranchName checks a logical branch name (see validatePathName).
func ValidateBranchName(name string) error { return validatePathName("branch name", name) }

// ValidateTagName checks a tag name; tags follow the branch-name rules.
func ValidateTagName(name string) error { return validatePathName("tag name", name) }

// validatePathName checks a '/'-separated name: at most 128 bytes, no "..",
// segments of [A-Za-z0-9][A-Za-z0-9._-]* not ending in '.', ".json" or ".lock"
// (any case), nor ULID-shaped or in "." and one (a logical name never looks native).
func validatePathName(what, name string) error {
	bad := func(why string) error { return &NameError{What: what, Name: name, Reason: why} }
	switch {
	case name == "":
		return bad("empty")
	case len(name) > MaxBranchNameLen:
		return bad("longer than 128 bytes")
	case strings.Contains(name, ".."):
		return bad("contains \"..\"")
	}
	for i, seg := range strings.Split(name, "/") {
		lower, k := strings.ToLower(seg), strings.LastIndexByte(seg, '.')
		why := checkChars(seg, len(seg), "[A-Za-z0-9]", "[A-Za-z0-9._-]")
		switch {
		case seg == "":
			why = "is empty"
		case why != "":
		case strings.HasSuffix(seg, "."):
			why = "must not end in '.'"
		case strings.HasSuffix(lower, ".json") || strings.HasSuffix(lower, ".lock"):
			why = "must not end in \".json\" or \".lock\""
		case isULIDShaped(seg):
			why = "is ULID-shaped"
		case k >= 0 && isULIDShaped(seg[k+1:]):
			why = "ends in \".\" and a ULID, reserved for native names"
		}
		if why != "" {
			return bad("segment " + strconv.Itoa(i+1) + " " + why)
		}
	}
	return nil
}

// NativeName returns the native name of an incarnation of logical: "{logical}.{ULID}".
func NativeName(logical string, tree ulid.ULID) string {
	return logical + "." + tree.String()
}

// ParseNative splits and validates a native name: logical name and tree ULID.
func ParseNative(native string) (logical string, tree ulid.ULID, err error) {
	bad := func(why string) error { return &NameError{What: "native branch name", Name: native, Reason: why} }
	i := strings.LastIndexByte(native, '.')
	if i < 0 {
		return "", ulid.ULID{}, bad("missing \".{ULID}\" suffix")
	}
	logical = native[:i]
	if why := reason(ValidateBranchName(logical)); why != "" {
		return "", ulid.ULID{}, bad("logical part: " + why)
	}
	tree, why := parseULID(native[i+1:])
	if why != "" {
		return "", ulid.ULID{}, bad("ULID part: " + why)
	}
	return logical, tree, nil
}

// ValidateNative checks a native branch name.
func ValidateNative(native string) error {
	_, _, err := ParseNative(native)
	return err
}

// NthULID is first+n as a 128-bit big-endian integer: the ULIDs of a planned staged list's
// objects are first, NthULID(first, 1), … (docs/workflows.md, "Pin first, then upload").
func NthULID(first ulid.ULID, n uint64) ulid.ULID {
	id := first
	for i := len(id) - 1; i >= 0 && n > 0; i-- {
		sum := uint64(id[i]) + n&0xff
		id[i] = byte(sum)
		n = n>>8 + sum>>8
	}
	return id
}

// ParseULID parses a canonical upper-case, non-zero ULID.
func ParseULID(s string) (ulid.ULID, error) {
	id, why := parseULID(s)
	return id, nameErr("ULID", s, why)
}

func parseULID(s string) (ulid.ULID, string) {
	if len(s) != ulid.EncodedSize {
		return ulid.ULID{}, "not 26 characters"
	}
	id, err := ulid.ParseStrict(s)
	switch {
	case err != nil:
		return ulid.ULID{}, "not a ULID: " + err.Error()
	case id.String() != s:
		return ulid.ULID{}, "not in canonical upper case"
	case id.IsZero():
		return ulid.ULID{}, "zero ULID"
	}
	return id, ""
}

// PrefixDisjoint reports whether two logical names can both be live: they
// differ and neither is the other plus "/…" ("a" and "ab" are disjoint).
func PrefixDisjoint(a, b string) bool {
	if a == b {
		return false
	}
	if len(a) > len(b) {
		a, b = b, a
	}
	return !(strings.HasPrefix(b, a) && b[len(a)] == '/')
}

// isULIDShaped reports whether s is 26 Crockford base32 characters, in any case.
func isULIDShaped(s string) bool {
	return len(s) == ulid.EncodedSize && strings.Trim(s, ulid.Encoding+strings.ToLower(ulid.Encoding)) == ""
}

// CommitID names a commit, "{tree}-{seq}-{digest}": its tree's ULID, its seq in
// the tree (0 first) and its content's digest, so it locates the commit in one GET
// and names one byte string only (decoding checks). The zero CommitID is no commit.
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

// parseHex decodes 2*len(dst) lower-case hex digits, not all zero, into dst, or says why not.
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
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
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

// TimeLayout is how every time is written: RFC 3339 in UTC with nine fractional digits.
const TimeLayout = "2006-01-02T15:04:05.000000000Z07:00"

// FormatTime returns t in TimeLayout, converted to UTC.
func FormatTime(t time.Time) string { return t.UTC().Format(TimeLayout) }

// checkTime returns why t cannot be written, or "".
func checkTime(t time.Time) string {
	if t.IsZero() {
		return "zero time"
	}
	return whyIf(t.UTC().Year() < 1 || t.UTC().Year() > 9999, "year outside 0001..9999")
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
