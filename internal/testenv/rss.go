package testenv

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// ResetPeakRSS collects garbage and starts the process's peak resident set
// again from now (Linux: /proc/self/clear_refs), for a benchmark to report
// the memory of one step with PeakRSSMiB.
func ResetPeakRSS() {
	debug.FreeOSMemory() // collects, and returns the freed pages, so the resident set is the live heap
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

// PeakRSSMiB is the process's peak resident set (VmHWM) in MiB since it
// started or since ResetPeakRSS; 0 where /proc has none.
func PeakRSSMiB() float64 {
	status, _ := os.ReadFile("/proc/self/status")
	for line := range strings.SplitSeq(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			return kb / 1024
		}
	}
	return 0
}
