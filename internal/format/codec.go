package format

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/oklog/ulid/v2"
)

// Version is every control object's "format"; another is an UnsupportedFormatError, read no further.
const Version = 3

// MaxObjectSize bounds every encoded control object but a map's chunks (64 KiB),
// keeping every conditional PUT's failure a clean 412 and every read cheap.
const MaxObjectSize = 64 << 10

// MaxChunkSize bounds a map's chunk (map_leaf, map_node): 512 KiB, so a big table
// is a few large chunks rather than many small ones, each still one request.
const MaxChunkSize = 512 << 10

// maxSize is the bound of an encoded object of kind.
func maxSize(kind Kind) int {
	if kind == KindMapLeaf || kind == KindMapNode {
		return MaxChunkSize
	}
	return MaxObjectSize
}

// Kind names the type of a control object; it is the object's "kind" field.
type Kind string

const (
	KindGraph        Kind = "graph"
	KindTableVersion Kind = "table_version"
	KindCommit       Kind = "commit"
	KindBranchRef    Kind = "branch_ref"
	KindTag          Kind = "tag"
	KindUpload       Kind = "upload"
)

// Text limits, in bytes: of an operation id, a commit's author and message, a fence's
// reason, a multipart upload's id.
const (
	MaxOpLen      = 128
	MaxAuthorLen  = 256
	MaxMessageLen = 4096
	MaxReasonLen  = 64
	MaxUploadID   = 1024
)

// fieldSet lists the JSON fields of one object shape. Optional fields are
// strings that, when present, must not be empty (one spelling per value).
type fieldSet struct {
	required []string
	optional []string
}

// fieldsOf is the fieldSet of wire struct W: its "omitempty" fields optional, the rest required.
func fieldsOf[W any]() fieldSet {
	var f fieldSet
	t := reflect.TypeFor[W]()
	for i := range t.NumField() {
		name, opts, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if opts == "omitempty" {
			f.optional = append(f.optional, name)
		} else {
			f.required = append(f.required, name)
		}
	}
	return f
}

func (f fieldSet) has(name string) bool {
	return slices.Contains(f.required, name) || slices.Contains(f.optional, name)
}

// decodeEnvelope runs the checks common to all kinds (size, UTF-8, one JSON
// object, version, no duplicate keys or nulls, kind, exact field names) and
// returns the top-level fields.
func decodeEnvelope(b []byte, kind Kind, fields fieldSet) (map[string]json.RawMessage, error) {
	if len(b) > maxSize(kind) {
		return nil, &TooLargeError{Kind: kind, What: "encoded size in bytes", Size: int64(len(b)), Limit: int64(maxSize(kind))}
	}
	if !utf8.Valid(b) {
		return nil, malformed(kind, "", "invalid UTF-8")
	}
	report, err := scanJSON(b)
	if err != nil {
		return nil, &MalformedError{Kind: kind, Reason: "invalid JSON", Err: err}
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		return nil, &MalformedError{Kind: kind, Reason: "invalid JSON", Err: err}
	}
	var version int64 // first: another format is ErrUnsupportedFormat, whatever else is wrong
	if err := topField(kind, top, "format", &version, "not an integer"); err != nil {
		return nil, err
	}
	if version != Version {
		return nil, &UnsupportedFormatError{Kind: kind, Version: version, Want: Version}
	}
	if report.duplicate != "" {
		return nil, malformed(kind, report.duplicate, "duplicate key")
	}
	if report.null {
		return nil, malformed(kind, "", "null value (no field is nullable)")
	}
	var got string
	if err := topField(kind, top, "kind", &got, "not a string"); err != nil {
		return nil, err
	}
	if Kind(got) != kind {
		return nil, malformed(kind, "kind", fmt.Sprintf("is %q, want %q", got, kind))
	}
	if err := checkFields(kind, "", top, fields); err != nil {
		return nil, err
	}
	return top, nil
}

// topField decodes the required top-level field name into v, or is why not.
func topField(kind Kind, top map[string]json.RawMessage, name string, v any, wrongType string) error {
	raw, ok := top[name]
	if !ok {
		return malformed(kind, name, "missing required field")
	}
	if json.Unmarshal(raw, v) != nil {
		return malformed(kind, name, wrongType)
	}
	return nil
}

// checkFields checks field names exactly (encoding/json ignores case).
func checkFields(kind Kind, prefix string, m map[string]json.RawMessage, fields fieldSet) error {
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if !fields.has(k) {
			return malformed(kind, prefix+k, "unknown field")
		}
	}
	for _, k := range fields.required {
		if _, ok := m[k]; !ok {
			return malformed(kind, prefix+k, "missing required field")
		}
	}
	for _, k := range fields.optional {
		if raw, ok := m[k]; ok && string(raw) == `""` {
			return malformed(kind, prefix+k, "present but empty (omit it instead)")
		}
	}
	return nil
}

// decodeWire checks b's envelope, of W's fields, and unmarshals it into a W.
func decodeWire[W any](b []byte, kind Kind) (W, error) {
	var w W
	if _, err := decodeEnvelope(b, kind, fieldsOf[W]()); err != nil {
		return w, err
	}
	return w, unmarshalWire(kind, b, &w)
}

// unmarshalWire decodes b into a wire struct, reporting type errors by field.
func unmarshalWire(kind Kind, b []byte, wire any) error {
	if err := json.Unmarshal(b, wire); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			return &MalformedError{Kind: kind, Field: typeErr.Field, Reason: "wrong type", Err: err}
		}
		return &MalformedError{Kind: kind, Reason: "invalid JSON", Err: err}
	}
	return nil
}

// encodeWire marshals a value's wire struct, unless invalid (Validate's error), within its kind's bound.
func encodeWire(kind Kind, invalid error, wire any) ([]byte, error) {
	if invalid != nil {
		return nil, invalid
	}
	b, err := json.Marshal(wire)
	if err != nil {
		return nil, &MalformedError{Kind: kind, Reason: "encode", Err: err}
	}
	if len(b) > maxSize(kind) {
		return nil, &TooLargeError{Kind: kind, What: "encoded size in bytes", Size: int64(len(b)), Limit: int64(maxSize(kind))}
	}
	return b, nil
}

// validated returns v if it decoded (err nil) and is valid, else the error.
func validated[T interface{ Validate() error }](v T, err error) (T, error) {
	if err == nil {
		err = v.Validate()
	}
	if err != nil {
		var zero T
		return zero, err
	}
	return v, nil
}

// fieldParser parses a wire object's text fields, keeping the first error.
type fieldParser struct {
	k   Kind
	err error
}

func (p *fieldParser) time(field, s string) time.Time {
	t, why := parseTime(s)
	if p.err == nil && why != "" {
		p.err = malformed(p.k, field, why)
	}
	return t
}

func (p *fieldParser) commitID(field, s string, optional bool) CommitID {
	return parseField(p, field, s, optional, ParseCommitID)
}

func (p *fieldParser) ulid(field, s string, optional bool) ulid.ULID {
	return parseField(p, field, s, optional, ParseULID)
}

// parseField parses s, keeping p's first error; an optional field may be "", the zero value.
func parseField[T any](p *fieldParser, field, s string, optional bool, parse func(string) (T, error)) T {
	var v T
	if optional && s == "" {
		return v
	}
	v, err := parse(s)
	if p.err == nil && err != nil {
		p.err = malformedErr(p.k, field, err)
	}
	return v
}

// jsonReport is what scanJSON found that is valid JSON but not valid here.
type jsonReport struct {
	duplicate string // the first key repeated within one object
	null      bool   // some value is null
}

// scanJSON checks that b is one JSON object with nothing after it, and reports
// duplicate keys and nulls anywhere inside.
func scanJSON(b []byte) (jsonReport, error) {
	var r jsonReport
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	tok, err := dec.Token()
	switch {
	case err == io.EOF:
		return r, errors.New("empty input")
	case err != nil:
		return r, err
	case tok != json.Delim('{'):
		return r, errors.New("not a JSON object")
	}
	if err := r.scan(dec, tok); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return r, err
	}
	if _, err := dec.Token(); err != io.EOF {
		if err == nil {
			err = errors.New("trailing data after the object")
		}
		return r, err
	}
	return r, nil
}

// scan reads the rest of the value tok starts.
func (r *jsonReport) scan(dec *json.Decoder, tok json.Token) error {
	r.null = r.null || tok == nil
	if tok != json.Delim('{') && tok != json.Delim('[') {
		return nil
	}
	keys := map[string]bool{}
	for dec.More() {
		if tok == json.Delim('{') {
			k, err := dec.Token()
			if err != nil {
				return err
			}
			key, _ := k.(string)
			if keys[key] && r.duplicate == "" {
				r.duplicate = key
			}
			keys[key] = true
		}
		next, err := dec.Token()
		if err != nil {
			return err
		}
		if err := r.scan(dec, next); err != nil {
			return err
		}
	}
	_, err := dec.Token() // the closing delimiter
	return err
}

// ValidateOp checks an operation id (see checkOp); the error is a NameError.
func ValidateOp(op string) error { return nameErr("operation id", op, checkOp(op)) }

// checkOp returns why op is not 1..MaxOpLen bytes of [A-Za-z0-9._:/+=@-]
// starting with [A-Za-z0-9] (none needs a JSON escape), or "".
func checkOp(op string) string { return checkChars(op, MaxOpLen, "[A-Za-z0-9]", "[A-Za-z0-9._:/+=@-]") }

// checkText returns why s is not free text of at most max bytes without
// control characters (but newline and tab when multiline), or "".
func checkText(s string, max int, multiline bool) string {
	if len(s) > max {
		return fmt.Sprintf("longer than %d bytes", max)
	}
	if !utf8.ValidString(s) {
		return "invalid UTF-8"
	}
	for _, r := range s {
		switch tab := r == '\n' || r == '\t'; {
		case tab && !multiline:
			return "contains a newline or tab"
		case r < 0x20 && !tab || r == 0x7f:
			return "contains a control character"
		}
	}
	return ""
}

// checkReason returns why a fence reason is invalid, or "".
func checkReason(s string) string { return checkChars(s, MaxReasonLen, "[a-z]", "[a-z0-9_-]") }

// ValidateTime checks that t can be written: not zero, year 0001..9999 in UTC.
func ValidateTime(t time.Time) error {
	if why := checkTime(t); why != "" {
		return &MalformedError{Field: "time", Reason: why}
	}
	return nil
}

// ValidateAuthor checks a commit author: 1..MaxAuthorLen bytes of text.
func ValidateAuthor(author string) error {
	why := checkText(author, MaxAuthorLen, false)
	if author == "" {
		why = "empty"
	}
	return commitText("author", why)
}

// ValidateMessage checks a commit message: up to MaxMessageLen bytes of multiline text.
func ValidateMessage(message string) error {
	return commitText("message", checkText(message, MaxMessageLen, true))
}

func commitText(field, why string) error {
	if why == "" {
		return nil
	}
	return &MalformedError{Kind: KindCommit, Field: field, Reason: why}
}
