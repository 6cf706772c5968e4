// Package faults wraps any storage.Store with injected faults, so every
// ambiguous outcome graft must survive can be produced on demand, on every
// backend. Rules (Add) choose a fault (Mode) per request by operation and
// key; Seeded builds a rule that chooses from a seed.
//
// Invariants:
//   - Every injected error is a *storage.Error with the Code the S3 backend
//     would give the same event, and an Err matching ErrInjected that names the rule.
//   - Nothing reaches the inner store on FailBeforeSend or Refuse; a held put
//     reaches it only through HeldPut.Release, with its original conditions.
//   - Invalid requests fail validation before any rule is consulted: never
//     faulted, never counted.
//   - Every valid request is recorded (Requests, Counts) in arrival order.
//   - ListMultipart lists what SetMultipartListing chose: all uploads under the
//     prefix (S3), for a non-empty prefix only an exact key's (MinIO), or
//     nothing, answering 501.
//
// A Store is safe for concurrent use, rules included.
package faults

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/graftworks/graft/storage"
)

// ErrInjected matches (with errors.Is) every error this package injects.
var ErrInjected = errors.New("injected fault")

// Op is an operation kind; its value is the Op of a storage.Error.
type Op string

// The operations of storage.Store.
const (
	OpGet         Op = "get"
	OpHead        Op = "head"
	OpPut         Op = "put"
	OpList        Op = "list"
	OpDelete      Op = "delete"
	OpDeleteBatch Op = "delete_batch"
)

// Ops lists storage.Store's operation kinds (MultipartOps the multipart ones).
var Ops = []Op{OpGet, OpHead, OpPut, OpList, OpDelete, OpDeleteBatch}

// isWrite reports whether op changes the store (its faults are ambiguous).
func (op Op) isWrite() bool {
	return op != OpGet && op != OpHead && op != OpList && op != OpListMultipart
}

// Mode is what a fault does to a request.
type Mode int

const (
	// None is no fault: the request passes through.
	None Mode = iota
	// FailBeforeSend fails the request unsent: nothing is applied, yet a
	// write is CodeAmbiguous (a client cannot tell "never sent" from "answer
	// lost"); a read is CodeUnavailable.
	FailBeforeSend
	// ApplyLoseAnswer sends the request, then discards the answer: a write
	// is CodeAmbiguous, a read CodeUnavailable.
	ApplyLoseAnswer
	// Hold keeps a put in flight: the caller gets CodeAmbiguous at once, and
	// the put is applied, with its conditions, only by HeldPut.Release.
	Hold
	// Refuse answers Rule.Status and applies nothing, classified as the S3
	// backend would: for a write by storage.WriteStatusCode; for a read 404
	// is CodeNotFound and anything else CodeUnavailable.
	Refuse
	// Delay sleeps Rule.Delay, then passes the request through; if the
	// context ends first nothing is sent and the caller gets the context's
	// error, CodeAmbiguous for writes and CodeUnavailable for reads.
	Delay
)

var modeNames = [...]string{"none", "fail_before_send", "apply_lose_answer", "hold", "refuse", "delay"}

func (m Mode) String() string {
	if m < 0 || int(m) >= len(modeNames) {
		return fmt.Sprintf("mode(%d)", int(m))
	}
	return modeNames[m]
}

// Rule selects requests and the fault they get. A request is selected when
// it matches every selection field set (Op, KeyGlob, KeyPrefix, Match, Body);
// a listing's key is its prefix, and a delete_batch is selected when any key is.
//
// Of the requests it selects a rule faults the (Skip+1)th to the
// (Skip+Times)th (Times 0: every one from the (Skip+1)th). Every rule counts
// every request it selects, but a request gets at most one fault, from the
// earliest added rule in turn; a later rule's turn is not carried over.
type Rule struct {
	// Name appears in every error the rule injects; defaults to e.g. "hold#3".
	Name string
	// Op restricts the rule to one operation ("": every one; for Hold, puts).
	Op Op
	// KeyGlob is a path.Match pattern ('*' does not cross '/').
	KeyGlob   string
	KeyPrefix string
	// Match and Body must also accept the request; Body selects puts by their
	// bytes. Both run under the Store's lock and must not call it.
	Match func(op Op, key string) bool
	Body  func(body []byte) bool

	// Mode is the fault; required except in a rule made by Seeded.
	Mode Mode
	// Status is the HTTP status a Refuse answers with, 400..599.
	Status int
	// Delay is slept, honouring the context, before the fault takes effect;
	// for Mode Delay it is the whole fault and must be positive.
	Delay time.Duration
	// Skip selected requests pass before the first fault; Times are faulted.
	Skip, Times int

	seeded *schedule
}

// selects reports whether r's selection fields match the request.
func (r *Rule) selects(op Op, keys []string, body []byte) bool {
	switch {
	case r.Op != "" && r.Op != op, r.Op == "" && r.Mode == Hold && op != OpPut:
		return false
	case r.Body != nil && (op != OpPut || !r.Body(body)):
		return false
	case len(keys) == 0: // an empty delete_batch has no key to select
		return r.KeyGlob == "" && r.KeyPrefix == "" && r.Match == nil && r.Body == nil
	}
	return slices.ContainsFunc(keys, func(k string) bool { return r.selectsKey(op, k) })
}

func (r *Rule) selectsKey(op Op, key string) bool {
	globbed, _ := path.Match(r.KeyGlob, key)
	return strings.HasPrefix(key, r.KeyPrefix) && (r.KeyGlob == "" || globbed) &&
		(r.Match == nil || r.Match(op, key))
}

// validate panics on a meaningless rule: a typo should stop the test, not
// silently fault nothing.
func (r *Rule) validate() {
	bad := func(format string, args ...any) {
		panic(fmt.Sprintf("faults: rule %q (%s): %s", r.Name, r.Mode, fmt.Sprintf(format, args...)))
	}
	if r.Op != "" && !slices.Contains(Ops, r.Op) && !slices.Contains(MultipartOps, r.Op) {
		bad("unknown Op %q", r.Op)
	}
	if r.KeyGlob != "" {
		if _, err := path.Match(r.KeyGlob, ""); err != nil {
			bad("KeyGlob %q: %v", r.KeyGlob, err)
		}
	}
	if r.Skip < 0 || r.Times < 0 || r.Delay < 0 {
		bad("negative Skip, Times or Delay")
	}
	if r.seeded != nil {
		return
	}
	switch {
	case r.Mode == None:
		bad("no Mode")
	case r.Mode == Hold && r.Op != "" && r.Op != OpPut:
		bad("Hold applies to puts only, not %q", r.Op)
	case r.Mode == Refuse && (r.Status < 400 || r.Status > 599):
		bad("Refuse needs a Status in 400..599, not %d", r.Status)
	case r.Mode == Delay && r.Delay <= 0:
		bad("Delay mode needs a positive Delay")
	case r.Mode < None || r.Mode > Delay:
		bad("unknown Mode %d", int(r.Mode))
	}
}

// activeRule is a rule added to a Store, with its running counts.
type activeRule struct {
	Rule
	id       uint64
	selected int
	seen     map[string]int // seeded only: requests selected per operation and key
}

// fault is the decision for one request.
type fault struct {
	mode   Mode
	rule   string
	status int
	delay  time.Duration
	req    *Request
}

// Store is a storage.Store that injects faults into the requests it passes
// to an inner store.
type Store struct {
	inner storage.Store

	mu      sync.Mutex
	rules   []*activeRule
	nextID  uint64
	log     []*Request
	held    []*HeldPut
	changed chan struct{} // closed and replaced whenever held changes
	listing MultipartListing
}

var _ storage.Store = (*Store)(nil)

// Wrap returns a Store with no rules around inner.
func Wrap(inner storage.Store) *Store {
	return &Store{inner: inner, changed: make(chan struct{})}
}

// Inner returns the wrapped store, for reading state behind the faults.
func (s *Store) Inner() storage.Store { return s.inner }

// Add activates r after the rules already added and returns a func removing
// it (idempotent). It panics on a meaningless rule.
func (s *Store) Add(r Rule) (remove func()) {
	r.validate()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	ar := &activeRule{Rule: r, id: s.nextID}
	ar.Name = cmp.Or(ar.Name, fmt.Sprintf("%s#%d", r.Mode, ar.id))
	if r.seeded != nil {
		ar.Mode, ar.Status, ar.Delay = None, 0, 0 // the schedule chooses these
		ar.seen = make(map[string]int)
	}
	s.rules = append(s.rules, ar)
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if i := slices.Index(s.rules, ar); i >= 0 {
			s.rules = slices.Delete(s.rules, i, i+1)
		}
	}
}

// decide records the request and chooses its fault.
func (s *Store) decide(op Op, keys []string, body []byte) fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	req := &Request{Op: op, body: body, keys: slices.Clone(keys)}
	if op == OpDeleteBatch {
		req.Keys = req.keys
	} else {
		req.Key = keys[0]
	}
	s.log = append(s.log, req)
	f := fault{req: req}
	for _, r := range s.rules {
		if !r.selects(op, keys, body) {
			continue
		}
		r.selected++
		mode, status, delay := r.Mode, r.Status, r.Delay
		if r.seeded != nil {
			k := string(op) + "\x00" + strings.Join(keys, "\x00")
			r.seen[k]++
			mode, status, delay = r.seeded.choose(op, k, r.seen[k])
		}
		inTurn := r.selected > r.Skip && (r.Times == 0 || r.selected <= r.Skip+r.Times)
		if f.mode != None || !inTurn || mode == None {
			continue
		}
		f.mode, f.rule, f.status, f.delay = mode, r.Name, status, delay
	}
	req.Fault, req.Rule, req.Status, req.Sent = f.mode, f.rule, f.status, f.mode != FailBeforeSend
	return f
}

// wait sleeps the fault's delay; if ctx ends first the request is unsent.
func (s *Store) wait(ctx context.Context, f fault, op Op, key string) error {
	if f.delay <= 0 {
		return nil
	}
	t := time.NewTimer(f.delay)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		f.req.Sent = false
		s.mu.Unlock()
		return injected(op, key, unanswered(op), 0, f.rule, "delay of %v interrupted: %w", f.delay, ctx.Err())
	}
}

// unanswered is the Code of a request that got no answer.
func unanswered(op Op) storage.Code {
	if op.isWrite() {
		return storage.CodeAmbiguous
	}
	return storage.CodeUnavailable
}

// refusal is the Code of a Refuse with status (see Refuse).
func refusal(op Op, status int) storage.Code {
	if !op.isWrite() {
		if status == http.StatusNotFound {
			return storage.CodeNotFound
		}
		return storage.CodeUnavailable
	}
	return storage.WriteStatusCode(status)
}

// injected is an error the rule named rule injects.
func injected(op Op, key string, code storage.Code, status int, rule, format string, args ...any) error {
	return &storage.Error{Op: string(op), Key: key, Code: code, Status: status,
		Err: fmt.Errorf("%w by rule %q: "+format, append([]any{ErrInjected, rule}, args...)...)}
}

// through sends one valid request through its fault; invalid, the error of
// its validation, fails it first. keys are what rules match (default: key);
// hold keeps a put in flight.
func through[T any](ctx context.Context, s *Store, invalid error, op Op, key string, keys []string, body []byte, hold func(rule string), send func() (T, error)) (T, error) {
	var zero T
	if invalid != nil {
		return zero, invalid
	}
	if keys == nil {
		keys = []string{key}
	}
	f := s.decide(op, keys, body)
	if err := s.wait(ctx, f, op, key); err != nil {
		return zero, err
	}
	switch {
	case f.mode == FailBeforeSend:
		return zero, injected(op, key, unanswered(op), 0, f.rule, "failed before send")
	case f.mode == Refuse:
		return zero, injected(op, key, refusal(op, f.status), f.status, f.rule, "refused with HTTP %d", f.status)
	case f.mode == ApplyLoseAnswer:
		// The inner result is in the message only, so it cannot be mistaken for the answer.
		inner := "ok"
		if _, err := send(); err != nil {
			inner = err.Error()
		}
		return zero, injected(op, key, unanswered(op), 0, f.rule, "answer lost after send (inner result: %s)", inner)
	case f.mode == Hold && hold != nil:
		hold(f.rule)
		return zero, injected(op, key, storage.CodeAmbiguous, 0, f.rule, "put held until released")
	}
	return send()
}

// throughErr is through for a call that answers only an error.
func throughErr(ctx context.Context, s *Store, invalid error, op Op, key string, keys []string, call func() error) error {
	_, err := through(ctx, s, invalid, op, key, keys, nil, nil, func() (struct{}, error) { return struct{}{}, call() })
	return err
}

// pageError is the error of a listing's invalid limit.
func pageError(op Op, prefix string, limit int) error {
	_, err := storage.PageLimit(string(op), prefix, limit)
	return err
}

func (s *Store) Get(ctx context.Context, key string) (storage.Object, error) {
	return through(ctx, s, storage.CheckKey(string(OpGet), key), OpGet, key, nil, nil, nil, func() (storage.Object, error) { return s.inner.Get(ctx, key) })
}

func (s *Store) Head(ctx context.Context, key string) (storage.ObjectInfo, error) {
	return through(ctx, s, storage.CheckKey(string(OpHead), key), OpHead, key, nil, nil, nil, func() (storage.ObjectInfo, error) { return s.inner.Head(ctx, key) })
}

func (s *Store) Put(ctx context.Context, key string, body []byte, opts storage.PutOptions) (storage.PutResult, error) {
	invalid := cmp.Or(storage.CheckKey(string(OpPut), key), storage.CheckPut(key, opts))
	hold := func(rule string) { s.hold(key, body, opts, rule) }
	return through(ctx, s, invalid, OpPut, key, nil, body, hold, func() (storage.PutResult, error) { return s.inner.Put(ctx, key, body, opts) })
}

func (s *Store) List(ctx context.Context, opts storage.ListOptions) (storage.ListPage, error) {
	return through(ctx, s, pageError(OpList, opts.Prefix, opts.Limit), OpList, opts.Prefix, nil, nil, nil, func() (storage.ListPage, error) { return s.inner.List(ctx, opts) })
}

func (s *Store) Delete(ctx context.Context, key string) error {
	return throughErr(ctx, s, storage.CheckKey(string(OpDelete), key), OpDelete, key, nil, func() error { return s.inner.Delete(ctx, key) })
}

// DeleteBatch: a fault applies to the whole batch;
// its error is a *storage.Error with no Key, not a *storage.BatchError.
func (s *Store) DeleteBatch(ctx context.Context, keys []string) error {
	return throughErr(ctx, s, storage.CheckBatch(keys), OpDeleteBatch, "", keys, func() error { return s.inner.DeleteBatch(ctx, keys) })
}
