package s3

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"os"
	"syscall"
	"testing"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/graftworks/graft/storage"
)

// The helpers below build errors shaped like the ones the SDK returns:
// an *smithy.OperationError around either an *awshttp.ResponseError (a
// response arrived) or a *smithyhttp.RequestSendError (it did not).

func apiResponseError(op string, status int, apiErr error) error {
	return &smithy.OperationError{
		ServiceID:     "S3",
		OperationName: op,
		Err: &awshttp.ResponseError{
			ResponseError: &smithyhttp.ResponseError{
				Response: &smithyhttp.Response{Response: &http.Response{StatusCode: status}},
				Err:      apiErr,
			},
			RequestID: "REQ1",
		},
	}
}

func apiError(op string, status int, code string) error {
	return apiResponseError(op, status, &smithy.GenericAPIError{Code: code, Message: "synthetic"})
}

func sendError(op string, cause error) error {
	return &smithy.OperationError{
		ServiceID:     "S3",
		OperationName: op,
		Err: &smithyhttp.RequestSendError{
			Err: &url.Error{Op: "Put", URL: "http://127.0.0.1:1/bucket/key", Err: cause},
		},
	}
}

func TestClassify(t *testing.T) {
	connRefused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	connReset := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	cases := []struct {
		name       string
		err        error
		kind       opKind
		wantCode   storage.Code
		wantStatus int
	}{
		// Reads.
		{"get NoSuchKey", apiResponseError("GetObject", 404, &types.NoSuchKey{}), read, storage.CodeNotFound, 404},
		{"head bare 404", apiError("HeadObject", 404, "NotFound"), read, storage.CodeNotFound, 404},
		{"head 404 without code", apiResponseError("HeadObject", 404, errors.New("no body")), read, storage.CodeNotFound, 404},
		{"get NoSuchBucket is not a missing key", apiError("GetObject", 404, "NoSuchBucket"), read, storage.CodeUnavailable, 404},
		{"get 403", apiError("GetObject", 403, "AccessDenied"), read, storage.CodeUnavailable, 403},
		{"get 500", apiError("GetObject", 500, "InternalError"), read, storage.CodeUnavailable, 500},
		{"get 503 SlowDown", apiError("GetObject", 503, "SlowDown"), read, storage.CodeUnavailable, 503},
		{"get connection refused", sendError("GetObject", connRefused), read, storage.CodeUnavailable, 0},
		{"get cancelled", &smithy.OperationError{Err: &smithy.CanceledError{Err: context.Canceled}}, read, storage.CodeUnavailable, 0},
		{"list 200 undecodable", apiResponseError("ListObjectsV2", 200, &smithy.DeserializationError{Err: errors.New("bad xml")}), read, storage.CodeUnavailable, 200},
		{"unknown error on read", errors.New("boom"), read, storage.CodeUnavailable, 0},

		// Writes.
		{"put 412 PreconditionFailed", apiError("PutObject", 412, "PreconditionFailed"), write, storage.CodePreconditionFailed, 412},
		{"put 412 without code", apiResponseError("PutObject", 412, errors.New("no body")), write, storage.CodePreconditionFailed, 412},
		{"put 409 ConditionalRequestConflict", apiError("PutObject", 409, "ConditionalRequestConflict"), write, storage.CodeAmbiguous, 409},
		{"put 409 unknown code", apiError("PutObject", 409, "OperationAborted"), write, storage.CodeAmbiguous, 409},
		{"put 409 versitygw ObjectParentIsFile", apiError("PutObject", 409, "ObjectParentIsFile"), write, storage.CodeRefused, 409},
		{"put 409 versitygw ExistingObjectIsDirectory", apiError("PutObject", 409, "ExistingObjectIsDirectory"), write, storage.CodeRefused, 409},
		{"put 400", apiError("PutObject", 400, "InvalidArgument"), write, storage.CodeRefused, 400},
		{"put 403 bad signature", apiError("PutObject", 403, "SignatureDoesNotMatch"), write, storage.CodeRefused, 403},
		{"put 404 NoSuchBucket", apiError("PutObject", 404, "NoSuchBucket"), write, storage.CodeRefused, 404},
		{"put 405", apiError("PutObject", 405, "MethodNotAllowed"), write, storage.CodeRefused, 405},
		{"put 411", apiError("PutObject", 411, "MissingContentLength"), write, storage.CodeRefused, 411},
		{"put 413", apiError("PutObject", 413, "EntityTooLarge"), write, storage.CodeRefused, 413},
		{"put 500", apiError("PutObject", 500, "InternalError"), write, storage.CodeAmbiguous, 500},
		{"put 503", apiError("PutObject", 503, "SlowDown"), write, storage.CodeAmbiguous, 503},
		{"put 501", apiError("PutObject", 501, "NotImplemented"), write, storage.CodeAmbiguous, 501},
		{"put 200 undecodable", apiResponseError("PutObject", 200, &smithy.DeserializationError{Err: errors.New("bad xml")}), write, storage.CodeAmbiguous, 200},
		{"put connection refused", sendError("PutObject", connRefused), write, storage.CodeAmbiguous, 0},
		{"put connection reset", sendError("PutObject", connReset), write, storage.CodeAmbiguous, 0},
		{"put timeout", sendError("PutObject", context.DeadlineExceeded), write, storage.CodeAmbiguous, 0},
		{"put cancelled", &smithy.OperationError{Err: &smithy.CanceledError{Err: context.Canceled}}, write, storage.CodeAmbiguous, 0},
		{"unknown error on write", errors.New("boom"), write, storage.CodeAmbiguous, 0},
		{"delete 500", apiError("DeleteObject", 500, "InternalError"), write, storage.CodeAmbiguous, 500},
		{"delete_batch 403", apiError("DeleteObjects", 403, "AccessDenied"), write, storage.CodeRefused, 403},

		// Puts guarded by If-Match.
		{"put-if-match NoSuchKey", apiError("PutObject", 404, "NoSuchKey"), writeIfMatch, storage.CodePreconditionFailed, 404},
		{"put-if-match bare 404", apiResponseError("PutObject", 404, errors.New("no body")), writeIfMatch, storage.CodePreconditionFailed, 404},
		{"put-if-match NoSuchBucket", apiError("PutObject", 404, "NoSuchBucket"), writeIfMatch, storage.CodeRefused, 404},
		{"put-if-match 412", apiError("PutObject", 412, "PreconditionFailed"), writeIfMatch, storage.CodePreconditionFailed, 412},
		{"put-if-match 500", apiError("PutObject", 500, "InternalError"), writeIfMatch, storage.CodeAmbiguous, 500},
		{"put-if-match transport", sendError("PutObject", connReset), writeIfMatch, storage.CodeAmbiguous, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, status := classify(c.err, c.kind)
			if code != c.wantCode || status != c.wantStatus {
				t.Fatalf("classify = (%v, %d), want (%v, %d)", code, status, c.wantCode, c.wantStatus)
			}
		})
	}
}

func TestClassifyBatchEntry(t *testing.T) {
	cases := []struct {
		code     string
		wantCode storage.Code
		wantGone bool
	}{
		{"NoSuchKey", 0, true},
		{"AccessDenied", storage.CodeRefused, false},
		{"InternalError", storage.CodeAmbiguous, false},
		{"SlowDown", storage.CodeAmbiguous, false},
		{"", storage.CodeAmbiguous, false},
	}
	for _, c := range cases {
		code, gone := classifyBatchEntry(c.code)
		if gone != c.wantGone || (!gone && code != c.wantCode) {
			t.Errorf("classifyBatchEntry(%q) = (%v, %v), want (%v, %v)", c.code, code, gone, c.wantCode, c.wantGone)
		}
	}
}

func TestNewError_CancelledContext_KeepsContextErrorInChain(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// A transport error that does not itself wrap context.Canceled.
	sdkErr := sendError("PutObject", errors.New("use of closed network connection"))
	err := newError(ctx, "put", "refs/a.json", write, sdkErr)
	if storage.CodeOf(err) != storage.CodeAmbiguous || !errors.Is(err, storage.ErrAmbiguous) {
		t.Fatalf("err = %v, want ambiguous", err)
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("errors.Is(%v, context.Canceled) = false", err)
	}
}

func TestNewError_DefinitiveAnswerAfterCancel_StaysDefinitive(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := newError(ctx, "put", "refs/a.json", write, apiError("PutObject", 412, "PreconditionFailed"))
	if !errors.Is(err, storage.ErrPreconditionFailed) {
		t.Fatalf("err = %v, want precondition failed: a 412 proves the write was not applied", err)
	}
	var se *storage.Error
	if !errors.As(err, &se) || se.Status != 412 || se.Op != "put" || se.Key != "refs/a.json" {
		t.Fatalf("err = %#v, want *storage.Error{Op:put Key:refs/a.json Status:412}", err)
	}
}
