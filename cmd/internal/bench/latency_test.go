package bench

import (
	"math"
	"slices"
	"testing"
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

func TestLatencies_Percentile_IsNearestRank(t *testing.T) {
	var l Latencies
	// 1..100 ms, added out of order.
	for i := 100; i >= 1; i-- {
		l.Add(time.Duration(i) * time.Millisecond)
	}
	cases := []struct {
		p    float64
		want time.Duration
	}{
		{0, 1 * time.Millisecond},
		{1, 1 * time.Millisecond},
		{50, 50 * time.Millisecond},
		{50.5, 51 * time.Millisecond},
		{99, 99 * time.Millisecond},
		{100, 100 * time.Millisecond},
		{150, 100 * time.Millisecond},
	}
	for _, c := range cases {
		if got := l.Percentile(c.p); got != c.want {
			t.Errorf("Percentile(%v) = %v, want %v", c.p, got, c.want)
		}
	}
}

func TestLatencies_Percentile_SmallSamples(t *testing.T) {
	var l Latencies
	if got := l.Percentile(50); got != 0 {
		t.Fatalf("empty Percentile(50) = %v, want 0", got)
	}
	l.Add(7 * time.Microsecond)
	if got := l.Percentile(99); got != 7*time.Microsecond {
		t.Fatalf("one sample Percentile(99) = %v, want 7µs", got)
	}
	l.Add(3 * time.Microsecond)
	// Two samples: p50 is the first (rank 1), p99 the second (rank 2).
	if got := l.Percentile(50); got != 3*time.Microsecond {
		t.Fatalf("Percentile(50) = %v, want 3µs", got)
	}
	if got := l.Percentile(99); got != 7*time.Microsecond {
		t.Fatalf("Percentile(99) = %v, want 7µs", got)
	}
	// Adding after a percentile re-sorts.
	l.Add(1 * time.Microsecond)
	if got := l.Percentile(0); got != 1*time.Microsecond {
		t.Fatalf("Percentile(0) after Add = %v, want 1µs", got)
	}
	if l.Len() != 3 {
		t.Fatalf("Len = %d, want 3", l.Len())
	}
}
