package cli

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/api/serviceerror"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/workflows"
)

// Outcome names the CLI reports for failures outside the operation
// vocabulary: a dependency could not be reached, or something else failed.
const (
	outcomeUnavailable = "unavailable"
	outcomeFailure     = "failure"
)

// usageError is a bad command line or configuration: exit 2, outcome invalid.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// unavailableError is a dependency graft could not reach: exit 9.
type unavailableError struct {
	what string // "Temporal", "Postgres", "the store"
	next string
	err  error
}

func (e *unavailableError) Error() string { return e.err.Error() }
func (e *unavailableError) Unwrap() error { return e.err }

// nextStepError attaches the next step an operator should take to err; the
// innermost one wins, so a command can be more specific than the default.
type nextStepError struct {
	next string
	err  error
}

func (e *nextStepError) Error() string { return e.err.Error() }
func (e *nextStepError) Unwrap() error { return e.err }

// withNext returns err carrying next, or nil when err is nil.
func withNext(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	return &nextStepError{next: fmt.Sprintf(format, args...), err: err}
}

// Report is how a failed command is shown: on stderr as text, or as this
// JSON object in json mode.
type Report struct {
	Outcome  string `json:"outcome"`
	ExitCode int    `json:"exit_code"`
	OpID     string `json:"op_id"`
	Message  string `json:"message"`
	Next     string `json:"next,omitempty"`
	// Conflicts lists the tables a merge found changed on both sides
	// (graft merge's conflict, preview or not); absent otherwise.
	Conflicts []workflows.MergeTable `json:"conflicts,omitempty"`
}

// classify turns a command's error into its report and exit code.
func classify(err error) Report {
	r := Report{Message: err.Error()}
	var (
		ue    usageError
		oe    *outcome.Error
		unav  *unavailableError
		nf    *serviceerror.NotFound
		sunav *serviceerror.Unavailable
	)
	switch {
	case errors.As(err, &ue):
		r.Outcome, r.ExitCode = string(outcome.Invalid), outcome.ExitInvalid
		r.Next = "fix the command line; see `graft <command> --help`"
	case errors.As(err, &oe):
		r.Outcome, r.ExitCode, r.OpID = string(oe.Outcome), oe.Outcome.ExitCode(), oe.OpID
		r.Message = oe.Message
		r.Next = defaultNext(oe)
	case errors.As(err, &unav):
		r.Outcome, r.ExitCode, r.Next = outcomeUnavailable, outcome.ExitUnavailable, unav.next
	case errors.Is(err, catalog.ErrUnavailable):
		r.Outcome, r.ExitCode = outcomeUnavailable, outcome.ExitUnavailable
		r.Next = "check that Postgres is running and that $DATABASE_URL points at it"
	case errors.Is(err, storage.ErrUnavailable):
		r.Outcome, r.ExitCode = outcomeUnavailable, outcome.ExitUnavailable
		r.Next = "check that the store is reachable (--store-dir, or --s3-endpoint and the AWS credentials)"
	case errors.As(err, &sunav):
		r.Outcome, r.ExitCode = outcomeUnavailable, outcome.ExitUnavailable
		r.Next = "check that Temporal is running and reachable at --temporal-address"
	case errors.Is(err, storage.ErrRefused):
		r.Outcome, r.ExitCode = string(outcome.Refused), outcome.ExitRefused
		r.Next = "the store refused the request: check the bucket's permissions and policy for these credentials"
	case errors.Is(err, catalog.ErrNotMigrated):
		r.Outcome, r.ExitCode = outcomeFailure, outcome.ExitFailure
		r.Next = "apply the ledger's migrations: `graft-worker migrate` (a worker also applies them at start)"
	case errors.As(err, &nf):
		r.Outcome, r.ExitCode = string(outcome.NotFound), outcome.ExitNotFound
	case errors.Is(err, context.Canceled):
		r.Outcome, r.ExitCode = outcomeFailure, outcome.ExitFailure
		r.Message = "interrupted: " + r.Message
		r.Next = "an operation already started keeps running in Temporal; find it with `graft op list`"
	default:
		r.Outcome, r.ExitCode = outcomeFailure, outcome.ExitFailure
	}
	var ne *nextStepError
	if errors.As(err, &ne) {
		r.Next = ne.next
	}
	var ct *conflictTablesError
	if errors.As(err, &ct) {
		r.Conflicts = ct.tables
	}
	return r
}

// defaultNext is the next step for an outcome when the command gave none.
func defaultNext(e *outcome.Error) string {
	switch e.Outcome {
	case outcome.InDoubt:
		return fmt.Sprintf("operation %s is settling on its own; watch it with `graft op wait %s`", e.OpID, e.OpID)
	case outcome.Unpublished:
		return "nothing was published and nothing will be; run the command again to retry"
	case outcome.Conflict:
		return "another writer's state stands in the way; look at it (`graft branch show`), then retry"
	case outcome.NotFound:
		return "check the names; `graft branch list <graph>` shows a graph's branches"
	case outcome.NotRetained:
		return "cleanup reclaimed something this needs; start from a newer commit, a tag or a live branch"
	case outcome.Invalid:
		return "fix the input; see `graft <command> --help`"
	case outcome.Refused:
		return "the store refused the request: check the bucket's permissions and policy for the worker's credentials"
	}
	return ""
}
