package catalog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

var (
	// ErrNotFound: the row asked for does not exist (or a row it refers to does not).
	ErrNotFound = errors.New("catalog: not found")
	// ErrDuplicate: a row with the same identity but different content already exists.
	ErrDuplicate = errors.New("catalog: duplicate")
	// ErrIncarnationExists: the logical branch already has an unsettled or live
	// incarnation. Errors carrying it are *IncarnationExistsError and also match ErrDuplicate.
	ErrIncarnationExists = errors.New("catalog: incarnation exists")
	// ErrStateConflict: the row is not in the state the caller expected. Errors carrying it
	// are *StateConflictError.
	ErrStateConflict = errors.New("catalog: state conflict")
	// ErrCondemned: a pin names a key an active cleanup run has condemned. Errors carrying
	// it are *CondemnedError. The operation's outcome is not_retained.
	ErrCondemned = errors.New("catalog: condemned")
	// ErrInvalid: the arguments break a rule of the ledger (empty id, unknown kind,
	// illegal state transition, bad configuration).
	ErrInvalid = errors.New("catalog: invalid argument")
	// ErrUnavailable: Postgres could not be reached or dropped the connection. A write
	// that fails this way may or may not have committed; every write is safe to retry.
	ErrUnavailable = errors.New("catalog: postgres unavailable")
	// ErrNotMigrated: the schema has no ledger tables; apply package migrations first.
	ErrNotMigrated = errors.New("catalog: schema not migrated")
	// ErrNotOwner: the write was refused because the operation row is not (or no longer) the
	// caller's: another run claimed it, or it was recorded by another request. Errors carrying
	// it are *NotOwnerError; nothing was changed.
	ErrNotOwner = errors.New("catalog: not the operation's owner")
	// ErrOwned: an operation row with the same request is held by another workflow's run.
	// Errors carrying it are *OwnedError; nothing was changed.
	ErrOwned = errors.New("catalog: operation owned by another workflow")
)

// IncarnationExistsError reports the incarnation that blocks a new one for the same
// logical branch.
type IncarnationExistsError struct {
	Graph   string
	Logical string
	// Existing is the blocking incarnation; its Native is empty if it could not be read
	// (it settled between the failed insert and the read).
	Existing Incarnation
}

func (e *IncarnationExistsError) Error() string {
	if e.Existing.Native == "" {
		return fmt.Sprintf("catalog: branch %q in graph %q already has an unsettled or live incarnation", e.Logical, e.Graph)
	}
	return fmt.Sprintf("catalog: branch %q in graph %q already has incarnation %s (%s, operation %s)",
		e.Logical, e.Graph, e.Existing.Native, e.Existing.State, e.Existing.OpID)
}

// Is makes the error match ErrIncarnationExists and ErrDuplicate.
func (e *IncarnationExistsError) Is(target error) bool {
	return target == ErrIncarnationExists || target == ErrDuplicate
}

// NotOwnerError reports a guarded write of a row another run owns.
type NotOwnerError struct {
	ID string
	// Owner is the run that owns the row; Caller the run that tried to write it.
	Owner, Caller string
}

func (e *NotOwnerError) Error() string {
	return fmt.Sprintf("catalog: operation %s is owned by run %q, not %q", e.ID, e.Owner, e.Caller)
}

// Is makes the error match ErrNotOwner.
func (e *NotOwnerError) Is(target error) bool { return target == ErrNotOwner }

// OwnedError reports a claim of a row that another workflow is running.
type OwnedError struct {
	ID         string
	WorkflowID string
	Owner      string
}

func (e *OwnedError) Error() string {
	return fmt.Sprintf("catalog: operation %s is being run by workflow %s (run %s)", e.ID, e.WorkflowID, e.Owner)
}

// Is makes the error match ErrOwned and ErrDuplicate.
func (e *OwnedError) Is(target error) bool { return target == ErrOwned || target == ErrDuplicate }

// OperationReusedError reports an operation id recorded already for another request:
// another kind, another graph or other inputs. It matches ErrDuplicate.
type OperationReusedError struct {
	ID string
	// Kind and Graph are the recorded operation's.
	Kind  OperationKind
	Graph string
	// Differences names each difference from the recorded request, for people:
	// `branch is "b2", the first request's "b1"`.
	Differences []string
}

func (e *OperationReusedError) Error() string {
	return fmt.Sprintf("%v: operation %s exists as %s on graph %q with other inputs (%s)",
		ErrDuplicate, e.ID, e.Kind, e.Graph, strings.Join(e.Differences, "; "))
}

// Is makes the error match ErrDuplicate.
func (e *OperationReusedError) Is(target error) bool { return target == ErrDuplicate }

// StateConflictError reports a row found in a state other than the expected one.
type StateConflictError struct {
	// Entity is "incarnation", "operation" or "cleanup run".
	Entity string
	// ID identifies the row (native name, operation id, run id).
	ID string
	// Expected is the state the caller required; Current the state found.
	Expected, Current string
}

func (e *StateConflictError) Error() string {
	return fmt.Sprintf("catalog: %s %s is %s, not %s", e.Entity, e.ID, e.Current, e.Expected)
}

// Is makes the error match ErrStateConflict.
func (e *StateConflictError) Is(target error) bool { return target == ErrStateConflict }

// CondemnedError lists the pins refused because an active cleanup run condemned them.
type CondemnedError struct {
	Graph string
	// Keys are the refused pins' keys, in the order given.
	Keys []string
}

func (e *CondemnedError) Error() string {
	return fmt.Sprintf("catalog: %d key(s) in graph %q condemned by an active cleanup run: %s",
		len(e.Keys), e.Graph, strings.Join(e.Keys, ", "))
}

// Is makes the error match ErrCondemned.
func (e *CondemnedError) Is(target error) bool { return target == ErrCondemned }

// Postgres error codes the catalog interprets.
const (
	codeUniqueViolation     = "23505"
	codeForeignKeyViolation = "23503"
)

// constraintOf returns the constraint a unique or foreign-key violation names, or "".
func constraintOf(err error, code string) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == code {
		return pgErr.ConstraintName
	}
	return ""
}

// translate maps a pgx error to the catalog's vocabulary: a sentinel wrapped with the
// server's message, a context error as is, or a plain error carrying only the text.
func (c *Catalog) translate(err error) error {
	return translateError(err, c.where)
}

func translateError(err error, where string) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		detail := pgErr.Message
		if pgErr.Detail != "" {
			detail += ": " + pgErr.Detail
		}
		switch code := pgErr.Code; {
		case code == codeUniqueViolation:
			return fmt.Errorf("%w: %s", ErrDuplicate, detail)
		case code == codeForeignKeyViolation:
			return fmt.Errorf("%w: %s", ErrNotFound, detail)
		case strings.HasPrefix(code, "22"), code == "23502", code == "23514":
			// data exceptions, not-null and check violations: the input broke a rule
			return fmt.Errorf("%w: %s", ErrInvalid, detail)
		case unreachableCode(code):
			return &unavailableError{msg: fmt.Sprintf("%s: %s: %s", ErrUnavailable, where, detail)}
		}
		return fmt.Errorf("postgres: %s (SQLSTATE %s)", detail, pgErr.Code)
	}
	ctxErr := contextCause(err)
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		// A connect timeout is a context deadline inside pgconn: still unavailable.
		return &unavailableError{msg: fmt.Sprintf("%s: %s: %s", ErrUnavailable, where, err.Error()), cause: ctxErr}
	}
	if ctxErr != nil {
		return ctxErr
	}
	if Unreachable(err) {
		return &unavailableError{msg: fmt.Sprintf("%s: %s: %s", ErrUnavailable, where, err.Error())}
	}
	return errors.New(err.Error())
}

// unreachableCode reports a SQLSTATE of a lost or refused connection.
func unreachableCode(code string) bool {
	return strings.HasPrefix(code, "08") || code == "57P01" || code == "57P02" || code == "57P03" || code == "53300"
}

// Unreachable reports whether err says Postgres could not be reached or dropped the
// connection: what the catalog (and the migrations) report as ErrUnavailable.
func Unreachable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return unreachableCode(pgErr.Code)
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connectErr) || errors.As(err, &netErr) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) || pgconn.SafeToRetry(err)
}

// contextCause returns context.Canceled or context.DeadlineExceeded if err wraps one.
func contextCause(err error) error {
	for _, ctxErr := range []error{context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, ctxErr) {
			return ctxErr
		}
	}
	return nil
}

// unavailableError matches ErrUnavailable and, when a context ended the attempt, that
// context's error, without carrying any pgx type.
type unavailableError struct {
	msg   string
	cause error
}

func (e *unavailableError) Error() string        { return e.msg }
func (e *unavailableError) Is(target error) bool { return target == ErrUnavailable }
func (e *unavailableError) Unwrap() error        { return e.cause }
