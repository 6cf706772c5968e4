package graph

import (
	"errors"
	"fmt"
	"strings"

	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/storage"
)

// Sentinel errors; match them with errors.Is.
var (
	ErrInvalid       = errors.New("graph: invalid input") // nothing was sent to storage
	ErrGraphNotFound = errors.New("graph: graph not found")
	// ErrGraphExists: another graph or init at an init's keys.
	ErrGraphExists     = errors.New("graph: graph exists with different contents")
	ErrBranchNotFound  = errors.New("graph: branch not found") // no live incarnation
	ErrMultipleLive    = errors.New("graph: more than one live incarnation")
	ErrStaleHead       = errors.New("graph: stale expected head")
	ErrCommitNotFound  = errors.New("graph: commit not found") // or a tree's head
	ErrTableNotPinned  = errors.New("graph: table not pinned by commit")
	ErrVersionNotFound = errors.New("graph: table version not found")
	ErrKeyTaken        = errors.New("graph: key holds different bytes")
	ErrObjectTooLarge  = errors.New("graph: data object too large")
)

// ParamError reports an invalid parameter; it matches ErrInvalid and Err.
type ParamError struct {
	Field  string // the parameter, e.g. "Graph", "ExpectedHead", "Objects[2].ID"
	Reason string
	Err    error
}

func (e *ParamError) Error() string {
	s := "graph: invalid " + e.Field
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Is matches ErrInvalid.
func (e *ParamError) Is(target error) bool { return target == ErrInvalid }

func (e *ParamError) Unwrap() error { return e.Err }

// MultipleLiveError names every live incarnation of one logical branch.
type MultipleLiveError struct {
	Graph   string
	Branch  string
	Natives []string // in key order
}

func (e *MultipleLiveError) Error() string {
	return fmt.Sprintf("graph: branch %q of graph %q has %d live incarnations: %s", e.Branch, e.Graph, len(e.Natives), strings.Join(e.Natives, ", "))
}

// Is matches ErrMultipleLive.
func (e *MultipleLiveError) Is(target error) bool { return target == ErrMultipleLive }

// StaleHeadError reports a head other than the expected one, or a planned commit
// that never became the head: Found is the head now at the ref's Key.
type StaleHeadError struct {
	Graph    string
	Expected format.CommitID // the head the caller expected
	Key      string
	Found    format.CommitID
	Planned  format.CommitID
	State    format.RefState
	Walked   int
}

func (e *StaleHeadError) Error() string {
	switch {
	case !e.Planned.IsZero() && e.State != "" && e.State != format.RefLive:
		return fmt.Sprintf("graph: commit %s never became the head: the ref %s is %s (head %s)", e.Planned, e.Key, e.State, e.Found)
	case !e.Planned.IsZero():
		return fmt.Sprintf("graph: commit %s never became the head: the ref %s names %s, which does not descend from it", e.Planned, e.Key, e.Found)
	case !e.Found.IsZero():
		return fmt.Sprintf("graph: expected head %s is stale: the head is %s", e.Expected, e.Found)
	}
	return fmt.Sprintf("graph: expected head %s is stale: %s holds another commit", e.Expected, e.Key)
}

// Is matches ErrStaleHead.
func (e *StaleHeadError) Is(target error) bool { return target == ErrStaleHead }

// KeyTakenError reports a put-if-absent that found other bytes. It matches ErrKeyTaken.
type KeyTakenError struct {
	Key string
}

func (e *KeyTakenError) Error() string {
	return fmt.Sprintf("graph: %s already holds different bytes", e.Key)
}

// Is matches ErrKeyTaken.
func (e *KeyTakenError) Is(target error) bool { return target == ErrKeyTaken }

// ObjectTooLargeError reports a data object over its limit. It matches ErrObjectTooLarge.
type ObjectTooLargeError struct {
	Object string // the object's ULID or file path
	Size   int64
	Limit  int64
}

func (e *ObjectTooLargeError) Error() string {
	return fmt.Sprintf("graph: data object %s is %d bytes, limit %d", e.Object, e.Size, e.Limit)
}

// Is matches ErrObjectTooLarge.
func (e *ObjectTooLargeError) Is(target error) bool { return target == ErrObjectTooLarge }

// InDoubtError reports a put still unknown after MaxPutAttempts; it matches
// storage.ErrAmbiguous. Settle it by re-issuing Body at Key, or SettlePublish(*Publish).
type InDoubtError struct {
	Key      string
	Body     []byte // the exact bytes; any re-issue must send these
	Attempts int
	Err      error    // the last storage error seen
	Graph    string   // set on a head swap
	Publish  *Publish // set on a head swap
}

func (e *InDoubtError) Error() string {
	return fmt.Sprintf("graph: put %q still in doubt after %d attempts: %v", e.Key, e.Attempts, e.Err)
}

// Is matches storage.ErrAmbiguous.
func (e *InDoubtError) Is(target error) bool { return target == storage.ErrAmbiguous }

func (e *InDoubtError) Unwrap() error { return e.Err }

// param is one parameter's check: its field, and its failure or nil.
type param struct {
	field string
	err   error
}

// checkParams returns the first failed check as a *ParamError.
func checkParams(ps ...param) error {
	for _, p := range ps {
		if p.err != nil {
			return invalid(p.field, p.err)
		}
	}
	return nil
}

func checkBranchParams(graph, logical string) error {
	return checkParams(param{"Graph", format.ValidateGraphName(graph)},
		param{"Branch", format.ValidateBranchName(logical)})
}

var (
	errZeroULID = errors.New("zero ULID")
	errEmpty    = errors.New("empty")
)

func nonEmpty(s string) error {
	if s == "" {
		return errEmpty
	}
	return nil
}

func nonZero(id ulid.ULID) error {
	if id.IsZero() {
		return errZeroULID
	}
	return nil
}

func invalid(field string, err error) error {
	return &ParamError{Field: field, Err: err}
}

func invalidf(field, format string, args ...any) error {
	return &ParamError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// invalidObject wraps an encoding failure, naming the parameter behind its JSON
// field by fields.
func invalidObject(err error, fields map[string]string) error {
	field := "parameters"
	var me *format.MalformedError
	if errors.As(err, &me) {
		if f, ok := fields[me.Field]; ok {
			field = f
		}
	}
	return invalid(field, err)
}
