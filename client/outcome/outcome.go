// Package outcome is graft's one vocabulary for how an operation ended, shared
// by workflows, the ledger, the Go client and the CLI. Each outcome
// has a stable string (stored in the ledger, set as the GraftOutcome search
// attribute, printed by the CLI) and a documented process exit code
// (docs/outcomes.md).
package outcome

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Outcome names how an operation ended, or that it has not ended yet.
type Outcome string

const (
	Created     Outcome = "created"      // the branch (or object) exists and is live
	Unpublished Outcome = "unpublished"  // definitively not published; a fence guarantees it never will be
	InDoubt     Outcome = "in_doubt"     // a write may still land; the operation keeps settling it
	Conflict    Outcome = "conflict"     // another writer's state stands in the way; nothing was changed
	NotFound    Outcome = "not_found"    // a named graph, branch, commit or tag does not exist
	NotRetained Outcome = "not_retained" // something the operation needs was reclaimed by cleanup
	Invalid     Outcome = "invalid"      // bad input; nothing was sent to storage
	Refused     Outcome = "refused"      // storage definitely said no (permissions, policy)
	Done        Outcome = "done"         // an operation without a richer outcome finished (init, write, cleanup)

	Merged          Outcome = "merged"             // a merge commit joined the source into the target
	Adopted         Outcome = "adopted"            // the target was behind the source; it now has the source's tables
	AlreadyUpToDate Outcome = "already_up_to_date" // the merge would change nothing; nothing was written
	Deleted         Outcome = "deleted"            // a branch or tag was retired; its ref stays as a fence

	Abandoned Outcome = "abandoned" // a write's upload never finished: nothing was published, its pins are released
	Rejected  Outcome = "rejected"  // a merge's check failed, a reviewer rejected it or its wait deadline passed: nothing was written
)

// All lists every outcome, in documentation order.
var All = []Outcome{Created, Unpublished, InDoubt, Conflict, NotFound, NotRetained, Invalid, Refused, Done,
	Merged, Adopted, AlreadyUpToDate, Deleted, Abandoned, Rejected}

// Exit codes of the graft CLI. 1 is any failure that is not an outcome (unreachable
// Temporal, Postgres or storage; a bug).
const (
	ExitOK          = 0
	ExitFailure     = 1
	ExitInvalid     = 2
	ExitUnpublished = 3
	ExitInDoubt     = 4
	ExitConflict    = 5
	ExitNotFound    = 6
	ExitNotRetained = 7
	ExitRefused     = 8
	ExitUnavailable = 9
	ExitAbandoned   = 10
	ExitRejected    = 11
)

// ExitCode returns the CLI exit code for o.
func (o Outcome) ExitCode() int {
	if f, ok := failures[o]; ok {
		return f.code
	}
	if o.Valid() {
		return ExitOK
	}
	return ExitFailure
}

// Valid reports whether o is one of the vocabulary's outcomes.
func (o Outcome) Valid() bool { return slices.Contains(All, o) }

// Success reports whether o means the operation did what was asked.
func (o Outcome) Success() bool { return o.ExitCode() == ExitOK }

// Sentinels, one per outcome that is not a success; match with errors.Is.
var (
	ErrUnpublished = errors.New("unpublished")
	ErrInDoubt     = errors.New("in doubt")
	ErrConflict    = errors.New("conflict")
	ErrNotFound    = errors.New("not found")
	ErrNotRetained = errors.New("not retained")
	ErrInvalid     = errors.New("invalid")
	ErrRefused     = errors.New("refused")
	ErrAbandoned   = errors.New("abandoned")
	ErrRejected    = errors.New("rejected")
)

// failures are the outcomes that are not a success, with their exit code and sentinel.
var failures = map[Outcome]struct {
	code int
	err  error
}{
	Unpublished: {ExitUnpublished, ErrUnpublished}, InDoubt: {ExitInDoubt, ErrInDoubt}, Conflict: {ExitConflict, ErrConflict},
	NotFound: {ExitNotFound, ErrNotFound}, NotRetained: {ExitNotRetained, ErrNotRetained}, Invalid: {ExitInvalid, ErrInvalid},
	Refused: {ExitRefused, ErrRefused}, Abandoned: {ExitAbandoned, ErrAbandoned},
	Rejected: {ExitRejected, ErrRejected},
}

// Error is an operation that ended (or paused, for InDoubt) without success. OpID
// identifies the operation (with InDoubt, what an operator watches or abandons);
// Message says what happened, for a person.
type Error struct {
	Outcome       Outcome
	OpID, Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s: %s%s", e.Outcome, e.Message, OpSuffix(e.Message, e.OpID))
}

// OpSuffix is how a message names the operation it is about: " (operation ID)", or — when
// the message already names another operation, as a conflict with another request does —
// "; this request is operation ID". It is "" without an id.
func OpSuffix(message, opID string) string {
	switch {
	case opID == "":
		return ""
	case strings.Contains(message, "(operation "):
		return "; this request is operation " + opID
	}
	return " (operation " + opID + ")"
}

// Is matches the sentinel of e's outcome.
func (e *Error) Is(target error) bool { return failures[e.Outcome].err == target }

// Errorf builds an *Error for o.
func Errorf(o Outcome, opID, format string, args ...any) *Error {
	return &Error{Outcome: o, OpID: opID, Message: fmt.Sprintf(format, args...)}
}

// Of returns the outcome an error carries, and false when it carries none.
func Of(err error) (Outcome, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e.Outcome, true
	}
	return "", false
}
