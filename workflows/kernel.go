package workflows

import (
	"cmp"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog"
	"github.com/graftworks/graft/internal/searchattr"
	"github.com/graftworks/graft/workflows/contract"
)

// The operation kernel: every graft operation but cleanup runs through one opRun. The
// operation's own code is its phases (prepare, plan, the writes it issues); the kernel owns
// how each step runs, how a write is settled (write, settle, fence), cancellation (run),
// and the one finish that records every end in the ledger (finish, outcomeError).

// Timing of the kernel's settling (docs/workflows.md).
var (
	// RereadPauses are the pauses before each read-back of a write whose answer was
	// ambiguous, before the operation is recorded in doubt.
	RereadPauses = []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, 1600 * time.Millisecond}
	// SettleBackoff is the first pause between settle attempts; it doubles up to SettleBackoffMax.
	SettleBackoff    = 2 * time.Second
	SettleBackoffMax = time.Minute
	// MaxSettleAttempts bounds re-issues of an in-doubt write; after that the kernel
	// settles it by fencing, as an operator's abandon would.
	MaxSettleAttempts = 30
	// ParkBackoffMax bounds the pause between fence attempts of a parked operation
	// (one whose fence the store refused or did not answer).
	ParkBackoffMax = 10 * time.Minute
)

// The signal and query every graft operation workflow takes. graft.abandon fences an
// in-doubt write now instead of waiting for it to land.
const (
	AbandonSignalName = "graft.abandon"
	StatusQueryName   = "graft.status"
)

// AbandonRequest is the payload of graft.abandon.
type AbandonRequest struct {
	Reason string `json:"reason,omitempty"`
}

// OperationStatus answers graft.status while an operation runs. Outcome is in_doubt
// while a write settles; fields an operation does not report are empty.
type OperationStatus struct {
	// Phase is the step the operation is in (docs/workflows.md).
	Phase   string          `json:"phase"`
	Outcome outcome.Outcome `json:"outcome,omitempty"`
	OpID    string          `json:"op_id"`
	// Native is a create's incarnation; Commit the commit a write, merge or restore is
	// putting; Version a table write's version.
	Native  string `json:"native,omitempty"`
	Commit  string `json:"commit,omitempty"`
	Version string `json:"version,omitempty"`
	// Pending says what the operation waits for, for a person.
	Pending        string `json:"pending,omitempty"`
	SettleAttempts int    `json:"settle_attempts,omitempty"`
	// Wait is what a merge into a protected branch waits for.
	Wait *contract.MergeWait `json:"wait,omitempty"`
}

// InDoubt reports whether the status says a write may still land.
func (s OperationStatus) InDoubt() bool { return s.Outcome == outcome.InDoubt }

// result is a workflow's result struct: the kernel records the end in it.
type result interface {
	setEnd(out outcome.Outcome, message string)
}

// settledResult is the result of an operation that ends with a write: it counts the
// write's settle re-issues.
type settledResult interface {
	result
	setSettleAttempts(n int)
}

// landedAs returns the result res will be should the write now issued land with out, for
// writeLanding: the step whose landing ends the operation records it as the end.
func landedAs[R any, P interface {
	*R
	settledResult
}](r *opRun, res P, out outcome.Outcome) func() json.RawMessage {
	return func() json.RawMessage {
		landed := *res
		P(&landed).setEnd(out, "")
		P(&landed).setSettleAttempts(r.status.SettleAttempts)
		b, _ := json.Marshal(P(&landed))
		return b
	}
}

// ending is how an operation's phases ended; native is a create's live incarnation.
type ending struct {
	out      outcome.Outcome
	msg      string
	recorded bool // a step recorded the end in the ledger already
	native   string
}

func end(out outcome.Outcome, msg string) (ending, error) { return ending{out: out, msg: msg}, nil }

// opRun is one operation's run through the kernel.
type opRun struct {
	kind    catalog.OperationKind
	owner   activities.Owner
	wfID    string // the workflow id, which prepare steps record with owner.Run
	graph   string
	branch  string
	subject string
	status  OperationStatus
	// attemptsRecorded: the settle attempts the ledger has.
	attemptsRecorded int
	// foreign: the operation id is another request's: the kernel never writes its row.
	foreign bool
	// recorded, when set, is the result this run recorded when it finished, found by a
	// step that ran again after the end was recorded (claimed).
	recorded json.RawMessage
	// pending is a write issued whose verdict is not definitive yet: what a cancellation
	// or an infrastructure failure must settle first.
	pending *activities.WriteSpec
	// onFenced runs after pending was fenced on a cancellation (a create reclaims its clone).
	onFenced func(ctx workflow.Context) error
	// drive, while set, is an effect step that settles by running to its end (an init,
	// whose every byte is fixed by its operation id): what a cancellation or a failure
	// runs again, to the end, instead of fencing.
	drive    func(ctx workflow.Context) (ending, error)
	abandon  *AbandonRequest
	abandonC workflow.ReceiveChannel
	// planned: the operation's first plan step ran (a re-plan follows an effect).
	planned bool
	// pendingRecorded: the step before recorded the next write as the operation's pending
	// write; the write's first attempt only checks it (activities.WriteInput).
	pendingRecorded bool
	// cancelEnding, while set and no write is pending, is how a cancellation ends the
	// operation (a write waiting for its upload: abandoned).
	cancelEnding *ending
	// landedResult, when set, is the operation's result should the write now issued land:
	// a step that records the end with the write's landing records it too. Set only for
	// the span of that write (writeLanding).
	landedResult func() json.RawMessage
}

// runSpec names an operation for startOp.
type runSpec struct {
	opID                   string
	kind                   catalog.OperationKind
	operationAttr          string // GraftOperation; defaults to kind
	graph, branch, subject string
}

// startOp starts an operation's run: op id (the workflow id by default), owner (this
// run), the abandon signal, search attributes and the status query.
func startOp(ctx workflow.Context, s runSpec) *opRun {
	info := workflow.GetInfo(ctx)
	s.opID = cmp.Or(s.opID, info.WorkflowExecution.ID)
	r := &opRun{kind: s.kind, owner: activities.Owner{OpID: s.opID, Run: info.WorkflowExecution.RunID},
		wfID: info.WorkflowExecution.ID, graph: s.graph, branch: s.branch, subject: s.subject}
	r.status.OpID = s.opID
	r.abandonC = workflow.GetSignalChannel(ctx, AbandonSignalName)
	// The client sets these as it starts the run; a run started otherwise has them set here.
	// An upsert of what the start set would cost the server an event and a visibility write.
	have := workflow.GetTypedSearchAttributes(ctx)
	var attrs []temporal.SearchAttributeUpdate
	for _, kv := range []struct {
		key   temporal.SearchAttributeKeyKeyword
		value string
	}{{searchattr.Graph, s.graph}, {searchattr.Operation, cmp.Or(s.operationAttr, string(s.kind))}, {searchattr.Branch, s.branch}} {
		if got, ok := have.GetKeyword(kv.key); kv.value != "" && (!ok || got != kv.value) {
			attrs = append(attrs, kv.key.ValueSet(kv.value))
		}
	}
	if len(attrs) > 0 {
		_ = workflow.UpsertTypedSearchAttributes(ctx, attrs...)
	}
	// A valid handler under a name without the reserved "__" prefix is never refused.
	_ = workflow.SetQueryHandler(ctx, StatusQueryName, func() (OperationStatus, error) { return r.status, nil })
	return r
}

func (r *opRun) setPhase(ctx workflow.Context, phase, pending string) {
	r.status.Phase, r.status.Pending = phase, pending
	subject := r.subject
	if r.status.Native != "" {
		subject += " · " + r.status.Native
	}
	setDetails(ctx, phase, subject, pending)
}

func (r *opRun) log(ctx workflow.Context, msg string, kv ...any) {
	workflow.GetLogger(ctx).Info(msg, append([]any{"op_id", r.owner.OpID, "kind", string(r.kind)}, kv...)...)
}

// prepare runs an operation's prepare step (it claims the operation), showing pending.
func (r *opRun) prepare(ctx workflow.Context, pending, summary string, fn, in, out any) error {
	r.setPhase(ctx, "prepare", pending)
	if err := beforeEffect(ctx, "prepare: "+summary, fn, in, out); err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	return nil
}

// step runs a step that may follow a storage effect until it is answered (untilAnsweredStep).
//
// Once the operation is in doubt every step runs as an ordinary activity: a caller
// waiting on it must see in_doubt, and a local activity holds the workflow task, so a
// status query asked while a re-issue or a fence hangs on the store would wait for it.
func (r *opRun) step(ctx workflow.Context, summary string, fn, in, out any) error {
	if r.status.InDoubt() {
		return answerableStep(ctx, summary, fn, in, out)
	}
	return untilAnsweredStep(ctx, summary, fn, in, out, "op_id", r.owner.OpID, "kind", string(r.kind))
}

// claimed takes what a step that claims the operation found: whether the row is this
// run's, and the result the run recorded if the row is this run's and finished already.
func (r *opRun) claimed(owned bool, recorded json.RawMessage) {
	r.foreign, r.recorded = !owned, recorded
}

// writeInput is the input of a step that issues, reads back or fences w.
func (r *opRun) writeInput(w activities.WriteSpec, set ...func(*activities.WriteInput)) activities.WriteInput {
	in := activities.WriteInput{Owner: r.owner, Spec: w}
	if r.landedResult != nil {
		in.Result = r.landedResult()
	}
	for _, f := range set {
		f(&in)
	}
	return in
}

// write issues w and drives it to a definitive verdict: Landed, Other, Fenced or Invalid
// — or Refused, when the store definitely refused its first attempt (nothing of it can
// land). An ambiguous answer is read back after short pauses; still unknown, it settles.
func (r *opRun) write(ctx workflow.Context, w activities.WriteSpec) (activities.Verdict, error) {
	what := w.Describe()
	r.pending = &w
	in := r.writeInput(w)
	in.PendingRecorded = r.pendingRecorded
	r.pendingRecorded = false
	r.setPhase(ctx, "write", what)
	var v activities.Verdict
	if err := r.step(ctx, "write: "+what, acts.Write, in, &v); err != nil {
		return v, fmt.Errorf("%s: %w", what, err)
	}
	if v.State != activities.Ambiguous {
		if v.State != activities.Landed {
			r.log(ctx, "graft write answered", "write", what, "verdict", string(v.State), "detail", v.Message)
		}
		r.settled(v)
		return v, nil
	}
	r.log(ctx, "graft write answered ambiguously; reading back", "write", what, "detail", v.Message)
	for i, pause := range RereadPauses {
		r.setPhase(ctx, "reread", fmt.Sprintf("%s answered ambiguously (%s); read-back %d of %d after %s", what, v.Message, i+1, len(RereadPauses), pause))
		if err := workflow.NewTimerWithOptions(ctx, pause, workflow.TimerOptions{Summary: "pause before read-back"}).Get(ctx, nil); err != nil {
			return v, err
		}
		var rb activities.Verdict
		if err := r.step(ctx, "read back: "+what, acts.ReadBack, in, &rb); err != nil {
			return rb, fmt.Errorf("read back %s: %w", what, err)
		}
		if rb.State.Definitive() {
			r.log(ctx, "graft read-back settled the write", "write", what, "verdict", string(rb.State))
			r.settled(rb)
			return rb, nil
		}
	}
	v, err := r.settle(ctx, w, v)
	if err == nil {
		r.settled(v)
	}
	return v, err
}

// writeLanding is write for a write whose landing ends the operation: while it runs, its
// steps carry landed (r.landedResult), the result it ends with, for the step that sees it
// land to record as the end. A nil landed is write.
func (r *opRun) writeLanding(ctx workflow.Context, w activities.WriteSpec, landed func() json.RawMessage) (activities.Verdict, error) {
	r.landedResult = landed
	defer func() { r.landedResult = nil }()
	return r.write(ctx, w)
}

// writeIn is writeLanding in phase, showing pending, counting the settle attempts into
// attempts.
func (r *opRun) writeIn(ctx workflow.Context, phase, pending string, w activities.WriteSpec, landed func() json.RawMessage, attempts *int) (activities.Verdict, error) {
	r.setPhase(ctx, phase, pending)
	v, err := r.writeLanding(ctx, w, landed)
	*attempts = r.status.SettleAttempts
	return v, err
}

// settled clears the pending write once its verdict is definitive.
func (r *opRun) settled(v activities.Verdict) {
	if v.State.Definitive() || v.State == activities.Refused {
		r.pending = nil
	}
}

// settle records the operation in doubt and re-issues w, byte-identical, on a durable
// backoff until the store proves what happened, at most MaxSettleAttempts times; then, or
// on an operator's abandon, it fences. A refused re-issue proves nothing about the earlier
// attempt, so it does not end the settling.
func (r *opRun) settle(ctx workflow.Context, w activities.WriteSpec, v activities.Verdict) (activities.Verdict, error) {
	what := w.Describe()
	native := ""
	if w.Kind == activities.WriteRef {
		native = r.status.Native
	}
	if err := r.step(ctx, "record in_doubt", acts.Progress, activities.ProgressInput{Owner: r.owner, Phase: "settle",
		Waiting: what + " in doubt: " + v.Message, InDoubt: true, Graph: r.graph, Native: native}, nil); err != nil {
		return v, fmt.Errorf("record in doubt: %w", err)
	}
	r.status.Outcome = outcome.InDoubt
	_ = workflow.UpsertTypedSearchAttributes(ctx, searchattr.Outcome.ValueSet(string(outcome.InDoubt)))
	r.log(ctx, "graft write in doubt; settling by re-issue", "write", what, "max_reissues", MaxSettleAttempts)
	backoff := SettleBackoff
	for attempt := 1; ; attempt++ {
		r.setPhase(ctx, "settle", fmt.Sprintf("%s in doubt (%s): next re-issue in %s, or signal %s to fence", what, v.Message, backoff, AbandonSignalName))
		r.waitOrAbandon(ctx, backoff)
		if ctx.Err() != nil {
			return v, temporal.NewCanceledError()
		}
		backoff = min(2*backoff, SettleBackoffMax)
		if r.abandoned() {
			r.log(ctx, "graft settle: abandoned by operator; fencing", "write", what, "reason", r.abandon.Reason)
			return r.fence(ctx, w, abandonedMessage(r.abandon.Reason))
		}
		if attempt > MaxSettleAttempts {
			r.log(ctx, "graft settle: re-issues exhausted; fencing", "write", what, "reissues", MaxSettleAttempts)
			return r.fence(ctx, w, fmt.Sprintf("%s still unknown after %d re-issues", what, MaxSettleAttempts))
		}
		r.status.SettleAttempts++
		r.setPhase(ctx, "settle", fmt.Sprintf("%s in doubt: re-issue %d of %d", what, attempt, MaxSettleAttempts))
		var err error
		if err = r.step(ctx, "settle: re-issue "+what, acts.Write, r.writeInput(w, func(in *activities.WriteInput) { in.Attempt = attempt }), &v); err != nil {
			return v, fmt.Errorf("settle %s: %w", what, err)
		}
		if v.State.Definitive() {
			r.log(ctx, "graft settle: re-issue settled the write", "write", what, "verdict", string(v.State), "reissues", attempt)
			r.leaveDoubt(ctx)
			return v, nil
		}
		if v.State == activities.Refused {
			r.log(ctx, "graft settle: re-issue refused; an earlier attempt may still land", "write", what, "detail", v.Message)
		}
	}
}

// leaveDoubt clears the in-doubt status of a settled write and records the re-issues so
// far in the ledger.
func (r *opRun) leaveDoubt(ctx workflow.Context) {
	r.status.Outcome = ""
	if r.status.SettleAttempts == r.attemptsRecorded {
		return
	}
	if r.step(ctx, "record settle attempts", acts.Progress, activities.ProgressInput{Owner: r.owner,
		SettleAttempts: r.status.SettleAttempts}, nil) == nil {
		r.attemptsRecorded = r.status.SettleAttempts
	}
}

// fence makes sure w can never land, or proves that it did. A fence the store refuses or
// does not answer parks the operation — in doubt, phase parked, visible — and is tried
// again on a durable backoff up to ParkBackoffMax: never a hot loop, never a guess.
func (r *opRun) fence(ctx workflow.Context, w activities.WriteSpec, reason string) (activities.Verdict, error) {
	what := w.Describe()
	backoff := SettleBackoff
	parked := false
	for {
		r.setPhase(ctx, "fence", "fencing the "+what+": "+reason)
		var v activities.Verdict
		if err := r.step(ctx, "fence: "+what, acts.Fence, r.writeInput(w, func(in *activities.WriteInput) { in.Reason = reason }), &v); err != nil {
			return v, fmt.Errorf("fence %s: %w", what, err)
		}
		if v.State.Definitive() {
			r.log(ctx, "graft fence settled the write", "write", what, "verdict", string(v.State), "detail", v.Message)
			r.leaveDoubt(ctx)
			return v, nil
		}
		waiting := fmt.Sprintf("fence of the %s did not land (%s: %s); next try in %s", what, v.State, v.Message, backoff)
		r.log(ctx, "graft fence did not land; parked", "write", what, "verdict", string(v.State), "detail", v.Message, "retry_in", backoff.String())
		if !parked {
			parked = true
			if err := r.step(ctx, "record parked", acts.Progress, activities.ProgressInput{Owner: r.owner, Phase: "parked",
				Waiting: waiting, InDoubt: true}, nil); err != nil {
				return v, fmt.Errorf("record parked: %w", err)
			}
			r.status.Outcome = outcome.InDoubt
			_ = workflow.UpsertTypedSearchAttributes(ctx, searchattr.Outcome.ValueSet(string(outcome.InDoubt)))
		}
		r.setPhase(ctx, "parked", waiting)
		if err := workflow.NewTimerWithOptions(ctx, backoff, workflow.TimerOptions{Summary: "parked: pause before fence retry"}).Get(ctx, nil); err != nil {
			return v, err
		}
		backoff = min(2*backoff, ParkBackoffMax)
	}
}

// abandoned reports whether an operator's abandon arrived (r.abandon holds it).
func (r *opRun) abandoned() bool {
	var req AbandonRequest
	if r.abandon == nil && r.abandonC.ReceiveAsync(&req) {
		r.abandon = &req
	}
	return r.abandon != nil
}

// waitOrAbandon sleeps d on a durable timer, waking early on an abandon signal.
func (r *opRun) waitOrAbandon(ctx workflow.Context, d time.Duration) {
	if r.abandoned() {
		return
	}
	tctx, cancel := workflow.WithCancel(ctx)
	defer cancel()
	sel := workflow.NewSelector(ctx)
	sel.AddFuture(workflow.NewTimerWithOptions(tctx, d, workflow.TimerOptions{Summary: "pause before settle re-issue"}), func(workflow.Future) {})
	sel.AddReceive(r.abandonC, func(c workflow.ReceiveChannel, more bool) {
		var req AbandonRequest
		c.Receive(ctx, &req)
		r.abandon = &req
	})
	sel.Select(ctx)
}

// run executes an operation's phases and ends it, whatever ends them: it settles a write
// still pending after a cancellation (the cancellation counts as an operator's abandon)
// or an infrastructure failure, records the end through finish, fills res, and returns
// the workflow's error in the shape of docs/workflows.md.
func (r *opRun) run(ctx workflow.Context, res result, body func(ctx workflow.Context) (ending, error)) error {
	e, err := body(ctx)
	if err == nil && r.recorded != nil && json.Unmarshal(r.recorded, res) == nil {
		// The operation's steps ran again after this run recorded its end (its worker died
		// before the workflow task completed): it reports the result it recorded. The row
		// is not this run's to write again (foreign), so finish only reports the end.
		r.finish(ctx, e, res)
		return outcomeError(e.out, e.msg, res)
	}
	if err == nil {
		res.setEnd(e.out, e.msg)
		r.finish(ctx, e, res)
		return outcomeError(e.out, e.msg, res)
	}
	cancelled := temporal.IsCanceledError(err) || ctx.Err() != nil
	fctx, e, reason := ctx, ending{msg: err.Error()}, "abandoned after a failure: "+err.Error()
	if cancelled {
		fctx, _ = workflow.NewDisconnectedContext(ctx)
		e.msg, reason = "cancelled: "+err.Error(), "cancelled"
	}
	if cancelled && r.pending == nil && r.cancelEnding != nil {
		e = *r.cancelEnding
	}
	if r.pending == nil && r.drive != nil {
		r.log(fctx, "graft operation ends with an effect step running; running it to its end")
		if de, derr := r.drive(fctx); derr == nil {
			e = de
		} else {
			e.msg = derr.Error()
		}
	}
	if r.pending != nil {
		w := *r.pending
		r.log(fctx, "graft operation ends with a write pending; fencing it", "write", w.Describe(), "reason", reason)
		v, ferr := r.fence(fctx, w, reason)
		switch {
		case ferr != nil:
			e.msg = ferr.Error()
		case v.State == activities.Landed:
			e.out, e.msg, e.recorded = cmp.Or(w.Landed, outcome.Unpublished), "the "+w.Describe()+" landed before the operation ended", v.Recorded
		default:
			e.out, e.msg = outcome.Unpublished, "the "+w.Describe()+" is fenced and never lands ("+reason+")"
			if r.onFenced != nil && w.Kind == activities.WriteRef {
				if cerr := r.onFenced(fctx); cerr != nil {
					e.msg += "; " + cerr.Error()
				}
			}
		}
	}
	res.setEnd(e.out, e.msg)
	r.finish(fctx, e, res)
	if cancelled || e.out == "" {
		return err
	}
	return outcomeError(e.out, e.msg, res)
}

// finish records the operation's end: in the ledger — the outcome, the witnesses the
// request wrote, the release of its pins, in one transaction guarded by this run's
// ownership — and in visibility. "" records the ledger's failed. It retries until the
// ledger answers: an end is never left unrecorded. An end a step recorded already (a
// create's ref write, a commit's publish, a delete's retire) needs no step here: that
// step told the worker's metrics too.
func (r *opRun) finish(ctx workflow.Context, e ending, res result) {
	r.status.Outcome, r.status.Pending = e.out, e.msg
	r.setPhase(ctx, "done", string(e.out))
	if !r.foreign && !e.recorded {
		recorded, _ := json.Marshal(res)
		if err := r.step(ctx, "finish: record outcome "+string(e.out), acts.Finish, activities.FinishInput{
			Owner: r.owner, Kind: r.kind, Outcome: e.out, Message: e.msg, Graph: r.graph, Branch: r.branch,
			Native: e.native, Result: recorded,
		}, nil); err != nil {
			r.log(ctx, "graft finish failed", "error", err.Error())
		}
	}
	if e.out != "" {
		_ = workflow.UpsertTypedSearchAttributes(ctx, searchattr.Outcome.ValueSet(string(e.out)))
	}
	r.log(ctx, "graft operation ended", "outcome", string(e.out), "detail", e.msg)
}

// abandonedMessage is the end message of an operation an operator abandoned, with the
// reason the operator gave, if any.
func abandonedMessage(reason string) string {
	if reason = strings.TrimSpace(reason); reason == "" {
		return "abandoned by an operator"
	}
	return "abandoned by an operator: " + reason
}

// outcomeError is a workflow's error for its definitive outcome (docs/workflows.md): nil
// for a success; otherwise a non-retryable ApplicationError typed by the outcome whose
// first detail is the whole result, so the workflow fails (red in the UI) and a client
// still decodes the result. Cleanup ends the same way.
func outcomeError(out outcome.Outcome, msg string, res any) error {
	if out == "" || out.Success() {
		return nil
	}
	return temporal.NewNonRetryableApplicationError(cmp.Or(msg, string(out)), string(out), nil, res)
}

// setDetails shows the phase, its subject and what is pending in the UI.
func setDetails(ctx workflow.Context, phase, subject, pending string) {
	details := "**" + phase + "**"
	if subject != "" {
		details += " · " + subject
	}
	if pending != "" {
		details += " — " + pending
	}
	workflow.SetCurrentDetails(ctx, details)
}

// Step timing the kernel applies to every step (docs/workflows.md); tests of long stalls
// lower them.
var (
	// StepTimeout bounds one attempt of a step (its StartToCloseTimeout).
	StepTimeout = 30 * time.Second
	// StepHeartbeatTimeout is how long a step running as an ordinary activity may go
	// without a heartbeat: the worker beats while it runs the step, so this is how soon a
	// step lost with its worker moves to another.
	StepHeartbeatTimeout = 10 * time.Second
	// BeforeEffectBudget bounds a step that precedes every storage effect, retries included.
	BeforeEffectBudget = 2 * time.Minute
	// FastPathBudget bounds the local-activity fast path of an after-effect step, after
	// which the step continues as an ordinary activity with no total deadline.
	FastPathBudget = 2 * time.Minute
)

// acts names the activities a workflow runs, by method: a typed nil, whose methods
// workflow code never calls itself.
var acts *activities.Activities

// untilAnswered retries a step until the store and the ledger answer: a step that may
// follow a storage effect is never given up, or the operation would be left half-done.
var untilAnswered = &temporal.RetryPolicy{InitialInterval: 100 * time.Millisecond, BackoffCoefficient: 2,
	MaximumInterval: 30 * time.Second}

// localStep runs fn as a local activity — free of an ordinary activity's matching round
// trip — for at most budget; maxAttempts 0 is unlimited within it.
func localStep(ctx workflow.Context, summary string, budget time.Duration, maxAttempts int32,
	fn, in any) workflow.Future {
	return workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		Summary: summary, StartToCloseTimeout: StepTimeout, ScheduleToCloseTimeout: budget,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: 100 * time.Millisecond, BackoffCoefficient: 2,
			MaximumInterval: 5 * time.Second, MaximumAttempts: maxAttempts},
	}), fn, in)
}

// beforeEffect runs a short step that precedes every storage effect of its operation
// (validate, resolve, record, pin, probe). One that keeps failing ends the operation
// after BeforeEffectBudget, and the kernel's finish settles what the request wrote.
func beforeEffect(ctx workflow.Context, summary string, fn, in, out any) error {
	return localStep(ctx, summary, BeforeEffectBudget, 0, fn, in).Get(ctx, out)
}

// untilAnsweredStep runs a step that may follow a storage effect and must not be given up:
// a local activity for a few attempts, then the same step as an ordinary activity with
// no total deadline, retried until answered; only cancellation ends it early. That
// activity does not hold the workflow task, so status queries stay answerable and a
// dependency that does not answer shows as a pending activity retrying with its last
// failure, which the client's wait names (docs/outcomes.md). kv goes into its log.
func untilAnsweredStep(ctx workflow.Context, summary string, fn, in, out any, kv ...any) error {
	err := localStep(ctx, summary, FastPathBudget, 4, fn, in).Get(ctx, out)
	if err == nil || temporal.IsCanceledError(err) || ctx.Err() != nil {
		return err
	}
	workflow.GetLogger(ctx).Info("graft step continues as an ordinary activity", append(kv, "step", summary, "error", err.Error())...)
	if w, ok := in.(activities.WriteInput); ok {
		// The local attempts may have sent the write: a refusal of a later one proves nothing.
		w.StepRetried = true
		in = w
	}
	return answerableStep(ctx, summary+" (until answered)", fn, in, out)
}

// answerableStep runs a step as an ordinary activity retried until answered, with no
// total deadline. It does not hold the workflow task, so status queries stay answerable
// while it runs; its worker heartbeats it, so one lost with its worker is retried by
// another after StepHeartbeatTimeout.
func answerableStep(ctx workflow.Context, summary string, fn, in, out any) error {
	o := workflow.ActivityOptions{Summary: summary, StartToCloseTimeout: 2 * StepTimeout,
		HeartbeatTimeout: StepHeartbeatTimeout, RetryPolicy: untilAnswered}
	return workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, o), fn, in).Get(ctx, out)
}
