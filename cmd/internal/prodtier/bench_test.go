package prodtier

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/cmd/internal/procstat"
)

// benchConcurrency is how many creates the benchmark keeps in flight.
const benchConcurrency = 8

// BenchmarkProdCreates measures branch creates through the engine on the
// Temporal server with 1, 2 and 3 graft-worker processes on one task queue,
// benchConcurrency creates in flight, b.N creates per row, each row on a
// fresh stack (bucket, ledger schema, task queue) against the same server.
// Workers reach versitygw directly (no fault front). Besides throughput and
// latency it reports where the CPU went, per create, from /proc: the server,
// the workers, versitygw, the postgres backends serving them, this process
// (the client), and everything else on the machine; and how busy the
// machine was.
//
//	go test -run '^$' -bench BenchmarkProdCreates -benchtime 300x ./internal/prodtier/
func BenchmarkProdCreates(b *testing.B) {
	warmUp(b)
	for _, n := range []int{1, 2, 3} {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			st := newStack(b, stackOptions{Workers: n, Limit: 30 * time.Minute, Direct: true})
			g := st.initGraph("bench")
			for i := range benchConcurrency { // warm every worker's caches and connections
				if _, err := st.gc.CreateBranch(st.ctx, client.CreateBranchRequest{Graph: g, Branch: fmt.Sprintf("warm/w%d", i)}); err != nil {
					b.Fatal(err)
				}
			}
			before := make([]float64, n)
			for i, w := range st.workers {
				v, err := metric(st.ctx, w, "graft_operations_total")
				if err != nil {
					b.Fatal(err)
				}
				before[i] = v
			}
			cpu0 := sampleCPU()
			lat := make([]time.Duration, b.N)
			errs := make([]error, b.N)
			sem := make(chan struct{}, benchConcurrency)
			var wg sync.WaitGroup
			b.ResetTimer()
			began := time.Now()
			for i := range b.N {
				sem <- struct{}{}
				wg.Go(func() {
					defer func() { <-sem }()
					t0 := time.Now()
					res, err := st.gc.CreateBranch(st.ctx, client.CreateBranchRequest{Graph: g, Branch: fmt.Sprintf("b/%d", i)})
					lat[i] = time.Since(t0)
					if err == nil && res.Outcome != outcome.Created {
						err = fmt.Errorf("outcome %s", res.Outcome)
					}
					errs[i] = err
				})
			}
			wg.Wait()
			elapsed := time.Since(began)
			b.StopTimer()
			cpu1 := sampleCPU()
			used := cpu1.Since(cpu0)
			for i, err := range errs {
				if err != nil {
					b.Fatalf("create b/%d: %v", i, err)
				}
			}
			var share []string
			for i, w := range st.workers {
				v, err := metric(st.ctx, w, "graft_operations_total")
				if err != nil {
					b.Fatal(err)
				}
				share = append(share, strconv.Itoa(int(v-before[i])))
			}
			slices.Sort(lat)
			per := func(d time.Duration) float64 { return d.Seconds() * 1000 / float64(b.N) }
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "creates/s")
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[(len(lat)*99-1)/100].Microseconds())/1000, "p99-ms")
			b.ReportMetric(100*cpu1.BusyFraction(cpu0), "machine-busy-%")
			ours := time.Duration(0)
			for _, k := range cpuGroups {
				d := used[k]
				ours += d
				b.ReportMetric(per(d), k+"-cpu-ms/create")
			}
			// Whatever else ran on the machine: other users' builds and tests.
			machine := time.Duration((cpu1.Busy - cpu0.Busy) * float64(time.Second) / 100)
			b.ReportMetric(per(machine-ours), "other-cpu-ms/create")
			b.Logf("workers=%d: %d creates in %s; per worker %s; load average %s → %s",
				n, b.N, elapsed.Round(time.Millisecond), strings.Join(share, "/"), cpu0.Load, cpu1.Load)
		})
	}
}

// warmUp runs creates on a throwaway stack first, so the first row does not
// pay for a server fresh from start (its Postgres connections, caches and
// first task queues).
func warmUp(b *testing.B) {
	st := newStack(b, stackOptions{Workers: 3, Limit: 10 * time.Minute, Direct: true})
	g := st.initGraph("warm")
	sem := make(chan struct{}, benchConcurrency)
	var wg sync.WaitGroup
	for i := range 200 {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if _, err := st.gc.CreateBranch(st.ctx, client.CreateBranchRequest{Graph: g, Branch: fmt.Sprintf("w/%d", i)}); err != nil {
				b.Error(err)
			}
		})
	}
	wg.Wait()
	for _, w := range st.workers { // idle pollers would share the rows' CPU
		if err := w.Terminate(45 * time.Second); err != nil {
			b.Errorf("warm-up %s: %v", w, err)
		}
	}
}

// cpuGroups are the processes the benchmark accounts CPU to.
var cpuGroups = []string{"temporal-server", "graft-worker", "versitygw", "postgres", "bench"}

type cpuSample = procstat.Sample

// sampleCPU samples this process ("bench": the client), its children by name
// (the server, the workers, versitygw) and the postgres backends serving them.
func sampleCPU() cpuSample {
	return procstat.Take(func(comm string) string {
		switch {
		case strings.HasPrefix(comm, "temporal-server"):
			return "temporal-server"
		case strings.HasPrefix(comm, "graft-worker"):
			return "graft-worker"
		case comm == "versitygw":
			return "versitygw"
		}
		return ""
	})
}
