package bench

import (
	"strings"

	"github.com/graftworks/graft/cmd/internal/procstat"
)

// CPU accounting for the engine benchmarks: where a row's CPU went, per
// operation, so a throughput that does not scale can be put down to the
// cores it needs (docs/benchmarks.md): this process (client, worker and
// harness), the Temporal dev server it started, and the Postgres backends
// serving its connections — not other users' processes on the same machine.

type cpuSample = procstat.Sample

func sampleCPU() cpuSample {
	return procstat.Take(func(comm string) string {
		if strings.HasPrefix(comm, "temporal") {
			return "temporal"
		}
		return ""
	})
}
