package prodtier

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
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
			used := cpu1.since(cpu0)
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
			b.ReportMetric(100*cpu1.busyFraction(cpu0), "machine-busy-%")
			ours := time.Duration(0)
			for _, k := range cpuGroups {
				d := used[k]
				ours += d
				b.ReportMetric(per(d), k+"-cpu-ms/create")
			}
			// Whatever else ran on the machine: other users' builds and tests.
			machine := time.Duration((cpu1.busy - cpu0.busy) * float64(time.Second) / 100)
			b.ReportMetric(per(machine-ours), "other-cpu-ms/create")
			b.Logf("workers=%d: %d creates in %s; per worker %s; load average %s → %s",
				n, b.N, elapsed.Round(time.Millisecond), strings.Join(share, "/"), cpu0.load, cpu1.load)
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

type cpuSample struct {
	busy, total float64 // machine-wide USER_HZ ticks, /proc/stat
	procs       map[int]procCPU
	load        string
}

type procCPU struct {
	group string
	cpu   time.Duration
}

// busyFraction is the share of the machine's CPU time between s0 and s
// spent outside idle and iowait.
func (s cpuSample) busyFraction(s0 cpuSample) float64 {
	if s.total == s0.total {
		return 0
	}
	return (s.busy - s0.busy) / (s.total - s0.total)
}

// since returns each group's CPU time between s0 and s: per process, so a
// process that started in between counts whole and one that ended is lost.
func (s cpuSample) since(s0 cpuSample) map[string]time.Duration {
	out := map[string]time.Duration{}
	for pid, p := range s.procs {
		out[p.group] += p.cpu - s0.procs[pid].cpu
	}
	return out
}

// sampleCPU reads the machine's CPU counters and the CPU time of this
// process ("bench": the client), of its children by name (the server, the
// workers, versitygw), and of the postgres backends serving their
// connections — not other users' on the same Postgres.
func sampleCPU() cpuSample {
	s := cpuSample{procs: map[int]procCPU{}}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0])[1:]
		for i, v := range f {
			x, _ := strconv.ParseFloat(v, 64)
			s.total += x
			if i != 3 && i != 4 { // idle, iowait
				s.busy += x
			}
		}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		s.load = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	self := os.Getpid()
	type proc struct {
		pid, ppid int
		comm      string
		cpu       time.Duration
	}
	var all []proc
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, _ := strconv.Atoi(filepath.Base(d))
		b, err := os.ReadFile(filepath.Join(d, "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ... utime(14) stime(15)
		st := string(b)
		open, closing := strings.IndexByte(st, '('), strings.LastIndexByte(st, ')')
		if open < 0 || closing < open {
			continue
		}
		rest := strings.Fields(st[closing+1:])
		if len(rest) < 13 {
			continue
		}
		ppid, _ := strconv.Atoi(rest[1])
		ut, _ := strconv.ParseInt(rest[11], 10, 64)
		stm, _ := strconv.ParseInt(rest[12], 10, 64)
		all = append(all, proc{pid, ppid, st[open+1 : closing], time.Duration(ut+stm) * time.Second / 100}) // USER_HZ
	}
	ours := map[int]bool{}
	for _, p := range all {
		group := ""
		switch {
		case p.pid == self:
			group = "bench"
		case p.ppid == self && strings.HasPrefix(p.comm, "temporal-server"):
			group = "temporal-server"
		case p.ppid == self && strings.HasPrefix(p.comm, "graft-worker"):
			group = "graft-worker"
		case p.ppid == self && p.comm == "versitygw":
			group = "versitygw"
		}
		if group != "" {
			s.procs[p.pid] = procCPU{group, p.cpu}
			ours[p.pid] = true
		}
	}
	// A backend's title is "postgres: user db 127.0.0.1(PORT) state", PORT
	// the client's: ours when one of our processes holds that port.
	ports := clientPorts(ours)
	backend := regexp.MustCompile(`\((\d+)\)`)
	for _, p := range all {
		if p.comm != "postgres" {
			continue
		}
		title, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.pid))
		if err != nil {
			continue
		}
		if m := backend.FindSubmatch(title); m != nil {
			if port, _ := strconv.Atoi(string(m[1])); ports[port] {
				s.procs[p.pid] = procCPU{"postgres", p.cpu}
			}
		}
	}
	return s
}

// clientPorts returns the local ports of the TCP connections to port 5432
// held by the given processes.
func clientPorts(pids map[int]bool) map[int]bool {
	inodes := map[string]bool{}
	for pid := range pids {
		fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
		for _, fd := range fds {
			if l, err := os.Readlink(fd); err == nil && strings.HasPrefix(l, "socket:[") {
				inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
			}
		}
	}
	ports := map[int]bool{}
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 || !inodes[f[9]] || !strings.HasSuffix(f[2], ":1538") { // remote port 5432
				continue
			}
			if p, err := strconv.ParseInt(f[1][strings.LastIndexByte(f[1], ':')+1:], 16, 32); err == nil {
				ports[int(p)] = true
			}
		}
	}
	return ports
}
