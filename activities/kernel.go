package activities

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/sdk/activity"
	sdklog "go.temporal.io/sdk/log"

	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/storage"
)

// Owner names an operation and the run that owns its ledger row: a kernel write of a row
// the run does not own (another request's, or the reconciler's) does not land.
type Owner struct {
	OpID string
	Run  string // the workflow's run id, or "reconcile/{run id}"
}

// WriteKind names a kind of storage write the kernel settles.
type WriteKind string

// The write kinds. Each is settled by re-issuing its exact bytes, and fenced so that a late
// landing of an earlier attempt can never happen.
const (
	// WriteRef puts a new incarnation's live ref if absent; fenced by a fence ref at the key.
	WriteRef WriteKind = "ref"
	// WriteTag puts a live tag if absent; fenced by a retired tag of this operation at the key.
	WriteTag WriteKind = "tag"
	// WriteRetireRef and WriteRetireTag retire a live ref or tag by compare-and-swap. A late
	// landing is the same retire, so the fence is completing it.
	WriteRetireRef WriteKind = "retire_ref"
	WriteRetireTag WriteKind = "retire_tag"
	// WritePublish is an append (publish.go): chunks and commit put-if-absent, then the swap
	// of the branch's ref from the version the plan read (ETag) to Ref. Its fence rewrites
	// the ref, same head, so the plan's ETag never returns.
	WritePublish WriteKind = "publish"
)

// WriteSpec is one write of an operation: enough for its run, or the reconciler, to
// re-issue it byte-identically, read it back, or fence it. The kernel records it in the
// ledger (operations.pending) before the write is first sent.
type WriteSpec struct {
	Kind  WriteKind `json:"kind"`
	Graph string    `json:"graph"`
	Body  []byte    `json:"body,omitempty"` // the exact bytes of a ref or tag, or a publish's commit
	// Ref (publish) is the new ref's exact bytes; Chunks the chunks the commit names that
	// its parent's did not.
	Ref    []byte     `json:"ref,omitempty"`
	Chunks []ChunkPut `json:"chunks,omitempty"`
	// Pre (publish) are puts-if-absent sent one by one, in order, before Chunks: the
	// chunks and then the objects of new table versions the commit pins (a merge's).
	Pre []ChunkPut `json:"pre,omitempty"`
	// Native (retire_ref) or Name (retire_tag) and the ETag the compare-and-swap expects.
	Native string `json:"native,omitempty"`
	Name   string `json:"name,omitempty"`
	ETag   string `json:"etag,omitempty"`
	Branch string `json:"branch,omitempty"` // the logical branch of a ref write (its fence names it)
	// Landed is the operation's outcome when this write lands and ends it (for the
	// reconciler); "" when the write is not the operation's last (a restore's backup tag).
	Landed outcome.Outcome `json:"landed,omitempty"`
	// Subject names what the write writes (a native name, a commit id, a tag name), for
	// people, so workflow code never decodes the bytes.
	Subject string `json:"subject,omitempty"`
}

// Describe names the write for people: phases, logs, the ledger's waiting column.
func (w WriteSpec) Describe() string {
	subject := w.Subject
	if subject == "" && (w.Kind == WriteRetireRef || w.Kind == WriteRetireTag) {
		subject = w.Native + w.Name // a retire names one of them
	}
	what := cmp.Or(map[WriteKind]string{WriteRef: "ref put", WriteTag: "tag put",
		WriteRetireRef: "retire", WriteRetireTag: "retire of tag", WritePublish: "commit publish"}[w.Kind], string(w.Kind)+" write")
	if subject == "" {
		return what
	}
	return what + " of " + subject
}

// WriteState is what a write step proved about its write.
type WriteState string

// The verdicts. Refused is definitive only for a write none of whose earlier attempts may
// still land (the kernel knows which); Ambiguous never is.
const (
	Landed WriteState = "landed" // this operation's bytes are stored; the write happened
	// Other: another writer's bytes hold the key, or the branch moved past the commit's
	// seq: this write never lands.
	Other     WriteState = "other"
	Fenced    WriteState = "fenced"    // a fence holds the key: this write never lands
	Refused   WriteState = "refused"   // the store definitely refused this request; it applied nothing
	Ambiguous WriteState = "ambiguous" // the outcome is unknown; the write may still land
	Invalid   WriteState = "invalid"   // the bytes are not a valid object of their kind
	// NotOwner: the operation's ledger row is not this run's any more (the reconciler took
	// it over): the run must stop writing.
	NotOwner WriteState = "not_owner"
)

// Definitive reports whether the verdict settles the write whatever came before it.
func (s WriteState) Definitive() bool {
	return s == Landed || s == Other || s == Fenced || s == Invalid || s == NotOwner
}

// Verdict is what a write, read-back or fence step proved.
type Verdict struct {
	State   WriteState
	Message string
	// Equivalent: a tag write found another operation's live tag of the same commit (Landed).
	Equivalent bool
	Commit     string // the commit the tag now at the key names (tag writes)
	// Recorded: the step also recorded the operation's end (a landed ref finishes the create,
	// a landed publish the write, merge or restore it ends).
	Recorded bool
}

// WriteInput is the input of Write, ReadBack and Fence.
type WriteInput struct {
	Owner Owner
	Spec  WriteSpec
	// Attempt is 0 for the first put (which records Spec as pending first), then counts re-issues.
	Attempt int
	Reason  string // why a fence is put (for the fence's bytes and the logs)
	// PendingRecorded: the step before recorded Spec as the pending write (a create's
	// prepare), so the first attempt only checks that the row is still this run's.
	PendingRecorded bool
	// StepRetried: earlier executions of this step (local attempts) may have sent the write;
	// an activity retry is known from its attempt number.
	StepRetried bool
	// Result, when set, is the operation's result should the write land; a step that
	// records the operation's end with the landing (a create's ref, a commit's publish)
	// records it too.
	Result json.RawMessage `json:",omitempty"`
}

// Write sends a write, or re-issues it, and says what its answer proves; the first attempt
// records it as the operation's pending write before sending it. A commit is sent only
// while its tree's head is its first parent: behind a moved head it is Other, never a
// refill of a key cleanup emptied.
func (a *Activities) Write(ctx context.Context, in WriteInput) (Verdict, error) {
	if in.Attempt == 0 {
		record := a.recordPending
		if in.PendingRecorded {
			record = a.checkPending
		}
		if v, err := record(ctx, in); err != nil || v.State != "" {
			return v, err
		}
	}
	commitKey, putsCommit := commitKeyOf(in.Spec)
	var ambiguous atomic.Bool
	if putsCommit {
		ctx = graph.WithAmbiguousPuts(ctx, func(key string) {
			if key == commitKey {
				ambiguous.Store(true)
			}
		})
	}
	v, err := a.issue(ctx, in)
	if putsCommit && (ambiguous.Load() || in.StepRetried || retriedAttempt(ctx)) {
		// A put of the commit may still be delivered after cleanup emptied the key, putting the
		// commit back pinning versions already gone: its pin outlives the operation instead.
		if herr := a.holdForLatePut(ctx, in.Owner, commitKey); herr != nil {
			return Verdict{}, herr
		}
	}
	if err != nil {
		return v, err
	}
	if v.State == Refused && (in.StepRetried || retriedAttempt(ctx)) {
		// An earlier execution of the step may have sent the write, which may still land.
		v = Verdict{State: Ambiguous, Message: "refused, but an earlier attempt of this step may still land: " + v.Message}
	}
	a.logVerdict(ctx, in, "write", v)
	if v.State == Landed && in.Spec.Kind != WriteRef && in.Spec.Landed != "" && len(in.Result) > 0 {
		// The write's landing ends the operation (a commit's publish, a retire): its end is
		// recorded now, as the kernel's finish would record it, and the kernel runs no finish
		// step. Not recorded (the row is not this run's, or the ledger did not answer), the
		// finish step records it. A ref put records its end with its witness (refIsOurs).
		fin, err := a.Finish(ctx, FinishInput{Owner: in.Owner, Outcome: in.Spec.Landed, Graph: in.Spec.Graph, Result: in.Result})
		v.Recorded = err == nil && fin.Owned
	}
	return v, nil
}

// commitKeyOf returns the key of the commit a publish puts: content-addressed, so a late put
// of it can only write the same bytes (docs/format.md, "Why no commit key can be refilled").
func commitKeyOf(w WriteSpec) (string, bool) {
	if w.Kind != WritePublish {
		return "", false
	}
	c, err := format.DecodeCommit(w.Body)
	if err != nil {
		return "", false
	}
	return format.CommitIDKey(w.Graph, c.ID), true
}

// holdForLatePut keeps the operation's pin of a commit key past its finish
// (catalog.PinsHoldForLatePut), on a context a cancelled step does not cancel.
func (a *Activities) holdForLatePut(ctx context.Context, o Owner, key string) error {
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err := a.Catalog.PinsHoldForLatePut(hctx, catalog.PinsHoldForLatePutParams{OpID: o.OpID, Owner: o.Run,
		Pin: catalog.Pin{Kind: catalog.ObjectCommit, Key: key}})
	// Not this run's row, or finished: its owner decides. Or a running cleanup condemned the
	// key: the commit was garbage before this re-issue, and so is a late delivery.
	if err != nil && !errors.Is(err, catalog.ErrNotOwner) && !errors.Is(err, catalog.ErrStateConflict) &&
		!errors.Is(err, catalog.ErrNotFound) && !errors.Is(err, catalog.ErrCondemned) {
		return fmt.Errorf("hold %s for a late put: %w", key, err)
	}
	return nil
}

// retriedAttempt reports whether ctx is an activity's (or local activity's) retry.
func retriedAttempt(ctx context.Context) bool {
	return activity.IsActivity(ctx) && activity.GetInfo(ctx).Attempt > 1
}

// recordPending records in.Spec as the operation's pending write.
func (a *Activities) recordPending(ctx context.Context, in WriteInput) (Verdict, error) {
	err := a.Catalog.InTx(ctx, func(tx pgx.Tx) error { return a.recordPendingTx(ctx, tx, in.Owner, in.Spec) })
	switch {
	case errors.Is(err, catalog.ErrNotOwner), errors.Is(err, catalog.ErrStateConflict), errors.Is(err, catalog.ErrNotFound):
		return Verdict{State: NotOwner, Message: err.Error()}, nil
	case err != nil:
		return Verdict{}, fmt.Errorf("record pending write: %w", err)
	}
	return Verdict{}, nil
}

// checkPending is recordPending for a write the step before recorded: a read, not a commit.
// The row must still be this run's and unfinished (NotOwner otherwise); a pending write
// other than in.Spec is recorded after all.
func (a *Activities) checkPending(ctx context.Context, in WriteInput) (Verdict, error) {
	op, err := a.Catalog.OperationGet(ctx, catalog.OperationGetParams{ID: in.Owner.OpID})
	switch {
	case errors.Is(err, catalog.ErrNotFound):
		return Verdict{State: NotOwner, Message: err.Error()}, nil
	case err != nil:
		return Verdict{}, fmt.Errorf("read operation: %w", err)
	case op.OwnerRun != in.Owner.Run:
		return Verdict{State: NotOwner, Message: (&catalog.NotOwnerError{ID: op.ID, Owner: op.OwnerRun, Caller: in.Owner.Run}).Error()}, nil
	case op.State == catalog.OperationDone:
		return Verdict{State: NotOwner, Message: fmt.Sprintf("operation %s is finished (%s)", op.ID, op.Outcome)}, nil
	}
	if recorded, ok := pendingSpec(op); ok && sameWrite(recorded, in.Spec) {
		return Verdict{}, nil
	}
	return a.recordPending(ctx, in)
}

func sameWrite(a, b WriteSpec) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}

func (a *Activities) issue(ctx context.Context, in WriteInput) (Verdict, error) {
	do, ok := map[WriteKind]writeStep{WriteRef: a.putRef, WriteTag: a.putTag, WriteRetireRef: a.retireRef,
		WriteRetireTag: a.retireTag, WritePublish: a.putPublish}[in.Spec.Kind]
	if !ok {
		return Verdict{State: Invalid, Message: "unknown write kind " + string(in.Spec.Kind)}, nil
	}
	return do(ctx, in)
}

// ReadBack reads the key a write names and says what it holds, without writing.
func (a *Activities) ReadBack(ctx context.Context, in WriteInput) (Verdict, error) {
	return a.settle(ctx, in, "read back", map[WriteKind]writeStep{
		WriteRef: a.readRef, WriteTag: a.readTag, WritePublish: a.readPublish})
}

// Fence makes sure a write can never land (a fence ref at a ref's key, a rewrite of a
// publish's ref, a retired tag at a tag's key), or proves that it did (Landed). Refused or
// Ambiguous: the fence did not land (the kernel parks the operation and tries again).
func (a *Activities) Fence(ctx context.Context, in WriteInput) (Verdict, error) {
	return a.settle(ctx, in, "fence", map[WriteKind]writeStep{
		WriteRef: a.fenceRef, WriteTag: a.fenceTag, WritePublish: a.fencePublish})
}

type writeStep func(context.Context, WriteInput) (Verdict, error)

// settle runs byKind's step for in's write kind and logs its verdict. A retire is read back
// and fenced by its re-issue: graph.RetireRef reads first and sends nothing when our
// retired bytes are there, or the object changed.
func (a *Activities) settle(ctx context.Context, in WriteInput, step string, byKind map[WriteKind]writeStep) (Verdict, error) {
	do, ok := byKind[in.Spec.Kind]
	if !ok {
		do = a.issue
	}
	v, err := do(ctx, in)
	if err == nil {
		a.logVerdict(ctx, in, step, v)
	}
	return v, err
}

// putVerdict classifies a put's error; no state: it needs a read-back.
func putVerdict(err error) Verdict {
	switch storage.CodeOf(err) {
	case storage.CodeRefused, storage.CodeInvalidKey, storage.CodeInvalidArgument:
		return Verdict{State: Refused, Message: err.Error()}
	case storage.CodePreconditionFailed:
		return Verdict{}
	}
	return Verdict{State: Ambiguous, Message: err.Error()}
}

// storeVerdict is the verdict of a store's ambiguous or refused answer; any other error is
// returned, wrapped with what, to be retried.
func storeVerdict(err error, what string) (Verdict, error) {
	switch {
	case errors.Is(err, storage.ErrAmbiguous):
		return Verdict{State: Ambiguous, Message: err.Error()}, nil
	case errors.Is(err, storage.ErrRefused), errors.Is(err, storage.ErrInvalidKey):
		return Verdict{State: Refused, Message: err.Error()}, nil
	}
	return Verdict{}, fmt.Errorf("%s: %w", what, err)
}

func (a *Activities) putTag(ctx context.Context, in WriteInput) (Verdict, error) {
	put, err := graph.PutTag(ctx, a.Store, in.Spec.Graph, in.Spec.Body)
	switch {
	case err == nil:
		return tagVerdict(put.Outcome, put.Tag), nil
	case errors.Is(err, graph.ErrInvalid):
		return Verdict{State: Invalid, Message: err.Error()}, nil
	case isUnreadableObject(err):
		return Verdict{State: Other, Message: err.Error()}, nil
	}
	return storeVerdict(err, "put tag")
}

func tagVerdict(o graph.TagPutOutcome, t format.Tag) Verdict {
	v := Verdict{Commit: t.Commit.String()}
	switch {
	case o == graph.TagCreated:
		v.State = Landed
	case o == graph.TagExists:
		v.State, v.Equivalent = Landed, true
		v.Message = fmt.Sprintf("tag %q already names %s (operation %s)", t.Name, t.Commit, t.Op)
	case t.State == format.TagRetired:
		v.State = Other
		v.Message = fmt.Sprintf("tag %q was deleted by operation %s; a tag name is never reused", t.Name, t.RetiredOp)
	default:
		v.State = Other
		v.Message = fmt.Sprintf("tag %q already names another commit, %s (operation %s); tags are immutable", t.Name, t.Commit, t.Op)
	}
	return v
}

func (a *Activities) readTag(ctx context.Context, in WriteInput) (Verdict, error) {
	w := in.Spec
	want, err := format.DecodeTag(w.Body)
	if err != nil {
		return Verdict{State: Invalid, Message: err.Error()}, nil
	}
	obj, err := a.Store.Get(ctx, format.TagKey(w.Graph, want.Name))
	switch {
	case errors.Is(err, storage.ErrNotFound):
		return Verdict{State: Ambiguous, Message: "tag " + want.Name + " not stored yet"}, nil
	case err != nil:
		return Verdict{}, fmt.Errorf("read tag %s: %w", want.Name, err)
	case bytes.Equal(obj.Body, w.Body):
		return Verdict{State: Landed, Commit: want.Commit.String()}, nil
	}
	have, err := format.DecodeTag(obj.Body)
	if err != nil {
		return Verdict{State: Other, Message: err.Error()}, nil
	}
	if have.State == format.TagRetired && have.Op == want.Op && have.RetiredOp == want.Op {
		return Verdict{State: Fenced, Message: "our fence holds tag " + want.Name, Commit: have.Commit.String()}, nil
	}
	o := graph.TagTaken
	if have.State == format.TagLive && have.Commit == want.Commit {
		o = graph.TagExists
	}
	return tagVerdict(o, have), nil
}

func (a *Activities) fenceTag(ctx context.Context, in WriteInput) (Verdict, error) {
	w := in.Spec
	want, err := format.DecodeTag(w.Body)
	if err != nil {
		return Verdict{State: Invalid, Message: err.Error()}, nil
	}
	fence := want
	fence.State, fence.RetiredOp = format.TagRetired, want.Op
	body, err := format.EncodeTag(fence)
	if err != nil {
		return Verdict{State: Invalid, Message: err.Error()}, nil
	}
	if _, err = graph.PutIfAbsent(ctx, a.Store, format.TagKey(w.Graph, want.Name), body); err == nil {
		return a.readTag(ctx, in)
	}
	return storeVerdict(err, "fence tag "+want.Name)
}

func (a *Activities) retireRef(ctx context.Context, in WriteInput) (Verdict, error) {
	w := in.Spec
	_, err := graph.RetireRef(ctx, a.Store, w.Graph, w.Native, w.ETag, in.Owner.OpID)
	var changed *graph.RefChangedError
	if errors.As(err, &changed) && changed.Found != format.RefLive {
		// Retired or fenced by another operation, or gone: it can never be live again.
		return Verdict{State: Fenced, Message: changed.Error()}, nil
	}
	if why, ok := retireRefused(err); ok {
		return Verdict{State: Other, Message: why}, nil
	}
	if err != nil {
		return storeVerdict(err, "retire "+w.Native)
	}
	// The retire landed: the witness follows, under the owner's guard. Recoverable: the
	// reconciler re-issues the pending retire (finding it landed) and records it again.
	err = a.Catalog.InTxRecoverable(ctx, func(tx pgx.Tx) error {
		if _, err := a.Catalog.OperationLockOwnedTx(ctx, tx, in.Owner.OpID, in.Owner.Run); err != nil {
			return err
		}
		_, err := a.retireWitnessTx(ctx, tx, w.Graph, w.Native)
		return err
	})
	if err != nil {
		if errors.Is(err, catalog.ErrNotOwner) {
			return Verdict{State: Landed, Message: "retired; the witness is another run's to record"}, nil
		}
		return Verdict{}, err
	}
	return Verdict{State: Landed}, nil
}

func (a *Activities) retireTag(ctx context.Context, in WriteInput) (Verdict, error) {
	w := in.Spec
	_, err := graph.RetireTag(ctx, a.Store, w.Graph, w.Name, w.ETag, in.Owner.OpID)
	switch {
	case err == nil:
		return Verdict{State: Landed}, nil
	case errors.Is(err, graph.ErrTagChanged), errors.Is(err, graph.ErrInvalid), isUnreadableObject(err):
		return Verdict{State: Other, Message: err.Error()}, nil
	}
	return storeVerdict(err, "retire tag "+w.Name)
}

// claimed is what claim found: whether the run owns the row, and an outcome that ends the
// operation before anything is written (conflict, or the outcome of a finished operation).
type claimed struct {
	op      catalog.Operation
	owned   bool
	outcome outcome.Outcome
	message string
	// recorded is the result the claiming run recorded when it finished the operation:
	// set when the row is that run's and done (its steps ran again after its end).
	recorded json.RawMessage
}

// claim records an operation as this run's (OperationInsert with Owner), in tx when one is
// given; another request's or workflow's row is left alone.
func (a *Activities) claim(ctx context.Context, tx pgx.Tx, p catalog.OperationInsertParams) (claimed, error) {
	insert := a.Catalog.OperationInsert
	if tx != nil {
		insert = func(ctx context.Context, p catalog.OperationInsertParams) (catalog.Operation, error) {
			return a.Catalog.OperationInsertTx(ctx, tx, p)
		}
	}
	op, err := insert(ctx, p)
	var owned *catalog.OwnedError
	switch {
	case errors.As(err, &owned):
		return claimed{outcome: outcome.Conflict, message: fmt.Sprintf("operation %s is being run by workflow %s; wait for it with `graft op wait %s`",
			p.ID, owned.WorkflowID, p.ID)}, nil
	case errors.Is(err, catalog.ErrDuplicate):
		return claimed{outcome: outcome.Conflict, message: reusedMessage(p.ID, err)}, nil
	case err != nil:
		return claimed{}, fmt.Errorf("record operation: %w", err)
	}
	c := claimed{op: op, owned: op.OwnerRun == p.Owner && op.State != catalog.OperationDone}
	if op.State == catalog.OperationDone {
		c.outcome = outcome.Outcome(op.Outcome)
		if op.Outcome == catalog.OutcomeFailed {
			c.outcome = outcome.Conflict
		}
		c.message = fmt.Sprintf("operation %s already finished (%s): %s", p.ID, op.Outcome, op.Error)
		if recordedBy(op, p.Owner) {
			c.recorded, c.message = op.Result, op.Error
		}
	}
	return c, nil
}

// recordedBy reports whether run finished op and recorded its result: a step of run
// that finds it is running again after that end.
func recordedBy(op catalog.Operation, run string) bool {
	return op.State == catalog.OperationDone && run != "" && op.OwnerRun == run && len(op.Result) > 0
}

// reusedMessage is the conflict of an operation id the ledger holds for another request
// (docs/outcomes.md): it names the id and what differs.
func reusedMessage(opID string, err error) string {
	msg := fmt.Sprintf("operation id %q was already used for a different request", opID)
	var reused *catalog.OperationReusedError
	if errors.As(err, &reused) && len(reused.Differences) > 0 {
		msg += ": " + strings.Join(reused.Differences, "; ")
	}
	return msg
}

// ProgressInput is the input of Progress.
type ProgressInput struct {
	Owner          Owner
	Phase, Waiting string // where the operation stands and what it waits for
	// InDoubt records the operation in_doubt (and, with Native, the create's witness).
	InDoubt        bool
	Graph, Native  string
	SettleAttempts int // when positive, the re-issues so far
}

// Progress records where an operation stands, guarded by Owner; a row the run no longer
// owns is left alone.
func (a *Activities) Progress(ctx context.Context, in ProgressInput) error {
	_, err := a.Catalog.OperationGet(ctx, catalog.OperationGetParams{ID: in.Owner.OpID})
	if errors.Is(err, catalog.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read operation: %w", err)
	}
	ignored := func(err error) bool {
		return errors.Is(err, catalog.ErrNotOwner) || errors.Is(err, catalog.ErrStateConflict)
	}
	if in.InDoubt && in.Native != "" {
		err := a.Catalog.InTx(ctx, func(tx pgx.Tx) error {
			if _, err := a.Catalog.OperationLockOwnedTx(ctx, tx, in.Owner.OpID, in.Owner.Run); err != nil {
				return err
			}
			// A create's witness is intent until it settles (cloned for creates an older
			// worker began): either moves to in_doubt.
			set := catalog.IncarnationSetStateParams{Graph: in.Graph, Native: in.Native,
				From: catalog.IncarnationIntent, To: catalog.IncarnationInDoubt}
			_, err := a.Catalog.IncarnationSetStateTx(ctx, tx, set)
			var conflict *catalog.StateConflictError
			if errors.As(err, &conflict) && conflict.Current == string(catalog.IncarnationCloned) {
				set.From = catalog.IncarnationCloned
				_, err = a.Catalog.IncarnationSetStateTx(ctx, tx, set)
			}
			return err
		})
		if err != nil && !ignored(err) {
			return fmt.Errorf("witness in_doubt: %w", err)
		}
	}
	_, err = a.Catalog.OperationProgress(ctx, catalog.OperationProgressParams{ID: in.Owner.OpID, Owner: in.Owner.Run,
		Phase: in.Phase, Waiting: in.Waiting, InDoubt: in.InDoubt, SettleAttempts: in.SettleAttempts})
	if err != nil && !ignored(err) {
		return fmt.Errorf("record progress: %w", err)
	}
	return nil
}

// FinishInput is the input of Finish.
type FinishInput struct {
	Owner Owner
	Kind  catalog.OperationKind
	// Outcome is the definitive outcome; "" (the ledger's failed) when the workflow gave up on
	// an infrastructure failure before any storage effect.
	Outcome outcome.Outcome
	Message string
	// Graph, Branch and Native name a create's incarnation: its witness goes live on
	// created, and every unsettled witness of the operation goes unpublished otherwise.
	Graph, Branch, Native string
	// Result is the operation's result (JSON), recorded with the outcome.
	Result json.RawMessage `json:",omitempty"`
}

// FinishResult is the output of Finish.
type FinishResult struct {
	Owned bool // the row was this run's and now records the outcome
}

// Finish records an operation's definitive outcome, settles its witnesses and releases its
// pins in one transaction guarded by Owner. The kernel only finishes once nothing the
// operation sent may still land.
func (a *Activities) Finish(ctx context.Context, in FinishInput) (FinishResult, error) {
	out := cmp.Or(catalog.Outcome(in.Outcome), catalog.OutcomeFailed)
	var settled []catalog.IncarnationSettleResult
	var before catalog.Operation
	err := a.Catalog.InTx(ctx, func(tx pgx.Tx) error {
		settled = nil
		var err error
		if before, err = a.Catalog.OperationLockOwnedTx(ctx, tx, in.Owner.OpID, in.Owner.Run); err != nil {
			return err
		}
		if finishDerivable(before, in.Outcome) {
			if err := a.Catalog.MarkRecoverableTx(ctx, tx); err != nil {
				return err
			}
		}
		incs, err := a.Catalog.IncarnationListByOpTx(ctx, tx, catalog.IncarnationListByOpParams{OpID: in.Owner.OpID})
		if err != nil {
			return err
		}
		for _, inc := range incs {
			if inc.State.Settled() {
				continue
			}
			to := catalog.IncarnationUnpublished
			if out == catalog.OutcomeCreated && inc.Native == in.Native {
				to = catalog.IncarnationLive
			}
			if inc.State == catalog.IncarnationInDoubt && to == catalog.IncarnationUnpublished &&
				in.Outcome != outcome.Unpublished && in.Outcome != outcome.Conflict {
				// Only a fence settles an in-doubt ref; the kernel fences before it finishes.
				return fmt.Errorf("finish %s: witness %s is in doubt and was not fenced", in.Owner.OpID, inc.Native)
			}
			s, err := a.Catalog.IncarnationSettleTx(ctx, tx, catalog.IncarnationSettleParams{Graph: inc.Graph, Native: inc.Native, To: to})
			if err != nil {
				return err
			}
			settled = append(settled, s)
		}
		_, err = a.Catalog.OperationFinishTx(ctx, tx, catalog.OperationFinishParams{
			ID: in.Owner.OpID, Outcome: out, Error: in.Message, Owner: in.Owner.Run, Result: in.Result})
		return err
	})
	switch {
	case errors.Is(err, catalog.ErrNotOwner), errors.Is(err, catalog.ErrNotFound):
		return FinishResult{}, nil
	case errors.Is(err, catalog.ErrStateConflict):
		return FinishResult{Owned: true}, nil // finished before (a retried finish)
	case err != nil:
		return FinishResult{}, fmt.Errorf("finish operation: %w", err)
	}
	for _, s := range settled {
		a.observeWitnessSettled(s)
	}
	kind := cmp.Or(in.Kind, before.Kind)
	// A create's doubt is its witness's, reported as the witness settles.
	if before.State == catalog.OperationInDoubt && kind != catalog.OpCreateBranch && a.Observer != nil {
		a.Observer.Settled(string(kind), a.now().Sub(before.UpdatedAt))
	}
	a.observeFinished(string(kind), string(out))
	return FinishResult{Owned: true}, nil
}

// finishDerivable reports whether the reconciler would record out again if this finish
// were lost (the pending write's landing ends the operation with out, and out is reported
// only once it landed): such a finish commits as catalog.InTxRecoverable.
func finishDerivable(op catalog.Operation, out outcome.Outcome) bool {
	spec, ok := pendingSpec(op)
	return ok && out != "" && spec.Landed == out
}

func (a *Activities) logger(ctx context.Context) sdklog.Logger {
	if activity.IsActivity(ctx) {
		return activity.GetLogger(ctx)
	}
	if a.Logger != nil {
		return a.Logger
	}
	return sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))
}

// logVerdict logs every answer of a write that is not plain success.
func (a *Activities) logVerdict(ctx context.Context, in WriteInput, step string, v Verdict) {
	if v.State == Landed && step == "write" && in.Attempt == 0 {
		return
	}
	a.logger(ctx).Info("graft "+step+" verdict", "op_id", in.Owner.OpID, "write", in.Spec.Describe(),
		"attempt", in.Attempt, "verdict", string(v.State), "detail", v.Message)
}
