package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/api/serviceerror"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
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

// usageIf is the usage error msg when bad holds, else nil.
func usageIf(bad bool, msg string) error {
	if !bad {
		return nil
	}
	return usageError{errors.New(msg)}
}

// unavailableError is a dependency graft could not reach: exit 9.
type unavailableError struct{ err error }

func unavailable(err error, format string, args ...any) error {
	return withNext(&unavailableError{err}, format, args...)
}

func (e *unavailableError) Error() string { return e.err.Error() }
func (e *unavailableError) Unwrap() error { return e.err }

// nextStepError attaches the next step an operator should take to err, in
// place of the default for its outcome; the outermost one wins. tables are a
// merge conflict's, for the JSON error object's "conflicts".
type nextStepError struct {
	next   string
	tables []workflows.MergeTable
	err    error
}

func (e *nextStepError) Error() string { return e.err.Error() }
func (e *nextStepError) Unwrap() error { return e.err }

// nextOn is withNext when err's outcome is o.
func nextOn(err error, o outcome.Outcome, format string, args ...any) error {
	if got, ok := outcome.Of(err); ok && got == o {
		return withNext(err, format, args...)
	}
	return err
}

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

func classify(err error) Report {
	r := Report{Message: err.Error(), Outcome: outcomeFailure, ExitCode: outcome.ExitFailure}
	unavailable := func(next string) { r.Outcome, r.ExitCode, r.Next = outcomeUnavailable, outcome.ExitUnavailable, next }
	var (
		ue    usageError
		oe    *outcome.Error
		unav  *unavailableError
		ua    *client.UnansweredError
		we    *client.WorkflowError
		nf    *serviceerror.NotFound
		sunav *serviceerror.Unavailable
	)
	switch {
	case errors.As(err, &ue):
		r.Outcome, r.ExitCode = string(outcome.Invalid), outcome.ExitInvalid
		r.Next = "fix the command line; see `graft <command> --help`"
	case errors.As(err, &oe):
		r.Outcome, r.ExitCode, r.OpID = string(oe.Outcome), oe.Outcome.ExitCode(), oe.OpID
		r.Message, r.Next = oe.Message, defaultNexts[oe.Outcome]
		if oe.Outcome == outcome.InDoubt {
			r.Next = fmt.Sprintf("operation %s is settling on its own; watch it with `graft op wait %s`", oe.OpID, oe.OpID)
		}
	case errors.As(err, &unav):
		unavailable("")
	case errors.As(err, &ua) && !errors.Is(err, context.Canceled):
		r.OpID = ua.OpID
		unavailable(unansweredNext(ua))
	case errors.As(err, &we):
		r.OpID, r.Message = we.OpID, we.Error()
		if we.Dependency != "" {
			r.Outcome, r.ExitCode = outcomeUnavailable, outcome.ExitUnavailable
			r.Message = fmt.Sprintf("the worker could not reach %s, so workflow %s %s: %s", we.Dependency, we.WorkflowID, we.Status, we.Cause)
		}
		r.Next = fmt.Sprintf("the workflow %s in the Web UI shows each step's failure", we.WorkflowID)
	case errors.Is(err, catalog.ErrUnavailable):
		unavailable("check that Postgres is running and that $DATABASE_URL points at it")
	case errors.Is(err, storage.ErrUnavailable):
		unavailable("check that the store is reachable (--store-dir, or --s3-endpoint and the AWS credentials)")
	case errors.As(err, &sunav):
		unavailable("check that Temporal is running and reachable at --temporal-address")
	case errors.Is(err, storage.ErrRefused):
		r.Outcome, r.ExitCode = string(outcome.Refused), outcome.ExitRefused
		r.Next = "the store refused the request: check the bucket's permissions and policy for these credentials"
	case errors.Is(err, catalog.ErrNotMigrated):
		r.Next = "apply the ledger's migrations: `graft-worker migrate` (a worker also applies them at start)"
	case errors.As(err, &nf):
		r.Outcome, r.ExitCode = string(outcome.NotFound), outcome.ExitNotFound
	case errors.Is(err, context.Canceled):
		r.Message, r.Next = "interrupted: "+r.Message, "nothing was started"
	}
	var ne *nextStepError
	if errors.As(err, &ne) {
		r.Next, r.Conflicts = ne.next, ne.tables
	}
	// A request that met another request's operation: whatever the command's next step
	// for a conflict, the key (or the name) is what stands in the way.
	var rc *client.RequestConflictError
	switch {
	case errors.As(err, &rc):
		r.Next = requestConflictNext(rc)
	case oe != nil && oe.Outcome == outcome.Conflict && strings.Contains(oe.Message, "was already used for a different request"):
		r.Next = keyUsedNext(oe.OpID)
	}
	return r
}

// defaultNexts are the next steps for outcomes when the command gave none;
// in_doubt's names the operation (classify).
var defaultNexts = map[outcome.Outcome]string{
	outcome.Unpublished: "nothing was published and nothing will be; run the command again to retry",
	outcome.Conflict:    "another writer's state stands in the way; look at it (`graft branch show`), then retry",
	outcome.NotFound:    "check the names; `graft branch list <graph>` shows a graph's branches",
	outcome.NotRetained: "cleanup reclaimed something this needs; start from a newer commit, a tag or a live branch",
	outcome.Invalid:     "fix the input; see `graft <command> --help`",
	outcome.Refused:     "the store refused the request: check the bucket's permissions and policy for the worker's credentials",
	outcome.Abandoned:   "the upload did not finish in time and nothing was published; write again (a later cleanup reclaims what was uploaded)",
	outcome.Rejected: "the merge wrote nothing: `graft op show OP` lists its reviews and says why; fix it on the source branch and merge again " +
		"(there is no override: `graft branch unprotect` removes the rule)",
}

// requestConflictNext is what to do after a request met an operation started for a
// different request: graft never attached it, and started nothing for it.
func requestConflictNext(rc *client.RequestConflictError) string {
	if rc.Key != "" && rc.Key == rc.OpID {
		return keyUsedNext(rc.OpID)
	}
	return fmt.Sprintf("operation %s runs a different request of the same name; wait for it with `graft op wait %s`, then run this one again", rc.OpID, rc.OpID)
}

func keyUsedNext(opID string) string {
	return fmt.Sprintf("the key names an earlier request, which `graft op show %s` shows; run this one with a fresh --idempotency-key (or none)", opID)
}

// unansweredNext is what to do after Temporal left a request unanswered: the
// operation may have started, so only a repeat that attaches to it is safe.
func unansweredNext(ua *client.UnansweredError) string {
	const reach = "check that Temporal is running and reachable at --temporal-address"
	if ua.OpID == "" {
		return reach + ", then run the command again"
	}
	repeat := fmt.Sprintf("the same command with --idempotency-key %s attaches to it if it started and starts it if not", ua.OpID)
	if strings.HasPrefix(ua.WorkflowID, client.CleanupWorkflowID("")) {
		repeat = "the same command again attaches to the graph's cleanup if it runs"
	}
	return fmt.Sprintf("%s; operation %s may have started: `graft op show %s` says whether it recorded anything, and %s",
		reach, ua.OpID, ua.OpID, repeat)
}

// refineNext fits the next step of a failed or interrupted command to what
// the ledger holds: an operation is pointed at only when its row exists.
func (a *app) refineNext(ctx context.Context, r *Report, err error) {
	var we *client.WorkflowError
	interrupted := errors.Is(err, context.Canceled) && !errors.As(err, &we)
	if !errors.As(err, &we) && !interrupted {
		return
	}
	opID := cmp.Or(r.OpID, a.startedOp)
	if ua := (*client.UnansweredError)(nil); opID == "" && errors.As(err, &ua) {
		opID = ua.OpID // interrupted inside the start: it may have started
	}
	if opID == "" {
		return
	}
	r.OpID = opID
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	recorded, known := a.ledgerHas(lctx, opID)
	switch {
	case !known:
		r.Next = fmt.Sprintf("`graft op show %s` says whether it recorded anything, once the ledger answers", opID)
	case recorded && interrupted:
		r.Next = fmt.Sprintf("operation %s keeps running in Temporal; follow it with `graft op wait %s`", opID, opID)
	case recorded:
		r.Next = fmt.Sprintf("`graft op show %s` says what the operation did and what it waits for; `graft op wait %s` follows it to its end",
			opID, opID)
	case interrupted:
		r.Next = fmt.Sprintf("operation %s has recorded nothing yet; if it starts, `graft op wait %s` follows it", opID, opID)
	default:
		again := "run the command again"
		if we != nil && we.Dependency != "" {
			again += " once " + we.Dependency + " answers the worker"
		}
		r.Next = "nothing was recorded: the operation stopped before its first step wrote anything; " + again
	}
}

// ledgerHas reports whether the ledger has a row for opID; known is false
// when the ledger could not be asked.
func (a *app) ledgerHas(ctx context.Context, opID string) (recorded, known bool) {
	ops, err := a.ops(ctx, false)
	if err != nil {
		return false, false
	}
	_, err = ops.Show(ctx, opID)
	if o, ok := outcome.Of(err); ok && o == outcome.NotFound {
		return false, true
	}
	return err == nil, err == nil
}

func ifGiven(value string, check func(string) error) error {
	if value == "" {
		return nil
	}
	return check(value)
}

func checkFlag(flag, value string, validate func(string) error) error {
	return ifGiven(value, func(v string) error { return invalidAs(flag, validate(v)) })
}

// invalidAs is err as the outcome invalid, naming what was invalid.
func invalidAs(what string, err error) error {
	if err == nil {
		return nil
	}
	return outcome.Errorf(outcome.Invalid, "", "%s: %s", what, format.Describe(err))
}

func validCommit(s string) error {
	_, err := format.ParseCommitID(s)
	return err
}

func checkCommitText(author, message string) error {
	return cmp.Or(checkFlag("--author", author, format.ValidateAuthor), checkFlag("--message", message, format.ValidateMessage))
}

func checkOpKey(key string) error { return checkFlag("--idempotency-key", key, format.ValidateOp) }

func checkOpID(id string) error { return invalidAs("operation id", format.ValidateOp(id)) }
