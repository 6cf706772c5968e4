package s3

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/aws/smithy-go"

	"github.com/graftworks/graft/storage"
)

// S3 error codes of a missing key. A HeadObject 404 has no body: the SDK reports "NotFound".
const (
	codeNoSuchKey = "NoSuchKey"
	codeNotFound  = "NotFound"
)

// opKind says whether a failed request could have changed the store.
type opKind int

const (
	read opKind = iota
	write
	// writeIfMatch is a put guarded by If-Match, which S3 answers on a
	// missing key with 404 NoSuchKey: a failed condition all the same.
	writeIfMatch
)

// classify maps an SDK error to a storage code and the HTTP status it carried
// (0 without a response). For a write only answers proving it was not
// applied are definitive; anything else is Ambiguous, since a wrong "not
// applied" lets a late write resurrect a deleted object. A read's failure
// other than a missing key is Unavailable.
func classify(err error, kind opKind) (storage.Code, int) {
	status := 0
	var resp interface{ HTTPStatusCode() int } // an error that came with an HTTP response
	if errors.As(err, &resp) {
		status = resp.HTTPStatusCode()
	}
	code := apiCode(err)
	if kind == read {
		return classifyRead(status, code), status
	}
	if kind == writeIfMatch && (code == codeNoSuchKey || (status == http.StatusNotFound && (code == "" || code == codeNotFound))) {
		return storage.CodePreconditionFailed, status
	}
	return classifyWrite(status, code), status
}

func apiCode(err error) string {
	if apiErr, ok := errors.AsType[smithy.APIError](err); ok {
		return apiErr.ErrorCode()
	}
	return ""
}

func classifyRead(status int, code string) storage.Code {
	switch code {
	case codeNoSuchKey, codeNotFound:
		return storage.CodeNotFound
	case "NoSuchBucket":
		// A misconfiguration: NotFound would say the object is absent.
		return storage.CodeUnavailable
	}
	if status == http.StatusNotFound && code == "" {
		return storage.CodeNotFound
	}
	return storage.CodeUnavailable
}

func classifyWrite(status int, code string) storage.Code {
	switch code {
	case "PreconditionFailed":
		return storage.CodePreconditionFailed
	case "ConditionalRequestConflict":
		// 409: a conflicting conditional write raced this one.
		return storage.CodeAmbiguous
	case "ObjectParentIsFile", "ExistingObjectIsDirectory":
		// versitygw's posix backend refuses "a" beside "a/b" before acting.
		return storage.CodeRefused
	}
	return storage.WriteStatusCode(status)
}

// classifyBatchEntry maps a DeleteObjects per-key error code; ok: the key is gone.
func classifyBatchEntry(code string) (c storage.Code, ok bool) {
	switch code {
	case codeNoSuchKey, codeNotFound:
		return 0, true
	case "AccessDenied", "InvalidArgument", "InvalidRequest", "KeyTooLongError",
		"MethodNotAllowed", "InvalidObjectState":
		return storage.CodeRefused, false
	}
	return storage.CodeAmbiguous, false
}

// newError builds the storage.Error of a failed request; an indefinite one
// whose context is done keeps the context's error in its chain.
func newError(ctx context.Context, op, key string, kind opKind, err error) error {
	code, status := classify(err, kind)
	if ctxErr := ctx.Err(); ctxErr != nil &&
		(code == storage.CodeAmbiguous || code == storage.CodeUnavailable) &&
		!errors.Is(err, ctxErr) {
		err = fmt.Errorf("%w: %w", ctxErr, err)
	}
	return &storage.Error{Op: op, Key: key, Code: code, Status: status, Err: err}
}
