package soak

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Config is one soak: a range of seeds on one backend.
type Config struct {
	Backend Backend
	// From is the first seed; Seeds how many (From, From+1, …). Seeds defaults to 1.
	From  uint64
	Seeds int
	// Parallel schedules run at once against the stack (distinct graphs, task queues
	// and fault stores). Defaults to 4.
	Parallel int
	// Keep, when set, runs only these op and fault ids of each schedule (a shrunk
	// schedule printed by an earlier failure).
	Keep     map[string]bool
	NoShrink bool // keep a failing schedule whole
	// RestartEvery restarts a server of a restartable stack (StackConfig.Restartable)
	// after every this many seeds are handed out, taking turns: versitygw (on that
	// backend) and the Temporal dev server. Defaults to 0: never.
	RestartEvery int
	Out          io.Writer // failures as they happen and progress lines; defaults to io.Discard
}

// Failure is a schedule that broke a promise (or could not be judged), with the
// smallest sub-schedule found that still fails.
type Failure struct {
	Result   Result
	Schedule Schedule
	Minimal  Schedule
	Repro    string
}

// Totals sums a soak.
type Totals struct {
	Backend Backend
	From    uint64
	Seeds   int
	// Ran counts the seeds that ran to a verdict (fewer than Seeds when interrupted).
	Ran      int
	Passed   int
	Failures []Failure
	Counts
	// Classes counts seeds by the fault classes their schedule had (e.g. "storage+operator", "none").
	Classes map[string]int
	Wall    time.Duration
}

// Soak runs cfg's seeds on st and returns the totals.
func Soak(ctx context.Context, st *Stack, cfg Config) Totals {
	if cfg.Seeds <= 0 {
		cfg.Seeds = 1
	}
	if cfg.Parallel <= 0 {
		cfg.Parallel = 4
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	t := Totals{Backend: cfg.Backend, From: cfg.From, Seeds: cfg.Seeds, Counts: newCounts(), Classes: map[string]int{}}
	start := time.Now()
	var mu sync.Mutex
	seeds := make(chan uint64)
	var wg sync.WaitGroup
	for range cfg.Parallel {
		wg.Go(func() {
			for seed := range seeds {
				s := Generate(seed, cfg.Backend).Keep(cfg.Keep)
				res := st.Run(ctx, s)
				if ctx.Err() != nil {
					continue // interrupted: neither a pass nor a failure
				}
				var f *Failure
				if res.Failed() {
					f = &Failure{Result: res, Schedule: s, Minimal: s}
					if !cfg.NoShrink && res.Err == nil {
						f.Minimal = shrink(ctx, st, s)
					}
					f.Repro = fmt.Sprintf("go run ./cmd/soak -backend %s -from %d -seeds 1 -keep %s", cfg.Backend, seed, keepArg(f.Minimal))
				}
				mu.Lock()
				t.Ran++
				t.add(res.Counts)
				t.Classes[classes(s)]++
				if f != nil {
					t.Failures = append(t.Failures, *f)
					fmt.Fprint(cfg.Out, f.String())
				} else {
					t.Passed++
				}
				if t.Ran%50 == 0 {
					fmt.Fprintf(cfg.Out, "soak %s: %d/%d seeds, %d failed, %s\n", cfg.Backend, t.Ran, cfg.Seeds, len(t.Failures), time.Since(start).Round(time.Second))
				}
				mu.Unlock()
			}
		})
	}
	var rwg sync.WaitGroup
	restarts := 0
	for i := range cfg.Seeds {
		if ctx.Err() != nil {
			break
		}
		seeds <- cfg.From + uint64(i)
		if cfg.RestartEvery > 0 && (i+1)%cfg.RestartEvery == 0 {
			which := "temporal"
			if cfg.Backend == VersityGW && restarts%2 == 0 {
				which = "versitygw"
			}
			restarts++
			rwg.Go(func() {
				ok, err := st.Restart(ctx, which)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					fmt.Fprintf(cfg.Out, "soak: %v\n", err)
					t.Faults["process:restart_"+which+"_failed"]++
				case ok:
					t.Faults["process:restart_"+which]++
				}
			})
		}
	}
	rwg.Wait()
	close(seeds)
	wg.Wait()
	t.Wall = time.Since(start)
	sort.Slice(t.Failures, func(i, j int) bool { return t.Failures[i].Result.Seed < t.Failures[j].Result.Seed })
	return t
}

func classes(s Schedule) string {
	set := map[string]bool{}
	if s.InitFaulted {
		set["storage"] = true
	}
	for _, f := range s.Faults {
		set[string(f.Class)] = true
	}
	if len(set) == 0 {
		return "none"
	}
	return strings.Join(slices.Sorted(maps.Keys(set)), "+")
}

// shrink drops ops and faults one at a time, keeping each drop after which the schedule
// still fails, and returns the smallest failing sub-schedule found. Schedules run
// concurrently, so a drop is kept when one re-run fails.
func shrink(ctx context.Context, st *Stack, s Schedule) Schedule {
	cur := s
	const maxTrials = 40
	trials := 0
	for changed := true; changed && trials < maxTrials; {
		changed = false
		ids := cur.IDs()
		for i := len(ids) - 1; i >= 0 && trials < maxTrials; i-- {
			keep := map[string]bool{}
			for j, id := range ids {
				if j != i {
					keep[id] = true
				}
			}
			cand := cur.Keep(keep)
			trials++
			if st.Run(ctx, cand).Failed() {
				cur, changed = cand, true
				break
			}
		}
	}
	return cur
}

// String prints a failure: seed, violations, schedule, the shrunk schedule and the
// command that reproduces it.
func (f Failure) String() string {
	var b strings.Builder
	r := f.Result
	fmt.Fprintf(&b, "\nVIOLATION seed %d on %s (graph %s)\n", r.Seed, r.Backend, r.Graph)
	if r.Err != nil {
		fmt.Fprintf(&b, "  could not be judged: %v\n", r.Err)
	}
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "  %s\n", v)
	}
	fmt.Fprintf(&b, "schedule:\n%s", f.Schedule)
	fmt.Fprintf(&b, "shortest failing sub-schedule:\n%s", f.Minimal)
	fmt.Fprintf(&b, "reproduce: %s\n", f.Repro)
	return b.String()
}

// Summary prints the totals: seeds, results, wall time, ops and faults by kind.
func (t Totals) Summary() string {
	var b strings.Builder
	unjudged := 0
	for _, f := range t.Failures {
		if f.Result.Err != nil && len(f.Result.Violations) == 0 {
			unjudged++
		}
	}
	fmt.Fprintf(&b, "soak %s: seeds %d..%d (%d, %d ran to a verdict): %d passed, %d failed (%d violated, %d could not be judged: the stack did not answer); wall %s\n",
		t.Backend, t.From, t.From+uint64(t.Seeds)-1, t.Seeds, t.Ran, t.Passed, len(t.Failures), len(t.Failures)-unjudged, unjudged, t.Wall.Round(time.Second))
	line := func(name string, m map[string]int) {
		total := 0
		for _, v := range m {
			total += v
		}
		fmt.Fprintf(&b, "  %s (%d):", name, total)
		for _, k := range slices.Sorted(maps.Keys(m)) {
			fmt.Fprintf(&b, " %s=%d", k, m[k])
		}
		b.WriteByte('\n')
	}
	line("seeds by fault class", t.Classes)
	line("operations", t.Ops)
	line("outcomes", t.Outcomes)
	line("faults injected", t.Faults)
	for _, k := range slices.Sorted(maps.Keys(t.Unclassified)) {
		fmt.Fprintf(&b, "  unclassified client error ×%d: %s\n", t.Unclassified[k], k)
	}
	for _, f := range t.Failures {
		fmt.Fprintf(&b, "  FAILED seed %d: %s\n", f.Result.Seed, f.Repro)
	}
	return b.String()
}

// keepArg is the -keep value that selects exactly s's ops and faults ("none" for none).
func keepArg(s Schedule) string {
	if ids := s.IDs(); len(ids) > 0 {
		return strings.Join(ids, ",")
	}
	return "none"
}

// ParseKeep parses a -keep value (keepArg); "" is nil: keep everything.
func ParseKeep(v string) map[string]bool {
	if v == "" {
		return nil
	}
	keep := map[string]bool{}
	if v == "none" {
		return keep
	}
	for _, id := range strings.Split(v, ",") {
		keep[strings.TrimSpace(id)] = true
	}
	return keep
}
