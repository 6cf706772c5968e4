package workercmd

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/graftworks/graft/internal/catalog"
)

// scrapeTimeout bounds the ledger queries of one scrape.
const scrapeTimeout = 3 * time.Second

// deletedEvery spaces the counts of deleted keys: they count a table that
// only grows, while the other figures are over unfinished rows.
const deletedEvery = time.Minute

// ledgerCollector reads its figures from the ledger on each scrape: the same
// from every worker (alert on max, not sum), and right after a restart.
type ledgerCollector struct {
	mu           sync.Mutex
	cat          *catalog.Catalog
	deletedTally []catalog.DeletedTally // read at most every deletedEvery
	deletedAt    time.Time

	up, inDoubt, inDoubtOldest, unfinished, witnesses, deleted, swept *prometheus.Desc
}

func newLedgerCollector() *ledgerCollector {
	return &ledgerCollector{
		up: prometheus.NewDesc("graft_ledger_up", "1 when this scrape could read the ledger's figures, else 0.", nil, nil),
		inDoubt: prometheus.NewDesc("graft_in_doubt",
			"Operations in doubt in the ledger (a write may still land; the workflow settles it), by kind. The same from every worker.",
			[]string{"kind"}, nil),
		inDoubtOldest: prometheus.NewDesc("graft_in_doubt_oldest_seconds",
			"How long the longest-standing in-doubt operation of a kind has been in doubt; 0 when none is.", []string{"kind"}, nil),
		unfinished: prometheus.NewDesc("graft_operations_unfinished",
			"Operations not done in the ledger, by kind and state (running, in_doubt, or a state a later ledger adds).",
			[]string{"kind", "state"}, nil),
		witnesses: prometheus.NewDesc("graft_witnesses_unsettled",
			"Incarnations whose ref may still land (witness intent, cloned or in_doubt), by state.", []string{"state"}, nil),
		deleted: prometheus.NewDesc("graft_cleanup_deleted_total",
			"Keys cleanup runs have deleted, by kind (commit, table_version, object), as the ledger records them.", []string{"kind"}, nil),
		swept: prometheus.NewDesc("graft_objects_swept_total", "Data objects cleanup runs have deleted, as the ledger records them.", nil, nil),
	}
}

func (l *ledgerCollector) attach(cat *catalog.Catalog) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cat, l.deletedTally = cat, nil
}

func (l *ledgerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{l.up, l.inDoubt, l.inDoubtOldest, l.unfinished, l.witnesses, l.deleted, l.swept} {
		ch <- d
	}
}

// read asks the ledger for a scrape's figures; false when it is detached or
// does not answer.
func (l *ledgerCollector) read() (
	ops []catalog.UnfinishedTally, wits []catalog.WitnessTally, dels []catalog.DeletedTally, ok bool,
) {
	l.mu.Lock()
	cat, dels, at := l.cat, l.deletedTally, l.deletedAt
	l.mu.Unlock()
	if cat == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	var err error
	if ops, err = cat.OperationUnfinishedTally(ctx); err != nil {
		return
	}
	if wits, err = cat.IncarnationUnsettledTally(ctx); err != nil {
		return
	}
	if dels == nil || time.Since(at) >= deletedEvery {
		fresh, err := cat.CondemnedDeletedTally(ctx)
		if err != nil {
			return
		}
		dels = append([]catalog.DeletedTally{}, fresh...)
		l.mu.Lock()
		l.deletedTally, l.deletedAt = dels, time.Now()
		l.mu.Unlock()
	}
	return ops, wits, dels, true
}

func (l *ledgerCollector) Collect(ch chan<- prometheus.Metric) {
	ops, wits, dels, ok := l.read()
	up := 0.0
	if ok {
		up = 1
	}
	ch <- prometheus.MustNewConstMetric(l.up, prometheus.GaugeValue, up)
	if !ok {
		return
	}
	now := time.Now()
	inDoubt := map[catalog.OperationKind]float64{}
	oldest := map[catalog.OperationKind]float64{}
	for _, k := range catalog.OperationKinds { // every kind has a series, 0 when none is in doubt
		inDoubt[k], oldest[k] = 0, 0
	}
	for _, t := range ops {
		ch <- prometheus.MustNewConstMetric(l.unfinished, prometheus.GaugeValue, float64(t.Count), string(t.Kind), string(t.State))
		if t.State == catalog.OperationInDoubt {
			inDoubt[t.Kind] += float64(t.Count)
			oldest[t.Kind] = max(oldest[t.Kind], now.Sub(t.OldestUpdate).Seconds())
		}
	}
	for k, v := range inDoubt {
		ch <- prometheus.MustNewConstMetric(l.inDoubt, prometheus.GaugeValue, v, string(k))
		ch <- prometheus.MustNewConstMetric(l.inDoubtOldest, prometheus.GaugeValue, oldest[k], string(k))
	}
	states := map[catalog.IncarnationState]float64{catalog.IncarnationIntent: 0, catalog.IncarnationCloned: 0, catalog.IncarnationInDoubt: 0}
	for _, t := range wits {
		states[t.State] += float64(t.Count)
	}
	for s, v := range states {
		ch <- prometheus.MustNewConstMetric(l.witnesses, prometheus.GaugeValue, v, string(s))
	}
	objects := 0.0
	for _, t := range dels {
		ch <- prometheus.MustNewConstMetric(l.deleted, prometheus.CounterValue, float64(t.Count), string(t.Kind))
		if t.Kind == catalog.ObjectData {
			objects += float64(t.Count)
		}
	}
	ch <- prometheus.MustNewConstMetric(l.swept, prometheus.CounterValue, objects)
}
