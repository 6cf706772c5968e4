// Package storage is graft's object-store contract, which every backend
// (localfs, s3, memstore, faults) keeps and storage/storagetest proves; no SDK
// error type leaves a backend package:
//
//   - Writes are whole-object. A Put with IfNoneMatch succeeds only when the key
//     is absent; with IfMatch only when the current ETag equals the given one.
//     Exactly one of any number of racing conditional writers wins.
//   - A failed condition is ErrPreconditionFailed: the write was definitely not
//     applied.
//   - A write whose effect is unknown (transport error, timeout, cancellation
//     after send, 5xx, 409 ConditionalRequestConflict) is ErrAmbiguous: it may
//     have been applied, may be applied later, or never. Callers settle such a
//     write by reading back and re-issuing byte-identical bytes, never by guessing.
//   - A write the store definitely refused without applying it (403, 400, a
//     fault rule that refuses) is ErrRefused.
//   - A read that could not be answered is ErrUnavailable; it changed nothing.
//   - A missing key is ErrNotFound on Get and Head; Delete of a missing key
//     succeeds (deletes are idempotent).
//   - Keys are '/'-separated, never start or end with '/', have no empty or '.'
//     or '..' segments, and are at most MaxKeyLen bytes; anything else is
//     ErrInvalidKey before any request is sent.
package storage

import (
	"cmp"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// MaxKeyLen bounds a key's length in bytes (S3's own limit is 1024).
const MaxKeyLen = 1024

// MaxBatchDelete is the most keys one DeleteBatch call takes (S3's limit).
const MaxBatchDelete = 1000

// Store is the object-store contract every backend satisfies.
type Store interface {
	// Get returns the object's bytes and metadata, or ErrNotFound.
	Get(ctx context.Context, key string) (Object, error)
	// Head returns the object's metadata without its bytes, or ErrNotFound.
	Head(ctx context.Context, key string) (ObjectInfo, error)
	// Put writes body at key under opts' condition (both set is
	// ErrInvalidArgument); graft never writes a control object unconditionally.
	Put(ctx context.Context, key string, body []byte, opts PutOptions) (PutResult, error)
	// List returns up to opts.Limit objects (0 means 1000) whose keys start
	// with opts.Prefix and sort after opts.StartAfter, in byte order.
	List(ctx context.Context, opts ListOptions) (ListPage, error)
	// Delete removes key; a missing key is not an error.
	Delete(ctx context.Context, key string) error
	// DeleteBatch removes up to MaxBatchDelete keys; keys it could not delete
	// are named by a *BatchError.
	DeleteBatch(ctx context.Context, keys []string) error
}

// PutOptions are the conditions of a Put; the zero value is none.
type PutOptions struct {
	IfNoneMatch bool   // only if the key is absent (If-None-Match: *)
	IfMatch     string // only if the current ETag equals this one
}

// PutResult is what a successful put returns: the ETag of the bytes stored.
type PutResult struct {
	ETag string
}

// ObjectInfo is an object's metadata.
type ObjectInfo struct {
	Key          string
	Size         int64
	ETag         string
	LastModified time.Time
}

// Object is an object's bytes and metadata.
type Object struct {
	ObjectInfo
	Body []byte
}

// ListOptions select one page of a listing; see Store.List.
type ListOptions struct {
	Prefix     string
	StartAfter string
	Limit      int // 1..1000; 0 means 1000
}

// ListPage is one page of a listing; Truncated: more keys may follow.
type ListPage struct {
	Objects   []ObjectInfo
	Truncated bool
}

// Code classifies a storage error portably across backends.
type Code int

const (
	// CodeUnknown is an error no backend classified; treat it as ambiguous for writes.
	CodeUnknown Code = iota
	CodeNotFound
	CodePreconditionFailed
	CodeAmbiguous
	CodeRefused
	CodeUnavailable
	CodeInvalidKey
	CodeInvalidArgument
)

var codeNames = [...]string{"unknown", "not_found", "precondition_failed", "ambiguous", "refused", "unavailable", "invalid_key", "invalid_argument"}

func (c Code) String() string {
	if c < 0 || int(c) >= len(codeNames) {
		return "unknown"
	}
	return codeNames[c]
}

// Sentinel errors; match them with errors.Is. Every backend returns *Error,
// whose Is method matches the sentinel of its Code.
var (
	ErrNotFound           = errors.New("storage: not found")
	ErrPreconditionFailed = errors.New("storage: precondition failed")
	ErrAmbiguous          = errors.New("storage: outcome unknown")
	ErrRefused            = errors.New("storage: refused")
	ErrUnavailable        = errors.New("storage: unavailable")
	ErrInvalidKey         = errors.New("storage: invalid key")
	ErrInvalidArgument    = errors.New("storage: invalid argument")
)

// sentinels is indexed by Code.
var sentinels = [...]error{nil, ErrNotFound, ErrPreconditionFailed, ErrAmbiguous, ErrRefused, ErrUnavailable, ErrInvalidKey, ErrInvalidArgument}

// Error is the one error type backends return.
type Error struct {
	Op     string // "get", "head", "put", "list", "delete", "delete_batch", or a multipart op
	Key    string
	Code   Code
	Status int   // HTTP status when there was one, else 0
	Err    error // the backend's own error, for the message only
}

// NewError returns an *Error without an HTTP status.
func NewError(op, key string, code Code, err error) *Error {
	return &Error{Op: op, Key: key, Code: code, Err: err}
}

func (e *Error) Error() string {
	s := "storage " + e.Op
	if e.Key != "" {
		s += fmt.Sprintf(" %q", e.Key)
	}
	s += ": " + e.Code.String()
	if e.Status != 0 {
		s += fmt.Sprintf(" (HTTP %d)", e.Status)
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Is matches the sentinel of e's Code.
func (e *Error) Is(target error) bool {
	return e.Code > 0 && int(e.Code) < len(sentinels) && sentinels[e.Code] == target
}

// Unwrap returns the backend's own error.
func (e *Error) Unwrap() error { return e.Err }

// CodeOf returns the Code of err, CodeUnknown when err is not a storage error.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	for c, s := range sentinels {
		if s != nil && errors.Is(err, s) {
			return Code(c)
		}
	}
	return CodeUnknown
}

// BatchError reports the keys a DeleteBatch could not delete.
type BatchError struct {
	Failed map[string]error
}

func (e *BatchError) Error() string {
	return fmt.Sprintf("storage delete_batch: %d keys not deleted", len(e.Failed))
}

// ValidateKey checks a key against the contract's key rules.
func ValidateKey(key string) error { return CheckKey("validate", key) }

// CheckKey is ValidateKey reporting a violation as an error of op.
// Backends check the key once, before anything else.
func CheckKey(op, key string) error {
	bad := func(why string) error { return NewError(op, key, CodeInvalidKey, errors.New(why)) }
	if key == "" {
		return bad("empty key")
	}
	if len(key) > MaxKeyLen {
		return bad(fmt.Sprintf("longer than %d bytes", MaxKeyLen))
	}
	for _, seg := range strings.Split(key, "/") {
		switch seg {
		case "":
			return bad("empty segment")
		case ".", "..":
			return bad("dot segment")
		}
	}
	if strings.ContainsFunc(key, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '\\' }) {
		return bad("control character or backslash")
	}
	return nil
}

// CheckRequest fails a request on key whose context is done (ContextError) or
// whose key is invalid.
func CheckRequest(ctx context.Context, op, key string, write bool) error {
	if err := ctx.Err(); err != nil {
		return ContextError(op, key, write, err)
	}
	return CheckKey(op, key)
}

// CheckPut checks that a put's opts do not set both conditions; the key is
// CheckKey's.
func CheckPut(key string, opts PutOptions) error {
	if opts.IfNoneMatch && opts.IfMatch != "" {
		return NewError("put", key, CodeInvalidArgument, errors.New("IfNoneMatch and IfMatch both set"))
	}
	return nil
}

// CheckBatch checks a DeleteBatch's size and keys.
func CheckBatch(keys []string) error {
	if len(keys) > MaxBatchDelete {
		return NewError("delete_batch", "", CodeInvalidArgument, fmt.Errorf("%d keys, at most %d", len(keys), MaxBatchDelete))
	}
	for _, k := range keys {
		if err := CheckKey("delete_batch", k); err != nil {
			return err
		}
	}
	return nil
}

// PageLimit returns a listing's page size (0 means 1000); anything outside
// 0..1000 is ErrInvalidArgument of op.
func PageLimit(op, prefix string, limit int) (int, error) {
	if limit < 0 || limit > 1000 {
		return 0, NewError(op, prefix, CodeInvalidArgument, fmt.Errorf("limit %d outside 1..1000", limit))
	}
	return cmp.Or(limit, 1000), nil
}

// CheckList fails a listing whose context is done (ContextError) or whose
// limit PageLimit refuses; else it returns the page size.
func CheckList(ctx context.Context, op, prefix string, limit int) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, ContextError(op, prefix, false, err)
	}
	return PageLimit(op, prefix, limit)
}

// ContextError is the error of a request whose context ended before it was
// sent: ErrUnavailable for a read, ErrAmbiguous for a write, so that every
// cancelled write is settled by reading back.
func ContextError(op, key string, write bool, err error) *Error {
	if write {
		return NewError(op, key, CodeAmbiguous, err)
	}
	return NewError(op, key, CodeUnavailable, err)
}

// ETagOf is the quoted hex MD5 of body, the ETag S3 gives a single-part upload.
func ETagOf(body []byte) string {
	sum := md5.Sum(body)
	return QuoteSum(sum[:])
}

// QuoteSum is the ETag form of a digest: quoted lower-case hex.
func QuoteSum(sum []byte) string { return `"` + hex.EncodeToString(sum) + `"` }

// ListAll calls fn for every object under prefix, page by page.
func ListAll(ctx context.Context, s Store, prefix string, fn func(ObjectInfo) error) error {
	opts := ListOptions{Prefix: prefix}
	return eachPage(func() ([]ObjectInfo, bool, error) {
		page, err := s.List(ctx, opts)
		return page.Objects, page.Truncated, err
	}, func(last ObjectInfo) { opts.StartAfter = last.Key }, fn)
}

// eachPage calls fn for every item of the pages next returns, calling after with each
// truncated page's last item before asking for the next page.
func eachPage[T any](next func() ([]T, bool, error), after func(last T), fn func(T) error) error {
	for {
		items, truncated, err := next()
		if err != nil {
			return err
		}
		for _, item := range items {
			if err := fn(item); err != nil {
				return err
			}
		}
		if !truncated || len(items) == 0 {
			return nil
		}
		after(items[len(items)-1])
	}
}

// WriteStatusCode classifies the HTTP status of a failed write for every
// HTTP backend and the fault wrapper: 412 is a failed condition, statuses
// that reject a request before acting on it are refusals, and anything else
// may have been applied.
func WriteStatusCode(status int) Code {
	switch status {
	case http.StatusPreconditionFailed:
		return CodePreconditionFailed
	case http.StatusBadRequest, http.StatusForbidden, http.StatusNotFound,
		http.StatusMethodNotAllowed, http.StatusLengthRequired,
		http.StatusRequestEntityTooLarge:
		return CodeRefused
	}
	return CodeAmbiguous
}
