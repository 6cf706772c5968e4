package client

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/api/serviceerror"
)

// UnansweredError is a request to Temporal — a start, the look-up before a write, a
// signal — whose answer never came: Temporal could not be reached, or a deadline (the
// caller's or the SDK's per-request one) passed first. The request may still have been
// applied, so the operation may be running.
//
// Repeating the request with IdempotencyKey set to OpID is safe either way: it attaches
// if the operation started and starts it if not; a fresh key could run it twice.
// Ops.Show(OpID) says whether it recorded anything yet.
//
// errors.Is(err, context.DeadlineExceeded) (or context.Canceled) holds when the caller's
// context ended, whatever form the SDK gave the error.
type UnansweredError struct {
	// Request says what was asked, for a person ("start create branch a in g").
	Request    string
	WorkflowID string
	// OpID is the idempotency key to repeat the request with (a cleanup's run id), or "".
	OpID string
	Err  error // the SDK's

	ctxErr error
}

func (e *UnansweredError) Error() string {
	return fmt.Sprintf("%s: Temporal did not answer, so it may still apply the request: %v", e.Request, e.Err)
}

// Unwrap returns the SDK's error and, when the caller's context ended, its.
func (e *UnansweredError) Unwrap() []error {
	if e.ctxErr != nil {
		return []error{e.Err, e.ctxErr}
	}
	return []error{e.Err}
}

// unanswered wraps err as an *UnansweredError when it says the request got no answer
// (Temporal unreachable, a deadline or cancellation first), and with the request's words
// otherwise: a definitive refusal stays what it is.
func unanswered(ctx context.Context, request, workflowID, opID string, err error) error {
	var (
		unavailable *serviceerror.Unavailable
		deadline    *serviceerror.DeadlineExceeded
		canceled    *serviceerror.Canceled
	)
	switch {
	case errors.As(err, &unavailable), errors.As(err, &deadline), errors.As(err, &canceled),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled), ctx.Err() != nil:
		return &UnansweredError{Request: request, WorkflowID: workflowID, OpID: opID, Err: err, ctxErr: ctx.Err()}
	}
	return fmt.Errorf("%s: %w", request, err)
}
