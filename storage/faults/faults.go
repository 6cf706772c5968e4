// Package faults wraps any storage.Store with injected faults, so the same
// fault matrix runs against every backend and every ambiguous outcome graft
// must survive can be produced on demand in a test.
//
// A fault is one of five modes (see Mode). Rules (Add) choose faults per
// request by operation and key; Seeded builds a rule that chooses a mode per
// request from a seed.
//
// Invariants:
//
//   - Every injected error is a *storage.Error with the Code the S3 backend
//     would give the same event: a write whose fate the caller cannot know is
//     CodeAmbiguous, a read that got no answer is CodeUnavailable. Its Err
//     matches ErrInjected and names the rule, so logs say which fault it was.
//   - Nothing reaches the inner store on FailBeforeSend or Refuse; a held put
//     reaches it only through HeldPut.Release, with its original conditions.
//   - Keys and arguments are validated before any rule is consulted, so an
//     invalid request is ErrInvalidKey or ErrInvalidArgument, never a fault,
//     and is not counted.
//   - Every valid request is recorded (Requests, Counts) in arrival order.
//
// A Store is safe for concurrent use; rules may be added and removed while
// requests run.
package faults

import (
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

// Ops lists every operation kind of storage.Store (MultipartOps lists the
// multipart ones).
var Ops = []Op{OpGet, OpHead, OpPut, OpList, OpDelete, OpDeleteBatch}

// isWrite reports whether op changes the store; its faults are ambiguous,
// where a read's are unavailable.
func (op Op) isWrite() bool {
	return op != OpGet && op != OpHead && op != OpList && op != OpListMultipart
}

func (op Op) valid() bool { return slices.Contains(Ops, op) || slices.Contains(MultipartOps, op) }

// Mode is what a fault does to a request.
type Mode int

const (
	// None is no fault: the request passes through. It is the Fault of an
	// unfaulted Request.
	None Mode = iota
	// FailBeforeSend fails the request without sending it. Nothing is
	// applied, yet a write is CodeAmbiguous, because a real client cannot
	// tell "never sent" from "sent, answer lost"; a read is CodeUnavailable.
	FailBeforeSend
	// ApplyLoseAnswer sends the request to the inner store, then discards
	// the answer: a write is applied (as far as the inner store applies it)
	// and the caller gets CodeAmbiguous; a read gets CodeUnavailable.
	ApplyLoseAnswer
	// Hold keeps a put in flight: the caller gets CodeAmbiguous at once, and
	// the put is applied to the inner store, with its original conditions,
	// only when the test calls HeldPut.Release. It applies to puts only.
	Hold
	// Refuse answers with Rule.Status and applies nothing, classified as
	// the S3 backend classifies that status: for a write, 412 is
	// CodePreconditionFailed, the statuses of storage.WriteStatusCode that
	// reject a request before acting are CodeRefused, and anything else
	// (409, 429, 5xx) is CodeAmbiguous; for a read 404 is CodeNotFound and
	// anything else CodeUnavailable.
	Refuse
	// Delay sleeps Rule.Delay, honouring the context, then passes the
	// request through. If the context ends first nothing is sent and the
	// caller gets the context's error as CodeAmbiguous (writes) or
	// CodeUnavailable (reads).
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
// it matches every selection field that is set (Op, KeyGlob, KeyPrefix,
// Match, Body); a rule with none set selects every request. For a list the
// key is its prefix; a delete_batch is selected when any of its keys is.
//
// Of the requests a rule selects it faults the (Skip+1)th through the
// (Skip+Times)th, or every one from the (Skip+1)th when Times is 0: the Nth
// matching request is Skip: N-1, Times: 1. Every rule counts every request
// it selects, but a request gets at most one fault, from the earliest added
// rule that faults it; a later rule whose turn that request was does not
// carry its turn over.
type Rule struct {
	// Name appears in every error the rule injects. Defaults to the mode and
	// a sequence number, e.g. "hold#3".
	Name string
	// Op restricts the rule to one operation ("": every one; for Hold,
	// every put).
	Op Op
	// KeyGlob restricts the rule to keys matching this path.Match pattern
	// ('*' does not cross '/').
	KeyGlob   string
	KeyPrefix string
	// Match and Body, when set, must also accept the request; Body selects
	// puts by their bytes (e.g. a branch ref's live bytes but not a fence at
	// the same key). Both run under the Store's lock: they must not call it.
	Match func(op Op, key string) bool
	Body  func(body []byte) bool

	// Mode is the fault. Required, except in a rule made by Seeded.
	Mode Mode
	// Status is the HTTP status a Refuse answers with, 400..599.
	Status int
	// Delay is slept, honouring the context, before the fault takes effect;
	// for Mode Delay it is the whole fault and must be positive.
	Delay time.Duration
	// Skip lets this many selected requests pass before the first fault;
	// Times is how many are faulted then (0: every one).
	Skip, Times int

	seeded *schedule
}

// selects reports whether r's selection fields match the request.
func (r *Rule) selects(op Op, keys []string, body []byte) bool {
	if r.Op != "" && r.Op != op {
		return false
	}
	if r.Body != nil && (op != OpPut || !r.Body(body)) {
		return false
	}
	if r.Op == "" && r.Mode == Hold && op != OpPut {
		return false
	}
	if len(keys) == 0 { // an empty delete_batch has no key to select
		return r.KeyGlob == "" && r.KeyPrefix == "" && r.Match == nil && r.Body == nil
	}
	for _, k := range keys {
		if r.selectsKey(op, k) {
			return true
		}
	}
	return false
}

func (r *Rule) selectsKey(op Op, key string) bool {
	if r.KeyPrefix != "" && !strings.HasPrefix(key, r.KeyPrefix) {
		return false
	}
	if r.KeyGlob != "" {
		if ok, _ := path.Match(r.KeyGlob, key); !ok {
			return false
		}
	}
	return r.Match == nil || r.Match(op, key)
}

// validate panics on a rule that cannot mean anything: a rule is test code,
// and a typo in it should stop the test, not silently fault nothing.
func (r *Rule) validate() {
	bad := func(format string, args ...any) {
		panic(fmt.Sprintf("faults: rule %q (%s): %s", r.Name, r.Mode, fmt.Sprintf(format, args...)))
	}
	if r.Op != "" && !r.Op.valid() {
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
	switch r.Mode {
	case None:
		bad("no Mode")
	case FailBeforeSend, ApplyLoseAnswer:
	case Hold:
		if r.Op != "" && r.Op != OpPut {
			bad("Hold applies to puts only, not %q", r.Op)
		}
	case Refuse:
		if r.Status < 400 || r.Status > 599 {
			bad("Refuse needs a Status in 400..599, not %d", r.Status)
		}
	case Delay:
		if r.Delay <= 0 {
			bad("Delay mode needs a positive Delay")
		}
	default:
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
}

var _ storage.Store = (*Store)(nil)

// Wrap returns a Store with no rules around inner.
func Wrap(inner storage.Store) *Store {
	return &Store{inner: inner, changed: make(chan struct{})}
}

// Inner returns the wrapped store, for reading state behind the faults.
func (s *Store) Inner() storage.Store { return s.inner }

// Add activates r after every rule already added, and returns a func that
// removes it (calling it again does nothing). Add panics on a rule that
// cannot fault anything (see validate).
func (s *Store) Add(r Rule) (remove func()) {
	r.validate()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	ar := &activeRule{Rule: r, id: s.nextID}
	if ar.Name == "" {
		ar.Name = fmt.Sprintf("%s#%d", r.Mode, ar.id)
	}
	if r.seeded != nil {
		ar.Mode, ar.Status, ar.Delay = None, 0, 0 // the schedule chooses these
		ar.seen = make(map[string]int)
	}
	s.rules = append(s.rules, ar)
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		for i, x := range s.rules {
			if x == ar {
				s.rules = append(s.rules[:i:i], s.rules[i+1:]...)
				return
			}
		}
	}
}

// decide records the request and chooses its fault.
func (s *Store) decide(op Op, keys []string, body []byte) fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	req := &Request{Op: op, Sent: true, body: body}
	if op == OpDeleteBatch {
		req.Keys = append([]string(nil), keys...)
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
	req.Fault, req.Rule, req.Status = f.mode, f.rule, f.status
	if f.mode == FailBeforeSend {
		req.Sent = false
	}
	return f
}

// wait sleeps the fault's delay. If ctx ends first the request was never
// sent and the caller gets ctx's error.
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

// failure is the error a faulted request returns without reaching the inner store.
func (f fault) failure(op Op, key string) error {
	switch f.mode {
	case FailBeforeSend:
		return injected(op, key, unanswered(op), 0, f.rule, "failed before send")
	case Refuse:
		return injected(op, key, refusal(op, f.status), f.status, f.rule, "refused with HTTP %d", f.status)
	case Hold:
		return injected(op, key, storage.CodeAmbiguous, 0, f.rule, "put held until released")
	}
	panic("faults: no failure for mode " + f.mode.String())
}

// lost is the error of an ApplyLoseAnswer request; the inner result is kept
// in the message, not in the chain, so it cannot be mistaken for the answer.
func (f fault) lost(op Op, key string, innerErr error) error {
	inner := "ok"
	if innerErr != nil {
		inner = innerErr.Error()
	}
	return injected(op, key, unanswered(op), 0, f.rule, "answer lost after send (inner result: %s)", inner)
}

// through sends one request of op through the fault decided for it. keys are
// what rules match (default: key); hold keeps a put in flight.
func through[T any](ctx context.Context, s *Store, op Op, key string, keys []string, body []byte, hold func(rule string), send func() (T, error)) (T, error) {
	var zero T
	if keys == nil {
		keys = []string{key}
	}
	f := s.decide(op, keys, body)
	if err := s.wait(ctx, f, op, key); err != nil {
		return zero, err
	}
	switch {
	case f.mode == FailBeforeSend, f.mode == Refuse:
		return zero, f.failure(op, key)
	case f.mode == ApplyLoseAnswer:
		_, err := send()
		return zero, f.lost(op, key, err)
	case f.mode == Hold && hold != nil:
		hold(f.rule)
		return zero, f.failure(op, key)
	}
	return send()
}

// throughErr is through for a call that answers only an error.
func throughErr(ctx context.Context, s *Store, op Op, key string, keys []string, call func() error) error {
	_, err := through(ctx, s, op, key, keys, nil, nil, func() (struct{}, error) { return struct{}{}, call() })
	return err
}

// Get implements storage.Store.
func (s *Store) Get(ctx context.Context, key string) (storage.Object, error) {
	if err := storage.CheckKey(string(OpGet), key); err != nil {
		return storage.Object{}, err
	}
	return through(ctx, s, OpGet, key, nil, nil, nil, func() (storage.Object, error) { return s.inner.Get(ctx, key) })
}

// Head implements storage.Store.
func (s *Store) Head(ctx context.Context, key string) (storage.ObjectInfo, error) {
	if err := storage.CheckKey(string(OpHead), key); err != nil {
		return storage.ObjectInfo{}, err
	}
	return through(ctx, s, OpHead, key, nil, nil, nil, func() (storage.ObjectInfo, error) { return s.inner.Head(ctx, key) })
}

// Put implements storage.Store.
func (s *Store) Put(ctx context.Context, key string, body []byte, opts storage.PutOptions) (storage.PutResult, error) {
	if err := storage.CheckKey(string(OpPut), key); err != nil {
		return storage.PutResult{}, err
	}
	if err := storage.CheckPut(key, opts); err != nil {
		return storage.PutResult{}, err
	}
	hold := func(rule string) { s.hold(key, body, opts, rule) }
	return through(ctx, s, OpPut, key, nil, body, hold, func() (storage.PutResult, error) { return s.inner.Put(ctx, key, body, opts) })
}

// List implements storage.Store. For rules and counts its key is opts.Prefix.
func (s *Store) List(ctx context.Context, opts storage.ListOptions) (storage.ListPage, error) {
	if _, err := storage.PageLimit(string(OpList), opts.Prefix, opts.Limit); err != nil {
		return storage.ListPage{}, err
	}
	return through(ctx, s, OpList, opts.Prefix, nil, nil, nil, func() (storage.ListPage, error) { return s.inner.List(ctx, opts) })
}

// Delete implements storage.Store.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := storage.CheckKey(string(OpDelete), key); err != nil {
		return err
	}
	return throughErr(ctx, s, OpDelete, key, nil, func() error { return s.inner.Delete(ctx, key) })
}

// DeleteBatch implements storage.Store. A fault applies to the whole batch;
// its error is a *storage.Error with no Key, not a *storage.BatchError.
func (s *Store) DeleteBatch(ctx context.Context, keys []string) error {
	if err := storage.CheckBatch(keys); err != nil {
		return err
	}
	return throughErr(ctx, s, OpDeleteBatch, "", keys, func() error { return s.inner.DeleteBatch(ctx, keys) })
}
