package format

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors, for errors.Is; struct errors below carry the detail.
var (
	// ErrInvalidName reports a name, commit id or ULID breaking its rules.
	ErrInvalidName = errors.New("format: invalid name")
	// ErrMalformed reports bytes or a value that is not a valid control object.
	ErrMalformed = errors.New("format: malformed object")
	// ErrUnsupportedFormat reports a control object of another format version.
	ErrUnsupportedFormat = errors.New("format: unsupported format version")
	// ErrTooLarge reports an object over MaxObjectSize, or a value over a limit.
	ErrTooLarge = errors.New("format: too large")
)

// NameError reports an invalid name or identifier. It matches ErrInvalidName.
type NameError struct {
	What   string // the kind of name: "graph name", "commit id", "ULID", ...
	Name   string // the offending value
	Reason string // the rule it breaks
}

func (e *NameError) Error() string {
	return fmt.Sprintf("format: invalid %s %q: %s", e.What, e.Name, e.Reason)
}

// Is matches ErrInvalidName.
func (e *NameError) Is(target error) bool { return target == ErrInvalidName }

// MalformedError reports an invalid control object or value; it matches ErrMalformed and Err.
type MalformedError struct {
	Kind   Kind   // the kind being encoded or decoded
	Field  string // the offending JSON field ("" for the whole object)
	Reason string // what is wrong
	Err    error  // an underlying error, if any
}

func (e *MalformedError) Error() string {
	s := "format: malformed "
	if e.Kind != "" {
		s += string(e.Kind) + " "
	}
	s += "object"
	if e.Field != "" {
		s += fmt.Sprintf(": field %q", e.Field)
	}
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Is matches ErrMalformed.
func (e *MalformedError) Is(target error) bool { return target == ErrMalformed }

func (e *MalformedError) Unwrap() error { return e.Err }

// UnsupportedFormatError reports a control object of a format version this build cannot read.
type UnsupportedFormatError struct {
	Kind    Kind // the kind that was expected
	Version int64
	Want    int64 // the version the decoder reads (Version)
}

func (e *UnsupportedFormatError) Error() string {
	return fmt.Sprintf("format: unsupported format version %d of %s object (this decoder reads format %d)", e.Version, e.Kind, e.Want)
}

// Is matches ErrUnsupportedFormat.
func (e *UnsupportedFormatError) Is(target error) bool { return target == ErrUnsupportedFormat }

// TooLargeError reports a size or count over its limit. It matches ErrTooLarge.
type TooLargeError struct {
	Kind  Kind   // the kind being encoded or decoded
	What  string // "encoded size in bytes", "objects", "message bytes", ...
	Size  int64
	Limit int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("format: %s object too large: %s is %d, limit %d", e.Kind, e.What, e.Size, e.Limit)
}

// Is matches ErrTooLarge.
func (e *TooLargeError) Is(target error) bool { return target == ErrTooLarge }

// fieldCheck is one field's check: the reason or the error it fails with, if any.
type fieldCheck struct {
	field, why string
	err        error
}

// firstBad returns the first failed check of a kind k object as a *MalformedError.
func firstBad(k Kind, checks ...fieldCheck) error {
	for _, c := range checks {
		switch {
		case c.err != nil:
			return malformedErr(k, c.field, c.err)
		case c.why != "":
			return malformed(k, c.field, c.why)
		}
	}
	return nil
}

// onlyIf returns why value, which must be set iff set, is wrong: check's
// reason when set, else "set on a {what}" when it is there.
func onlyIf(set bool, value string, check func(string) string, what string) string {
	switch {
	case set:
		return check(value)
	case value != "":
		return "set on a " + what
	}
	return ""
}

// whyIf returns why when bad, else "".
func whyIf(bad bool, why string) string {
	if bad {
		return why
	}
	return ""
}

func malformed(kind Kind, field, reason string) error {

	return &MalformedError{Kind: kind, Field: field, Reason: reason}
}

func malformedErr(kind Kind, field string, err error) error {
	return &MalformedError{Kind: kind, Field: field, Err: err}
}

// Describe says what is wrong with a value, for a person: the rule it breaks, without a prefix.
func Describe(err error) string {
	var ne *NameError
	if errors.As(err, &ne) {
		return fmt.Sprintf("invalid %s %q: %s", ne.What, ne.Name, ne.Reason)
	}
	var me *MalformedError
	if errors.As(err, &me) && me.Field != "" {
		return me.Field + " " + me.Reason
	}
	return strings.TrimPrefix(err.Error(), "format: ")
}
