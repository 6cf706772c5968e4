package bench

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/oklog/ulid/v2"

	"github.com/graftworks/graft/internal/testenv"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/faults"
	"github.com/graftworks/graft/storage/localfs"
	"github.com/graftworks/graft/storage/s3"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// backend opens a fresh, empty store for one test or benchmark; wire counts
// the HTTP requests the store sends, nil for a store without HTTP.
type backend struct {
	name string
	open func(tb testing.TB) (s storage.Store, wire *wireCounter)
}

// target is a store under measurement: every call counted by the faults
// wrapper (with no rules) and, for an HTTP store, every request on the wire.
type target struct {
	*faults.Store
	wire *wireCounter
}

// target returns a fresh, empty target on be.
func (be backend) target(tb testing.TB) target {
	tb.Helper()
	s, wire := be.open(tb)
	return target{Store: faults.Wrap(s), wire: wire}
}

// reset forgets every request counted so far.
func (t target) reset() {
	t.ResetCounts()
	if t.wire != nil {
		t.wire.n.Store(0)
	}
}

// wireCounter is an http.RoundTripper that counts the requests it sends, so
// a retry inside the SDK, which the store's own counts cannot see, shows.
type wireCounter struct {
	next http.RoundTripper
	n    atomic.Int64
}

func (c *wireCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.RoundTrip(r)
}

// backends are the stores every figure is measured on.
var backends = []backend{
	{"localfs", openLocalFS},
	{"versitygw", openVersityGW},
}

func openLocalFS(tb testing.TB) (storage.Store, *wireCounter) {
	tb.Helper()
	st, err := localfs.Open(tb.TempDir())
	if err != nil {
		tb.Fatalf("open local store: %v", err)
	}
	return st, nil
}

func openVersityGW(tb testing.TB) (storage.Store, *wireCounter) {
	tb.Helper()
	srv := testenv.VersityGW(tb)
	// The SDK's own default transport, counted.
	wire := &wireCounter{next: awshttp.NewBuildableClient().GetTransport()}
	st, err := s3.New(context.Background(), s3.Config{
		Endpoint:        srv.Endpoint,
		Region:          srv.Region,
		Bucket:          srv.NewBucket(tb),
		PathStyle:       true,
		AccessKeyID:     srv.AccessKey,
		SecretAccessKey: srv.SecretKey,
		HTTPClient:      &http.Client{Transport: wire},
	})
	if err != nil {
		tb.Fatalf("open s3 store: %v", err)
	}
	return st, wire
}

// The graph every head-discovery figure reads. Fixed identifiers and times
// make its bytes, and so every run, reproducible.
const benchGraph = "bench"

var (
	mainTree = ulid.MustParse("01J0000000000000000000MA1N")
	pins     = map[string]ulid.ULID{
		"orders":    ulid.MustParse("01J000000000000000000VERA1"),
		"customers": ulid.MustParse("01J000000000000000000VERB2"),
		"products":  ulid.MustParse("01J000000000000000000VERC3"),
	}
	t0 = time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)
)

// historyDepths are the history lengths the head-read test checks on every
// backend: main with only its root commit, and main with 64 commits on top.
var historyDepths = []int{0, 64}

// sent returns how many requests of each kind reached t's inner store since
// its counts were last reset, leaving out kinds with none.
func (t target) sent() map[faults.Op]int {
	out := map[faults.Op]int{}
	for op, t := range t.Counts() {
		if t.Sent > 0 {
			out[op] = t.Sent
		}
	}
	return out
}

// requireOneHTTPRequestEach fails tb unless, on an HTTP store, the requests
// on the wire since the last reset number exactly the store calls: no call
// was retried or split, so the store's counts are the server's counts.
func (t target) requireOneHTTPRequestEach(tb testing.TB) {
	tb.Helper()
	if t.wire == nil {
		return
	}
	calls := 0
	for _, n := range t.sent() {
		calls += n
	}
	if wire := int(t.wire.n.Load()); wire != calls {
		tb.Errorf("%d HTTP requests for %d store calls %v", wire, calls, t.sent())
	}
}

// perOpUnit names the per-kind request metric of each operation.
var perOpUnit = map[faults.Op]string{
	faults.OpGet:         "gets/op",
	faults.OpHead:        "heads/op",
	faults.OpPut:         "puts/op",
	faults.OpList:        "lists/op",
	faults.OpDelete:      "deletes/op",
	faults.OpDeleteBatch: "delete_batches/op",
}

// report adds the requests per operation, in all and per kind (and, for an
// HTTP store, on the wire), and the p50 and p99 latency of the operations in
// lat to b's results.
func report(b *testing.B, t target, lat *Latencies) {
	b.Helper()
	n := float64(lat.Len())
	if n == 0 {
		b.Fatal("no operation measured")
	}
	total := 0
	for _, op := range faults.Ops {
		c := t.Count(op).Sent
		if c == 0 {
			continue
		}
		total += c
		b.ReportMetric(float64(c)/n, perOpUnit[op])
	}
	b.ReportMetric(float64(total)/n, "requests/op")
	if t.wire != nil {
		b.ReportMetric(float64(t.wire.n.Load())/n, "http-requests/op")
	}
	b.ReportMetric(micros(lat.Percentile(50)), "p50-µs")
	b.ReportMetric(micros(lat.Percentile(99)), "p99-µs")
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
