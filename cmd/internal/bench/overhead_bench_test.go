package bench

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	sdkclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/graftworks/graft/internal/searchattr"
)

// floorPlusName is the floor with one of the engine's costs added at a
// time, to find where a create's time above floor + raw steps goes
// (docs/benchmarks.md, "Where the time goes").
const floorPlusName = "bench.FloorPlus"

// FloorPlusInput says which of the engine's costs a FloorPlus run adds.
type FloorPlusInput struct {
	// Steps is the number of no-op local activities (the floor has 3, as a
	// create has: prepare, clone, and the ref write that records its end; a
	// merge plans, writes and finishes; a step of its own prices a fourth).
	Steps int `json:"steps"`
	// Payload is the size of what each step returns (a create's prepare
	// returns its fork commit and ref bytes).
	Payload int `json:"payload"`
	// Upsert sets a search attribute at the end, as the kernel's finish
	// does with GraftOutcome.
	Upsert bool `json:"upsert"`
	// Details sets the current details before each step, as setPhase does.
	Details bool `json:"details"`
	// Sleep is how long each step sleeps, standing in for a create's real
	// steps (their I/O) without their CPU.
	Sleep time.Duration `json:"sleep"`
}

func floorPlusWorkflow(ctx workflow.Context, in FloorPlusInput) (string, error) {
	ctx = workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: 10 * time.Second})
	var out string
	for i := range in.Steps {
		if in.Details {
			workflow.SetCurrentDetails(ctx, fmt.Sprintf("phase %d", i))
		}
		if err := workflow.ExecuteLocalActivity(ctx, floorPayloadStep, in.Payload, in.Sleep).Get(ctx, &out); err != nil {
			return "", err
		}
	}
	if in.Upsert {
		if err := workflow.UpsertTypedSearchAttributes(ctx, searchattr.Outcome.ValueSet("created")); err != nil {
			return "", err
		}
	}
	return out, nil
}

func floorPayloadStep(_ context.Context, n int, sleep time.Duration) (string, error) {
	time.Sleep(sleep)
	return strings.Repeat("x", n), nil
}

// floorPlus runs one FloorPlus workflow the way the client starts an
// operation; attrs adds the start's search attributes and summary.
func (st *createStack) floorPlus(in FloorPlusInput, attrs bool) func(context.Context) error {
	return func(ctx context.Context) error {
		o := sdkclient.StartWorkflowOptions{ID: "bench-floorplus-" + ulid.Make().String(), TaskQueue: st.queue, EnableEagerStart: true}
		if attrs {
			o.StaticSummary = "create branch bn in " + st.graph
			o.TypedSearchAttributes = temporal.NewSearchAttributes(searchattr.Graph.ValueSet(st.graph),
				searchattr.Branch.ValueSet("bn"), searchattr.Operation.ValueSet("create_branch"))
		}
		run, err := st.tc.ExecuteWorkflow(ctx, o, floorPlusName, in)
		if err != nil {
			return err
		}
		var out string
		return run.Get(ctx, &out)
	}
}

// BenchmarkEngineOverhead decomposes a create's engine time: the floor, then
// the floor with one more of the engine's costs at a time (a fourth step,
// the start's search attributes and summary, the finish's search-attribute
// upsert, current details per step, 2 KiB results), then a real create, all
// interleaved in one run at 1 and at 8 clients (4 tables, depth 0; interleave). Each
// path reports its p50, its throughput and, at eight clients, its CPU per operation by
// process: there the CPU, not the latency, bounds throughput.
func BenchmarkEngineOverhead(b *testing.B) {
	for _, c := range []int{1, 8} {
		b.Run(fmt.Sprintf("c=%d", c), func(b *testing.B) {
			st := newCreateStack(b, 0, 4)
			paths := []*path{
				{name: "floor", op: st.floor},
				{name: "4-steps", op: st.floorPlus(FloorPlusInput{Steps: 4}, false)},
				{name: "4-steps+attrs", op: st.floorPlus(FloorPlusInput{Steps: 4}, true)},
				{name: "4-steps+attrs+upsert", op: st.floorPlus(FloorPlusInput{Steps: 4, Upsert: true}, true)},
				{name: "4-steps+attrs+upsert+details", op: st.floorPlus(FloorPlusInput{Steps: 4, Upsert: true, Details: true}, true)},
				{name: "4-steps+attrs+upsert+details+2KiB", op: st.floorPlus(FloorPlusInput{Steps: 4, Upsert: true, Details: true, Payload: 2048}, true)},
				{name: "4-steps-sleep-3ms", op: st.floorPlus(FloorPlusInput{Steps: 4, Sleep: 3 * time.Millisecond}, false)},
				{name: "4-steps-sleep-3ms+all", op: st.floorPlus(FloorPlusInput{Steps: 4, Upsert: true, Details: true, Payload: 2048, Sleep: 3 * time.Millisecond}, true)},
				{name: "raw", op: st.createRaw},
				{name: "engine", op: st.createEngine},
			}
			for _, p := range paths {
				measure(b, 3*c, c, p.op)
			}
			b.ResetTimer()
			interleave(b, st.store, st.cat, rowOps(b, c), c, 2, paths...)
			b.StopTimer()
			for _, p := range paths {
				b.ReportMetric(p.p(0.5), p.name+"-p50-ms")
				b.ReportMetric(p.perSecond(), p.name+"-ops/s")
				for _, g := range cpuGroups {
					if p.cpu != nil { // sampled at eight clients (interleave)
						b.ReportMetric(p.cpuPerOp(g), p.name+"-"+g+"-cpu-ms")
					}
				}
			}
			b.ReportMetric(0, "ns/op")
		})
	}
}
