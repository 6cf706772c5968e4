package format

import (
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Leaves are most of a map's bytes: a table of a million entries is about
// 7,800 leaves, 164 MB of JSON. Reading one costs one pass over its bytes:
// readLeaf parses a leaf as json.Marshal writes it (no whitespace, fields in
// wire order, integers without sign or exponent) straight into entries.
// Anything else — another spelling of the same JSON, a surrogate escape, bytes
// that are not a valid leaf at all — falls to the strict decoder, which
// accepts exactly the same leaves and names what is wrong with the rest. For every input readLeaf
// accepts, the strict decoder gives the same entries (the chunk fuzz targets
// hold it).

// leafPrefix is a leaf's bytes before its first entry.
func (m MapSpec[E]) leafPrefix() string {
	return `{"format":` + strconv.Itoa(Version) + `,"kind":"` + string(KindMapLeaf) + `","map":"` + string(m.Kind) + `","entries":[`
}

// readLeaf decodes b if it is a valid leaf of this kind spelled as
// json.Marshal spells it; false means "ask the strict decoder", never "invalid".
func (m MapSpec[E]) readLeaf(b []byte) ([]E, bool) {
	if len(b) > MaxChunkSize || !utf8.Valid(b) {
		return nil, false
	}
	s := leafScanner{b: b}
	if !s.need(m.leafPrefix()) {
		return nil, false
	}
	out := make([]E, 0, 128)
	for {
		e, ok := m.scan(&s)
		if !ok {
			return nil, false
		}
		out = append(out, e)
		if !s.need(",") {
			break
		}
	}
	if !s.need("]}") || s.i != len(b) || m.checkEntries(KindMapLeaf, "entries", out) != nil {
		return nil, false
	}
	return out, true
}

// LeafOf returns the leaf whose entries are entries: the encodings of
// AppendEntry separated by commas, which the caller has checked ascend
// strictly by key. Its bytes are EncodeLeaf's for those entries, without
// encoding them again.
func (m MapSpec[E]) LeafOf(entries []byte) []byte {
	prefix := m.leafPrefix()
	b := make([]byte, 0, len(prefix)+len(entries)+2)
	return append(append(append(b, prefix...), entries...), "]}"...)
}

// appendString appends s as json.Marshal writes it: as it is, unless it holds
// a byte json.Marshal escapes or 0xe2 (U+2028 and U+2029 start with it), or
// is not UTF-8.
func appendString(b []byte, s string) []byte {
	plain := utf8.ValidString(s)
	for i := 0; i < len(s) && plain; i++ {
		c := s[i]
		plain = c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' && c != 0xe2
	}
	if !plain {
		q, _ := json.Marshal(s)
		return append(b, q...)
	}
	return append(append(append(b, '"'), s...), '"')
}

// appendOpt appends an optional string field: nothing when empty (omitempty).
func appendOpt(b []byte, field, s string) []byte {
	if s == "" {
		return b
	}
	return appendString(append(b, field...), s)
}

// leafScanner reads a leaf's bytes from i on; each method reports whether
// what it expected was there, advancing past it only then.
type leafScanner struct {
	b []byte
	i int
}

// need reads the literal l.
func (s *leafScanner) need(l string) bool {
	if len(s.b)-s.i < len(l) || string(s.b[s.i:s.i+len(l)]) != l {
		return false
	}
	s.i += len(l)
	return true
}

// str reads a string (the caller checked UTF-8) into dst.
func (s *leafScanner) str(dst *string) bool {
	if !s.need(`"`) {
		return false
	}
	for j := s.i; j < len(s.b); j++ {
		switch c := s.b[j]; {
		case c == '"':
			*dst = string(s.b[s.i:j])
			s.i = j + 1
			return true
		case c == '\\':
			return s.escaped(dst)
		case c < 0x20:
			return false
		}
	}
	return false
}

// escaped reads the rest of a string that has escapes: the ones json.Marshal
// writes (an ETag's quotes, "\u003c" for '<') and the other short ones; a
// surrogate is left to the strict decoder.
func (s *leafScanner) escaped(dst *string) bool {
	var out []byte
	for j := s.i; j < len(s.b); j++ {
		c := s.b[j]
		switch {
		case c == '"':
			*dst = string(out)
			s.i = j + 1
			return true
		case c < 0x20:
			return false
		case c != '\\':
			out = append(out, c)
			continue
		}
		if j++; j == len(s.b) {
			return false
		}
		switch c := s.b[j]; c {
		case '"', '\\', '/':
			out = append(out, c)
		case 'b', 'f', 'n', 'r', 't':
			out = append(out, "\b\f\n\r\t"[strings.IndexByte("bfnrt", c)])
		case 'u':
			if len(s.b)-j < 5 {
				return false
			}
			r, err := strconv.ParseUint(string(s.b[j+1:j+5]), 16, 16)
			if err != nil || r >= 0xd800 && r < 0xe000 {
				return false
			}
			out = utf8.AppendRune(out, rune(r))
			j += 4
		default:
			return false
		}
	}
	return false
}

// opt reads an optional string field: absent, or its prefix l and a
// non-empty string (json.Marshal omits an empty one).
func (s *leafScanner) opt(l string, dst *string) bool {
	if !s.need(l) {
		return true
	}
	return s.str(dst) && *dst != ""
}

// int reads a non-negative integer of at most 18 digits (so no overflow),
// without leading zeros.
func (s *leafScanner) int(dst *int64) bool {
	var v int64
	j := s.i
	for ; j < len(s.b) && s.b[j] >= '0' && s.b[j] <= '9'; j++ {
		v = v*10 + int64(s.b[j]-'0')
		if j-s.i == 18 {
			return false
		}
	}
	if n := j - s.i; n == 0 || n > 1 && s.b[s.i] == '0' {
		return false
	}
	*dst, s.i = v, j
	return true
}

// scanWith makes a MapSpec.scan from a reader of the wire form's fields and
// the conversion the strict decoder uses.
func scanWith[W, E any](fields func(*leafScanner, *W) bool, conv func(W) (E, string, error)) func(*leafScanner) (E, bool) {
	return func(s *leafScanner) (E, bool) {
		var w W
		if !fields(s, &w) {
			var zero E
			return zero, false
		}
		e, _, err := conv(w)
		return e, err == nil
	}
}
