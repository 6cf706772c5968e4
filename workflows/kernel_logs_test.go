package workflows_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	sdkclient "go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/testenv"
	"github.com/graftworks/graft/storage/faults"
	"github.com/graftworks/graft/worker"
	"github.com/graftworks/graft/workflows"
)

// The worker logs, at info level, every ambiguous answer, refusal, fence and settle
// decision with the operation id. Each test runs a worker
// whose Temporal client — and so every workflow's and activity's logger — writes to a
// capturing slog handler, drives a create into one of those decisions with storage/faults,
// and reads the decision back from the captured lines by its operation id.

// logLine is one captured record: its message, level and attributes (With's included).
type logLine struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

func (l logLine) String() string { return fmt.Sprintf("%s %q %v", l.level, l.msg, l.attrs) }

// logSink is what every capture handler of one worker writes to.
type logSink struct {
	mu    sync.Mutex
	lines []logLine
}

// captureHandler is a slog.Handler recording every record at or above Info into a sink.
type captureHandler struct {
	sink  *logSink
	attrs []slog.Attr
}

func (h *captureHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h *captureHandler) Handle(_ context.Context, r slog.Record) error {
	line := logLine{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	for _, a := range h.attrs {
		line.attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		line.attrs[a.Key] = a.Value.String()
		return true
	})
	h.sink.mu.Lock()
	h.sink.lines = append(h.sink.lines, line)
	h.sink.mu.Unlock()
	return nil
}

func (h *captureHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &captureHandler{sink: h.sink, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}

func (h *captureHandler) WithGroup(string) slog.Handler { return h }

// of returns the info lines that name opID.
func (s *logSink) of(opID string) []logLine {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []logLine
	for _, l := range s.lines {
		if l.attrs["op_id"] == opID && l.level == slog.LevelInfo {
			out = append(out, l)
		}
	}
	return out
}

// find returns the first line of opID whose message contains msg and whose attributes
// hold every key/value pair of kv.
func (s *logSink) find(opID, msg string, kv ...string) (logLine, bool) {
	for _, l := range s.of(opID) {
		if !strings.Contains(l.msg, msg) {
			continue
		}
		ok := true
		for i := 0; i+1 < len(kv); i += 2 {
			if l.attrs[kv[i]] != kv[i+1] {
				ok = false
			}
		}
		if ok {
			return l, true
		}
	}
	return logLine{}, false
}

// want fails the test unless opID has an info line with msg and kv.
func (s *logSink) want(t *testing.T, opID, msg string, kv ...string) {
	t.Helper()
	if _, ok := s.find(opID, msg, kv...); !ok {
		var b strings.Builder
		for _, l := range s.of(opID) {
			b.WriteString("\n  " + l.String())
		}
		t.Fatalf("no info line of operation %s with %q %v; its lines:%s", opID, msg, kv, b.String())
	}
}

// startLoggingWorker runs the rig's worker on a Temporal client of its own whose logger
// writes to the returned sink: the logger handed to the worker.
func (r *rig) startLoggingWorker() *logSink {
	r.t.Helper()
	sink := &logSink{}
	logger := sdklog.NewStructuredLogger(slog.New(&captureHandler{sink: sink}))
	ts := testenv.Temporal(r.t)
	tc, err := sdkclient.DialContext(r.ctx, sdkclient.Options{HostPort: ts.HostPort, Namespace: ts.Namespace, Logger: logger})
	if err != nil {
		r.t.Fatalf("dial temporal: %v", err)
	}
	r.t.Cleanup(tc.Close)
	acts := r.acts()
	acts.Logger = logger
	w := worker.New(tc, r.taskQueue, acts, sdkworker.Options{})
	if err := w.Start(); err != nil {
		r.t.Fatalf("start worker: %v", err)
	}
	r.w = w
	r.t.Cleanup(w.Stop)
	return sink
}

// A create meeting a storage fault: the worker logs what the store answered and what the
// kernel decided, each with the op id — on the kernel's write and on the fault paths
// outside it (the clone).
func TestKernelLogs_CreateMeetsAStoreFault_LogsAnswersAndDecisionsWithOpID(t *testing.T) {
	for _, c := range []struct {
		name, branch, opPrefix string
		rule                   func(r *rig, branch string) faults.Rule
		lift                   bool // the fault is lifted when the test ends
		want                   outcome.Outcome
		logs                   [][]string // msg, then key and value
	}{
		// The ref put applied, its answer dropped: the ambiguous answer (activity and
		// workflow) and the read-back's settle.
		{name: "RefPutAnswerLost", branch: "lost-answer", opPrefix: "lost-",
			rule: func(r *rig, branch string) faults.Rule {
				return faults.Rule{Op: faults.OpPut, KeyPrefix: r.refPrefix(branch), Body: isLiveRef, Mode: faults.ApplyLoseAnswer, Times: 1}
			},
			want: outcome.Created, logs: [][]string{{"graft write verdict", "verdict", string(activities.Ambiguous)},
				{"answered ambiguously; reading back", "kind", "create_branch"},
				{"read-back settled the write", "verdict", string(activities.Landed)},
				{"graft operation ended", "outcome", string(outcome.Created)}}},
		// The ref put refused (403): the refusal (activity and workflow) and the refused end.
		{name: "RefPutRefused", branch: "refused-ref", opPrefix: "refused-", lift: true,
			rule: func(r *rig, branch string) faults.Rule {
				return faults.Rule{Op: faults.OpPut, KeyPrefix: r.refPrefix(branch), Body: isLiveRef, Mode: faults.Refuse, Status: 403}
			},
			want: outcome.Refused, logs: [][]string{{"graft write verdict", "verdict", string(activities.Refused)},
				{"graft write answered", "verdict", string(activities.Refused)},
				{"graft operation ended", "outcome", string(outcome.Refused)}}},
		// Every write refused (403): the clone is refused first.
		{name: "StoreRefusesEveryWrite", branch: "refused-all", opPrefix: "denied-", lift: true,
			rule: func(*rig, string) faults.Rule { return faults.Rule{Op: faults.OpPut, Mode: faults.Refuse, Status: 403} },
			want: outcome.Refused, logs: [][]string{{"graft clone refused"},
				{"clone refused; nothing was written", "kind", "create_branch"},
				{"graft operation ended", "outcome", string(outcome.Refused)}}},
		// Every fork-commit put unanswered: the clone's ambiguous answer and the fence that
		// settles the incarnation unpublished.
		{name: "ClonePutsUnanswered", branch: "lost-clone", opPrefix: "clone-",
			rule: func(r *rig, _ string) faults.Rule {
				return faults.Rule{Op: faults.OpPut, KeyPrefix: r.graph + "/trees/", Mode: faults.FailBeforeSend}
			},
			want: outcome.Unpublished, logs: [][]string{{"graft clone answered ambiguously"},
				{"graft fence verdict", "verdict", string(activities.Fenced)},
				{"fence settled the write", "verdict", string(activities.Fenced)},
				{"graft operation ended", "outcome", string(outcome.Unpublished)}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			sink := r.startLoggingWorker()
			r.names = append(r.names, c.branch)
			remove := r.store.Add(c.rule(r, c.branch))
			if c.lift {
				defer remove()
			}
			opID := randomName(c.opPrefix)
			run := r.startOp(workflows.CreateBranchName, workflows.CreateBranchInput{Graph: r.graph, Branch: c.branch, OpID: opID})
			var res workflows.CreateBranchResult
			if err := endOf(r, run, &res); err != nil || res.Outcome != c.want {
				t.Fatalf("create: %+v, %v; want %s", res, err, c.want)
			}
			for _, l := range c.logs {
				sink.want(t, opID, l[0], l[1:]...)
			}
		})
	}
}

// A ref put that never answers: the worker logs the doubt, the decision to settle by
// re-issue, the operator's abandon and the fence that settles it, each with the op id.
func TestKernelLogs_RefPutInDoubtAbandoned_LogsSettleAndFenceWithOpID(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	sink := r.startLoggingWorker()
	const branch = "fenced-ref"
	r.names = append(r.names, branch)
	hold := r.store.Add(faults.Rule{Op: faults.OpPut, KeyPrefix: r.refPrefix(branch), Body: isLiveRef, Mode: faults.Hold})
	opID := randomName("held-")
	run := r.startOp(workflows.CreateBranchName, workflows.CreateBranchInput{Graph: r.graph, Branch: branch, OpID: opID})
	r.waitOp(opID, "the create recorded in doubt", inDoubt)
	if err := r.tc.SignalWorkflow(r.ctx, run.GetID(), "", workflows.AbandonSignalName, workflows.AbandonRequest{Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	var res workflows.CreateBranchResult
	if err := endOf(r, run, &res); err != nil || res.Outcome != outcome.Unpublished {
		t.Fatalf("abandoned create: %+v, %v; want unpublished", res, err)
	}
	sink.want(t, opID, "graft write verdict", "verdict", string(activities.Ambiguous))
	sink.want(t, opID, "in doubt; settling by re-issue", "kind", "create_branch")
	sink.want(t, opID, "abandoned by operator; fencing", "reason", "test")
	sink.want(t, opID, "graft fence verdict", "verdict", string(activities.Fenced))
	sink.want(t, opID, "fence settled the write", "verdict", string(activities.Fenced))
	sink.want(t, opID, "graft operation ended", "outcome", string(outcome.Unpublished))
	hold()
	wantLateRefused(t, r.ctx, "held ref put after the fence", r.store.Held())
}
