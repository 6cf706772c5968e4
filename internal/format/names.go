package format

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/oklog/ulid/v2"
)

// Name limits, in bytes.
const (
	// MaxGraphNameLen bounds a graph name.
	MaxGraphNameLen = 63
	// MaxTableNameLen bounds a table name.
	MaxTableNameLen = 64
	// MaxBranchNameLen bounds a logical branch name and a tag name.
	MaxBranchNameLen = 128
	// MaxNativeNameLen bounds a native branch name: logical + "." + ULID.
	MaxNativeNameLen = MaxBranchNameLen + 1 + ulid.EncodedSize
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

// ValidateTableName checks a table name: 1..64 bytes of [a-z0-9_-], starting
// with [a-z0-9_].
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

// checkChars returns why s is not 1..max bytes with its first byte in class
// first and the rest in class rest, or "". Classes are bracket expressions of
// ranges and single characters ('-' last).
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
// (any case), and not ULID-shaped or ending in "." and one (so a logical name
// never looks native).
func validatePathName(what, name string) error {
	bad := func(why string) error { return &NameError{What: what, Name: name, Reason: why} }
	if name == "" {
		return bad("empty")
	}
	if len(name) > MaxBranchNameLen {
		return bad("longer than 128 bytes")
	}
	if strings.Contains(name, "..") {
		return bad("contains \"..\"")
	}
	for i, seg := range strings.Split(name, "/") {
		n := i + 1
		if seg == "" {
			return bad("segment " + strconv.Itoa(n) + " is empty")
		}
		if why := checkChars(seg, len(seg), "[A-Za-z0-9]", "[A-Za-z0-9._-]"); why != "" {
			return bad("segment " + strconv.Itoa(n) + " " + why)
		}
		if strings.HasSuffix(seg, ".") {
			return bad("segment " + strconv.Itoa(n) + " must not end in '.'")
		}
		lower := strings.ToLower(seg)
		if strings.HasSuffix(lower, ".json") || strings.HasSuffix(lower, ".lock") {
			return bad("segment " + strconv.Itoa(n) + " must not end in \".json\" or \".lock\"")
		}
		if isULIDShaped(seg) {
			return bad("segment " + strconv.Itoa(n) + " is ULID-shaped")
		}
		if k := strings.LastIndexByte(seg, '.'); k >= 0 && isULIDShaped(seg[k+1:]) {
			return bad("segment " + strconv.Itoa(n) + " ends in \".\" and a ULID, reserved for native names")
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
	if err := ValidateBranchName(logical); err != nil {
		return "", ulid.ULID{}, bad("logical part: " + err.(*NameError).Reason)
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
	if err != nil {
		return ulid.ULID{}, "not a ULID: " + err.Error()
	}
	if id.String() != s {
		return ulid.ULID{}, "not in canonical upper case"
	}
	if id.IsZero() {
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
	if len(s) != ulid.EncodedSize {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' {
			c -= 'a' - 'A'
		}
		if !strings.ContainsRune(ulid.Encoding, rune(c)) {
			return false
		}
	}
	return true
}
