package workercmd

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.temporal.io/sdk/client"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/internal/catalog"
)

// Metrics is the worker's Prometheus registry: graft's own metrics, the
// Temporal SDK's (through SDKHandler) and the Go runtime's. It implements
// activities.Observer. What the ledger knows — operations in doubt, their
// age, unsettled witnesses, keys cleanup deleted — is read from the ledger on
// every scrape (ledger.go), so every worker reports the same figures and a
// restarted one reports them at once. It is safe for concurrent use.
type Metrics struct {
	registry   *prometheus.Registry
	operations *prometheus.CounterVec
	settle     *prometheus.HistogramVec
	ledger     *ledgerCollector
	sdk        *sdkCollector
}

var _ activities.Observer = (*Metrics)(nil)

// settleBuckets spans what settling an in-doubt step takes: seconds when a
// retry succeeds, up to a day when storage stays ambiguous.
var settleBuckets = []float64{1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400}

// NewMetrics returns a registry holding every metric the worker exports.
// Every operation kind and outcome of the catalog starts at zero, so a series
// exists (and alerts can use it) before the first operation ends.
func NewMetrics() *Metrics {
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		operations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "graft_operations_total",
			Help: "Operations that reached a definitive outcome, by kind and outcome.",
		}, []string{"kind", "outcome"}),
		settle: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "graft_settle_seconds",
			Help:    "How long an in-doubt step stayed in doubt before it settled, by operation kind.",
			Buckets: settleBuckets,
		}, []string{"kind"}),
		ledger: newLedgerCollector(),
		sdk:    newSDKCollector(),
	}
	for _, k := range catalog.OperationKinds {
		for _, o := range catalog.Outcomes {
			m.operations.WithLabelValues(string(k), string(o))
		}
		m.settle.WithLabelValues(string(k))
	}
	m.registry.MustRegister(
		m.operations, m.settle, m.ledger, m.sdk,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

func (m *Metrics) OperationFinished(kind, outcome string) {
	m.operations.WithLabelValues(kind, outcome).Inc()
}

func (m *Metrics) Settled(kind string, after time.Duration) {
	m.settle.WithLabelValues(kind).Observe(after.Seconds())
}

// AttachLedger makes every scrape read the ledger's figures from cat; nil
// detaches it (the figures are then left out, and graft_ledger_up is 0).
func (m *Metrics) AttachLedger(cat *catalog.Catalog) { m.ledger.attach(cat) }

// SDKHandler is the Temporal client's handler of its metrics into this registry.
func (m *Metrics) SDKHandler() client.MetricsHandler { return m.sdk.root() }

// Handler serves the registry in the Prometheus exposition format. A metric
// that fails to collect is left out and the rest still served.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}
