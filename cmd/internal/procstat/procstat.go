// Package procstat samples CPU time from Linux's /proc for the benchmarks:
// the machine's busy share and the CPU time of the processes a benchmark
// started — its own, its children's by name, and the Postgres backends serving
// their connections — so a throughput that does not scale can be put down to
// the cores it needs (docs/benchmarks.md). Off Linux a sample is empty.
package procstat

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Sample is the machine's CPU counters and the CPU time of the processes
// Take accounts for, at one instant.
type Sample struct {
	Busy, Total float64 // machine-wide USER_HZ ticks, /proc/stat
	Procs       map[int]Proc
	Load        string // /proc/loadavg's three averages
}

// Proc is one accounted process: its group and its CPU time so far.
type Proc struct {
	Group string
	CPU   time.Duration
}

// BusyFraction is the share of the machine's CPU time between s0 and s
// spent outside idle and iowait.
func (s Sample) BusyFraction(s0 Sample) float64 {
	if s.Total == s0.Total {
		return 0
	}
	return (s.Busy - s0.Busy) / (s.Total - s0.Total)
}

// Since returns each group's CPU time between s0 and s: per process, so a
// process that started in between counts whole and one that ended is lost.
func (s Sample) Since(s0 Sample) map[string]time.Duration {
	out := map[string]time.Duration{}
	for pid, p := range s.Procs {
		out[p.Group] += p.CPU - s0.Procs[pid].CPU
	}
	return out
}

// Take reads the machine's CPU counters and the CPU time of this process
// (group "bench": the client and harness), of its children that child names
// a group for (by command name; "" leaves one out), and of the postgres
// backends serving their connections ("postgres") — not other users'
// processes on the same machine or the same Postgres.
func Take(child func(comm string) string) Sample {
	s := Sample{Procs: map[int]Proc{}}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0])[1:]
		for i, v := range f {
			x, _ := strconv.ParseFloat(v, 64)
			s.Total += x
			if i != 3 && i != 4 { // idle, iowait
				s.Busy += x
			}
		}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		s.Load = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	self := os.Getpid()
	ours, backends := map[int]bool{}, map[int]time.Duration{}
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
		comm, cpu := st[open+1:closing], time.Duration(ut+stm)*time.Second/100 // USER_HZ
		group := ""
		switch {
		case pid == self:
			group = "bench"
		case ppid == self:
			group = child(comm)
		}
		if group != "" {
			s.Procs[pid] = Proc{group, cpu}
			ours[pid] = true
		}
		if comm == "postgres" {
			backends[pid] = cpu
		}
	}
	// A backend's title is "postgres: user db 127.0.0.1(PORT) state", PORT
	// the client's: ours when one of our processes holds that port.
	ports := clientPorts(ours)
	backend := regexp.MustCompile(`\((\d+)\)`)
	for pid, cpu := range backends {
		title, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		if m := backend.FindSubmatch(title); m != nil {
			if port, _ := strconv.Atoi(string(m[1])); ports[port] {
				s.Procs[pid] = Proc{"postgres", cpu}
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
