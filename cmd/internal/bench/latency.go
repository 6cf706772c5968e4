package bench

import (
	"math"
	"slices"
	"time"
)

// Latencies collects one duration per measured operation and reports
// nearest-rank percentiles of them. The zero value is ready to use; it is not
// safe for concurrent use.
type Latencies struct {
	d      []time.Duration
	sorted bool
}

// Add records one operation's duration.
func (l *Latencies) Add(d time.Duration) {
	l.d = append(l.d, d)
	l.sorted = false
}

// Len returns how many durations were recorded.
func (l *Latencies) Len() int { return len(l.d) }

// Percentile returns the nearest-rank p-th percentile: the smallest recorded
// duration that at least p percent of the recorded durations do not exceed.
// p is clamped to [0, 100]; p = 0 gives the minimum. With nothing recorded it
// returns 0.
func (l *Latencies) Percentile(p float64) time.Duration {
	if len(l.d) == 0 {
		return 0
	}
	if !l.sorted {
		slices.Sort(l.d)
		l.sorted = true
	}
	rank := int(math.Ceil(p / 100 * float64(len(l.d))))
	rank = max(1, min(rank, len(l.d)))
	return l.d[rank-1]
}
