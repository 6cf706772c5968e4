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

// The catalog's sentinels. Where a typed error carries one, its Is method matches it.
var (
	// ErrNotFound: the row asked for, or a row it refers to, does not exist.
	ErrNotFound = errors.New("catalog: not found")
	// ErrDuplicate: a row with the same identity but different content exists.
	ErrDuplicate = errors.New("catalog: duplicate")
	// ErrIncarnationExists (*IncarnationExistsError, also ErrDuplicate): the logical
	// branch already has an unsettled or live incarnation.
	ErrIncarnationExists = errors.New("catalog: incarnation exists")
	// ErrStateConflict (*StateConflictError): the row is not in the state expected.
	ErrStateConflict = errors.New("catalog: state conflict")
	// ErrCondemned (*CondemnedError): a pin names a key an active cleanup run
	// condemned; the operation's outcome is not_retained.
	ErrCondemned = errors.New("catalog: condemned")
	// ErrInvalid: the arguments break a rule of the ledger.
	ErrInvalid = errors.New("catalog: invalid argument")
	// ErrUnavailable: Postgres could not be reached or dropped the connection; a write
	// may or may not have committed, and every write is safe to retry.
	ErrUnavailable = errors.New("catalog: postgres unavailable")
	// ErrNotMigrated: the schema has no ledger tables; apply package migrations first.
	ErrNotMigrated = errors.New("catalog: schema not migrated")
	// ErrNotOwner (*NotOwnerError): the operation row is not (or no longer) the
	// caller's; nothing was changed.
	ErrNotOwner = errors.New("catalog: not the operation's owner")
	// ErrOwned (*OwnedError): a row with the same request is held by another
	// workflow's run; nothing was changed.
	ErrOwned = errors.New("catalog: operation owned by another workflow")
)

// IncarnationExistsError reports the incarnation that blocks a new one for the same
// logical branch.
type IncarnationExistsError struct {
	Graph   string
	Logical string
	// Existing is the blocking incarnation; Native "" if it settled before it was read.
	Existing Incarnation
}

func (e *IncarnationExistsError) Error() string {
	if e.Existing.Native == "" {
		return fmt.Sprintf("catalog: branch %q in graph %q already has an unsettled or live incarnation", e.Logical, e.Graph)
	}
	return fmt.Sprintf("catalog: branch %q in graph %q already has incarnation %s (%s, operation %s)",
		e.Logical, e.Graph, e.Existing.Native, e.Existing.State, e.Existing.OpID)
}

func (e *IncarnationExistsError) Is(target error) bool {
	return target == ErrIncarnationExists || target == ErrDuplicate
}

// NotOwnerError reports a guarded write by Caller of a row run Owner owns.
type NotOwnerError struct {
	ID            string
	Owner, Caller string
}

func (e *NotOwnerError) Error() string {
	return fmt.Sprintf("catalog: operation %s is owned by run %q, not %q", e.ID, e.Owner, e.Caller)
}

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

func (e *OwnedError) Is(target error) bool { return target == ErrOwned || target == ErrDuplicate }

// OperationReusedError (ErrDuplicate) reports an operation id recorded already for
// another request, of Kind on Graph.
type OperationReusedError struct {
	ID    string
	Kind  OperationKind
	Graph string
	// Differences names each, for people: `branch is "b2", the first request's "b1"`.
	Differences []string
}

func (e *OperationReusedError) Error() string {
	return fmt.Sprintf("%v: operation %s exists as %s on graph %q with other inputs (%s)",
		ErrDuplicate, e.ID, e.Kind, e.Graph, strings.Join(e.Differences, "; "))
}

func (e *OperationReusedError) Is(target error) bool { return target == ErrDuplicate }

// StateConflictError reports a row found in state Current, not Expected.
type StateConflictError struct {
	Entity            string // "incarnation", "operation" or "cleanup run"
	ID                string // native name, operation id or run id
	Expected, Current string
}

func (e *StateConflictError) Error() string {
	return fmt.Sprintf("catalog: %s %s is %s, not %s", e.Entity, e.ID, e.Current, e.Expected)
}

func (e *StateConflictError) Is(target error) bool { return target == ErrStateConflict }

// CondemnedError lists, in the order given, the pins refused because an active
// cleanup run condemned them.
type CondemnedError struct {
	Graph string
	Keys  []string
}

func (e *CondemnedError) Error() string {
	return fmt.Sprintf("catalog: %d key(s) in graph %q condemned by an active cleanup run: %s",
		len(e.Keys), e.Graph, strings.Join(e.Keys, ", "))
}

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

// translate maps a pgx error to a sentinel wrapped with the server's message, a context
// error as is, or a plain error carrying only the text.
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
	// A connect timeout is a context deadline inside pgconn: still unavailable.
	ctxErr := contextCause(err)
	if ctxErr != nil && !errors.As(err, new(*pgconn.ConnectError)) {
		return ctxErr
	}
	if Unreachable(err) {
		return &unavailableError{msg: fmt.Sprintf("%s: %s: %s", ErrUnavailable, where, err.Error()), cause: ctxErr}
	}
	return errors.New(err.Error())
}

// unreachableCode reports a SQLSTATE of a lost or refused connection.
func unreachableCode(code string) bool {
	return strings.HasPrefix(code, "08") || code == "57P01" || code == "57P02" || code == "57P03" || code == "53300"
}

// Unreachable reports whether err says Postgres could not be reached or dropped the
// connection (ErrUnavailable).
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

// unavailableError matches ErrUnavailable and the context error that ended the attempt,
// carrying no pgx type.
type unavailableError struct {
	msg   string
	cause error
}

func (e *unavailableError) Error() string        { return e.msg }
func (e *unavailableError) Is(target error) bool { return target == ErrUnavailable }
func (e *unavailableError) Unwrap() error        { return e.cause }
