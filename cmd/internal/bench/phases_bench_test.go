package bench

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/interceptor"

	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/workflows"
)

// phaseClock timestamps, for one operation at a time, the moments the
// benchmark's Temporal client and worker pass: each RPC sent and answered
// (polls aside: they wait by design) and each step begun and ended (a worker
// interceptor). BenchmarkEnginePhases reads them; off, it costs an atomic load.
type phaseClock struct {
	on     atomic.Bool
	mu     sync.Mutex
	events []phaseEvent
}

type phaseEvent struct {
	at   time.Time
	what string
}

func (c *phaseClock) mark(what string) {
	if c == nil || !c.on.Load() {
		return
	}
	c.mu.Lock()
	c.events = append(c.events, phaseEvent{time.Now(), what})
	c.mu.Unlock()
}

// record runs op alone with the clock on and returns its moments, the call's
// first and last.
func (c *phaseClock) record(ctx context.Context, op func(context.Context) error) ([]phaseEvent, error) {
	c.mu.Lock()
	c.events = nil
	c.mu.Unlock()
	c.on.Store(true)
	c.mark("call")
	err := op(ctx)
	c.mark("done")
	c.on.Store(false)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.events, err
}

// stepClock marks each step a worker runs, local activities included.
type stepClock struct {
	interceptor.WorkerInterceptorBase
	clock *phaseClock
}

func (s *stepClock) InterceptActivity(_ context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	return &stepClockActivity{ActivityInboundInterceptorBase: interceptor.ActivityInboundInterceptorBase{Next: next}, clock: s.clock}
}

type stepClockActivity struct {
	interceptor.ActivityInboundInterceptorBase
	clock *phaseClock
}

func (a *stepClockActivity) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	a.clock.mark("step>")
	defer a.clock.mark("step<")
	return a.Next.ExecuteActivity(ctx, in)
}

// phases is where one operation's time went, from the client's call to its
// answer: the start RPC (an eager start returns the first workflow task);
// from its answer to the first step; the steps' own time; the hand-offs
// between steps; from the last step to the task's completion RPC; and from
// that RPC to the client's answer (the server records the completion and
// answers the client's long poll).
type phases struct {
	start, toFirstStep, steps, between, toComplete, complete, total time.Duration
}

var phaseNames = []string{"start", "to-first-step", "steps", "between-steps", "to-complete", "complete", "total"}

func (p phases) all() []time.Duration {
	return []time.Duration{p.start, p.toFirstStep, p.steps, p.between, p.toComplete, p.complete, p.total}
}

// phasesOf reads one operation's moments: false when they are not the
// single-task shape the phases describe (a start, steps, one completion).
func phasesOf(evs []phaseEvent) (phases, bool) {
	at := func(what string) []time.Time {
		var ts []time.Time
		for _, e := range evs {
			if e.what == what {
				ts = append(ts, e.at)
			}
		}
		return ts
	}
	call, done := at("call"), at("done")
	startSent, started := at("rpc> StartWorkflowExecution"), at("rpc< StartWorkflowExecution")
	completeSent := at("rpc> RespondWorkflowTaskCompleted")
	begun, ended := at("step>"), at("step<")
	if len(call) != 1 || len(done) != 1 || len(startSent) != 1 || len(started) != 1 || len(completeSent) != 1 ||
		len(begun) == 0 || len(begun) != len(ended) {
		return phases{}, false
	}
	p := phases{start: started[0].Sub(startSent[0]), toFirstStep: begun[0].Sub(started[0]),
		toComplete: completeSent[0].Sub(ended[len(ended)-1]), complete: done[0].Sub(completeSent[0]),
		total: done[0].Sub(call[0])}
	for i := range begun {
		p.steps += ended[i].Sub(begun[i])
		if i > 0 {
			p.between += begun[i].Sub(ended[i-1])
		}
	}
	return p, true
}

// phasePath is one way of running an operation in BenchmarkEnginePhases;
// prepare, when set, runs untimed before each operation.
type phasePath struct {
	name    string
	op      func(context.Context) error
	prepare func()
	raw     bool // no Temporal: its total alone
}

// BenchmarkEnginePhases times, phase by phase (phases), one operation at a
// time at one client, a create (depth 0, 4 tables) and a three-way merge
// (121 tables, 8 written whole, main's lineage chunked as in
// BenchmarkMergeInto) through the engine, beside the Temporal floor (three
// no-op steps), a floor whose three steps each wait 3 ms (steps that take
// about as long as the operation's, without their work), and the raw
// operation (the same steps called directly). The paths take turns, one
// operation each, so the machine's drift falls on all alike. Each reports
// the p50 of every phase in ms: what the engine adds to floor + raw shows
// up phase by phase, and the waiting floor shows what steps that wait cost
// the Temporal side with no work of graft's.
func BenchmarkEnginePhases(b *testing.B) {
	b.Run("create", func(b *testing.B) {
		st := newCreateStack(b, 0, 4)
		timePhases(b, &st.clock, phasePaths(st, phasePath{name: "engine", op: st.createEngine}, phasePath{name: "raw", op: st.createRaw, raw: true}))
	})
	b.Run("merge", func(b *testing.B) {
		st := newMergeStackFrom(b, newCreateStack(b, 0, mergeTables))
		st.acts.Chunks = graph.NewChunkCache(graph.DefaultChunkCacheBytes)
		for range mergesBefore {
			if err := st.mergeRawOp(st.prepare(b, 0, 8), workflows.OutcomeMerged); err != nil {
				b.Fatal(err)
			}
		}
		var engSource, rawSource string
		eng := phasePath{name: "engine", op: func(context.Context) error { return st.mergeEngine(engSource, workflows.OutcomeMerged) },
			prepare: func() { engSource = st.prepare(b, 0, 8) }}
		raw := phasePath{name: "raw", op: func(context.Context) error { return st.mergeRawOp(rawSource, workflows.OutcomeMerged) },
			prepare: func() { rawSource = st.prepare(b, 0, 8) }, raw: true}
		timePhases(b, &st.clock, phasePaths(st.createStack, eng, raw))
	})
}

// phasePaths is the floor, the waiting floor, then the operation's paths.
func phasePaths(st *createStack, ops ...phasePath) []phasePath {
	return append([]phasePath{{name: "floor", op: st.floor},
		{name: "waiting-floor", op: st.floorPlus(FloorPlusInput{Steps: 3, Sleep: 3 * time.Millisecond}, false)}}, ops...)
}

func timePhases(b *testing.B, clock *phaseClock, paths []phasePath) {
	ctx := context.Background()
	for _, p := range paths { // warm up
		for range 5 {
			if p.prepare != nil {
				p.prepare()
			}
			if err := p.op(ctx); err != nil {
				b.Fatalf("%s: %v", p.name, err)
			}
		}
	}
	n := max(b.N, 100)
	got := make([][]phases, len(paths))
	other := make([]int, len(paths))
	b.ResetTimer()
	for range n {
		for i, p := range paths {
			if p.prepare != nil {
				b.StopTimer()
				p.prepare()
				b.StartTimer()
			}
			evs, err := clock.record(ctx, p.op)
			if err != nil {
				b.Fatalf("%s: %v", p.name, err)
			}
			if p.raw {
				got[i] = append(got[i], phases{total: evs[len(evs)-1].at.Sub(evs[0].at)})
				continue
			}
			if ph, ok := phasesOf(evs); ok {
				got[i] = append(got[i], ph)
			} else {
				other[i]++
			}
		}
	}
	b.StopTimer()
	for i, p := range paths {
		for j, name := range phaseNames {
			if p.raw && name != "total" {
				continue
			}
			d := make([]time.Duration, 0, len(got[i]))
			for _, ph := range got[i] {
				d = append(d, ph.all()[j])
			}
			slices.Sort(d)
			b.ReportMetric(pct(d, 0.5), p.name+"-"+name+"-p50-ms")
		}
		if !p.raw {
			b.ReportMetric(float64(other[i]), p.name+"-other-shapes")
		}
	}
	b.ReportMetric(0, "ns/op")
}
