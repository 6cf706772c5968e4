package s3

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/aws/smithy-go"

	"github.com/graftworks/graft/storage"
)

// S3 error codes this package tells apart. Servers send them in the XML body
// of an error response; HeadObject has no body, so its 404 arrives as the
// bare status (the SDK reports code "NotFound").
const (
	codeNoSuchKey                  = "NoSuchKey"
	codeNotFound                   = "NotFound"
	codeNoSuchBucket               = "NoSuchBucket"
	codePreconditionFailed         = "PreconditionFailed"
	codeConditionalRequestConflict = "ConditionalRequestConflict"
	codeObjectParentIsFile         = "ObjectParentIsFile"
	codeExistingObjectIsDirectory  = "ExistingObjectIsDirectory"
)

// httpStatusError is an error that arrived with an HTTP response.
type httpStatusError interface {
	error
	HTTPStatusCode() int
}

// opKind says whether a failed request could have changed the store. The
// same transport error means "nothing changed, try later" on a read and
// "may have been applied" on a write.
type opKind int

const (
	read opKind = iota
	write
	// writeIfMatch is a put guarded by If-Match. S3 (and versitygw) answer
	// such a put on a missing key with 404 NoSuchKey rather than 412; for
	// the caller that is the same failed condition.
	writeIfMatch
)

// classify maps an error returned by the SDK to a portable storage code and
// the HTTP status it carried (0 when no response arrived). It is a pure
// function of the error value so it can be tested with synthetic errors.
//
// The rule for writes is that only answers which prove the write was not
// applied are definitive (PreconditionFailed, Refused); everything else —
// no response, a 5xx, a 409 ConditionalRequestConflict, a 2xx whose body
// could not be decoded, a status we do not know — is Ambiguous, because
// claiming "not applied" wrongly is what lets a late write resurrect a
// deleted object. Reads change nothing, so every failure that is not a
// missing key is Unavailable.
func classify(err error, kind opKind) (storage.Code, int) {
	status := 0
	// *awshttp.ResponseError (what the S3 client returns) and
	// *smithyhttp.ResponseError both carry the status this way.
	if respErr, ok := errors.AsType[httpStatusError](err); ok {
		status = respErr.HTTPStatusCode()
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
	case codeNoSuchBucket:
		// A missing bucket is a misconfiguration, not a missing key: reporting
		// NotFound would let a caller conclude that an object is absent.
		return storage.CodeUnavailable
	}
	if status == http.StatusNotFound && code == "" {
		return storage.CodeNotFound
	}
	return storage.CodeUnavailable
}

func classifyWrite(status int, code string) storage.Code {
	switch code {
	case codePreconditionFailed:
		return storage.CodePreconditionFailed
	case codeConditionalRequestConflict:
		// S3 answers 409 when a conflicting conditional write raced this one;
		// whether ours landed is unknown until the key is read again.
		return storage.CodeAmbiguous
	case codeObjectParentIsFile, codeExistingObjectIsDirectory:
		// versitygw's posix backend cannot hold both "a" and "a/b"; it
		// answers 409 before touching the file system.
		return storage.CodeRefused
	}
	// A status that rejects the request before acting on it (bad
	// credentials, malformed request, missing bucket, body too large) is a
	// refusal; anything unrecognised may have been applied.
	return storage.WriteStatusCode(status)
}

// classifyBatchEntry maps the per-key error code of a DeleteObjects answer.
// ok reports that the entry means the key is gone (a missing key is not an
// error for a delete).
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

// newError builds the storage.Error returned for a failed request. When the
// caller's context is done and the outcome is not definitive, the context's
// error is kept in the chain so errors.Is(err, context.Canceled) holds even
// if the SDK reported the failure some other way.
func newError(ctx context.Context, op, key string, kind opKind, err error) error {
	code, status := classify(err, kind)
	if ctxErr := ctx.Err(); ctxErr != nil &&
		(code == storage.CodeAmbiguous || code == storage.CodeUnavailable) &&
		!errors.Is(err, ctxErr) {
		err = fmt.Errorf("%w: %w", ctxErr, err)
	}
	return &storage.Error{Op: op, Key: key, Code: code, Status: status, Err: err}
}
