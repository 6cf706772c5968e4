package workercmd

import (
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/client"
)

// The Temporal SDK reports metrics through client.MetricsHandler: a name, a
// set of tags that varies from call site to call site (the same name may come
// with namespace and task_queue here, with operation there), and an
// increment. Prometheus wants one fixed set of label names per metric. So the
// adapter keeps every (name, tag set) series it was given and, when scraped,
// exports each metric with the union of its series' label names, filling a
// label a series lacks with "" — which Prometheus treats as the label being
// absent, so no series changes meaning.
//
// Names: counters get "_total", timers become histograms in seconds with
// "_seconds", gauges keep their name; characters Prometheus does not allow
// become '_'.

// sdkTimerBuckets span the SDK's latencies, from a local activity's
// milliseconds to a long poll's minute.
var sdkTimerBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}

type sdkKind int

const (
	sdkCounter sdkKind = iota
	sdkGauge
	sdkTimer
)

// sdkSuffix ends the exported name of each kind's metrics.
var sdkSuffix = [...]string{sdkCounter: "_total", sdkGauge: "", sdkTimer: "_seconds"}

// sdkCollector holds every series the SDK reported; it is an unchecked
// prometheus.Collector, since its metrics are not known in advance.
type sdkCollector struct {
	mu       sync.Mutex            // guards the families and every series' figures
	families map[string]*sdkFamily // by exported name
}

type sdkFamily struct {
	kind   sdkKind
	series map[string]*sdkSeries // by tagKey
}

// sdkSeries is the SDK's counter, gauge or timer under one tag set; a nil
// one, dropped, records nothing.
type sdkSeries struct {
	mu      *sync.Mutex // the collector's
	tags    map[string]string
	value   float64  // counter: count; gauge: last value
	buckets []uint64 // timer: per bucket, not cumulative; the last is +Inf
	count   uint64
	sum     float64
}

func newSDKCollector() *sdkCollector { return &sdkCollector{families: map[string]*sdkFamily{}} }

func (c *sdkCollector) root() client.MetricsHandler {
	return &sdkHandler{c: c, tags: map[string]string{}}
}

// Describe sends nothing, which makes the collector unchecked.
func (c *sdkCollector) Describe(chan<- *prometheus.Desc) {}

// Collect exports every series, each metric with the union of its label names.
func (c *sdkCollector) Collect(ch chan<- prometheus.Metric) {
	var out []prometheus.Metric
	c.mu.Lock()
	for name, f := range c.families {
		labelSet := map[string]bool{}
		for _, s := range f.series {
			for k := range s.tags {
				labelSet[k] = true
			}
		}
		labels := slices.Sorted(maps.Keys(labelSet))
		desc := prometheus.NewDesc(name, "Temporal SDK metric.", labels, nil)
		for _, s := range f.series {
			values := make([]string, len(labels))
			for i, l := range labels {
				values[i] = s.tags[l]
			}
			out = append(out, s.metric(desc, f.kind, values))
		}
	}
	c.mu.Unlock()
	for _, m := range out {
		ch <- m
	}
}

// metric is the series' figures as a constant metric; the collector's lock is held.
func (s *sdkSeries) metric(desc *prometheus.Desc, kind sdkKind, values []string) prometheus.Metric {
	var m prometheus.Metric
	var err error
	switch kind {
	case sdkCounter:
		m, err = prometheus.NewConstMetric(desc, prometheus.CounterValue, s.value, values...)
	case sdkGauge:
		m, err = prometheus.NewConstMetric(desc, prometheus.GaugeValue, s.value, values...)
	default:
		cumulative := make(map[float64]uint64, len(sdkTimerBuckets))
		var total uint64
		for i, ub := range sdkTimerBuckets {
			total += s.buckets[i]
			cumulative[ub] = total
		}
		m, err = prometheus.NewConstHistogram(desc, s.count, s.sum, cumulative, values...)
	}
	if err != nil {
		return prometheus.NewInvalidMetric(desc, err)
	}
	return m
}

// series returns the series of name under the handler's tags, creating it.
func (c *sdkCollector) series(kind sdkKind, name string, h *sdkHandler) *sdkSeries {
	name = sanitizeName(name)
	if !strings.HasSuffix(name, sdkSuffix[kind]) {
		name += sdkSuffix[kind]
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	f, ok := c.families[name]
	if !ok {
		f = &sdkFamily{kind: kind, series: map[string]*sdkSeries{}}
		c.families[name] = f
	}
	if f.kind != kind {
		return nil // the same exported name as another kind: dropped
	}
	s, ok := f.series[h.key]
	if !ok {
		s = &sdkSeries{mu: &c.mu, tags: h.tags}
		if kind == sdkTimer {
			s.buckets = make([]uint64, len(sdkTimerBuckets)+1)
		}
		f.series[h.key] = s
	}
	return s
}

// sdkHandler is a client.MetricsHandler bound to one tag set.
type sdkHandler struct {
	c    *sdkCollector
	tags map[string]string // sanitised names → values; never modified
	key  string            // canonical encoding of tags
}

var _ client.MetricsHandler = (*sdkHandler)(nil)

func (h *sdkHandler) WithTags(tags map[string]string) client.MetricsHandler {
	merged := maps.Clone(h.tags)
	for k, v := range tags {
		merged[sanitizeName(k)] = strings.ToValidUTF8(v, "\uFFFD")
	}
	return &sdkHandler{c: h.c, tags: merged, key: tagKey(merged)}
}

func (h *sdkHandler) Counter(name string) client.MetricsCounter {
	return h.c.series(sdkCounter, name, h)
}
func (h *sdkHandler) Gauge(name string) client.MetricsGauge { return h.c.series(sdkGauge, name, h) }
func (h *sdkHandler) Timer(name string) client.MetricsTimer { return h.c.series(sdkTimer, name, h) }

func (s *sdkSeries) Inc(d int64) {
	if d > 0 { // a Prometheus counter never goes down
		s.update(func() { s.value += float64(d) })
	}
}

func (s *sdkSeries) Update(v float64) { s.update(func() { s.value = v }) }

func (s *sdkSeries) Record(d time.Duration) {
	v := d.Seconds()
	i := sort.SearchFloat64s(sdkTimerBuckets, v) // first bucket with ub >= v
	s.update(func() {
		s.buckets[i]++
		s.count++
		s.sum += v
	})
}

// update changes the series' figures under the collector's lock.
func (s *sdkSeries) update(change func()) {
	if s != nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		change()
	}
}

// tagKey encodes a tag set canonically: sorted by name, each name and value
// length-prefixed so no value can imitate a separator.
func tagKey(tags map[string]string) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		for _, s := range []string{k, tags[k]} {
			b.WriteString(strconv.Itoa(len(s)))
			b.WriteByte(':')
			b.WriteString(s)
		}
	}
	return b.String()
}

// sanitizeName makes s a valid Prometheus metric or label name.
func sanitizeName(s string) string {
	if s == "" {
		return "_"
	}
	b := []byte(s)
	for i, ch := range b {
		ok := ch == '_' || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (i > 0 && ch >= '0' && ch <= '9')
		if !ok {
			b[i] = '_'
		}
	}
	return string(b)
}
