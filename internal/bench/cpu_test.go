package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// CPU accounting for the engine benchmarks: where a row's CPU went, per
// operation, so a throughput that does not scale can be put down to the
// cores it needs (docs/benchmarks.md). Adapted from internal/prodtier's
// sampler: this process (client, worker and harness), the Temporal dev
// server it started, and the Postgres backends serving its connections —
// not other users' processes on the same machine.

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
		case p.ppid == self && strings.HasPrefix(p.comm, "temporal"):
			group = "temporal"
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
