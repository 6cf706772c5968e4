package workercmd

import (
	"io"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"
)

// scrape returns what /metrics serves for m, failing the test if the registry
// cannot be gathered consistently.
func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	if _, err := m.registry.Gather(); err != nil {
		t.Fatalf("gather: %v", err)
	}
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Result().Body)
	return string(body)
}

func wantLine(t *testing.T, body, pattern string) {
	t.Helper()
	if !regexp.MustCompile(`(?m)^` + pattern + `$`).MatchString(body) {
		t.Errorf("no line matching %q in:\n%s", pattern, grepTemporal(body))
	}
}

func grepTemporal(body string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "temporal_") || strings.HasPrefix(l, "graft_") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestSDKHandler_SameNameWithDifferentTags_ExportsUnionOfLabels(t *testing.T) {
	m := NewMetrics()
	h := m.SDKHandler()
	h.WithTags(map[string]string{"namespace": "default"}).Counter("temporal_request").Inc(2)
	h.WithTags(map[string]string{"operation": "PollActivityTaskQueue"}).Counter("temporal_request").Inc(1)
	h.WithTags(map[string]string{"operation": "PollActivityTaskQueue"}).Counter("temporal_request").Inc(4)

	body := scrape(t, m)
	wantLine(t, body, `temporal_request_total\{namespace="default",operation=""\} 2`)
	wantLine(t, body, `temporal_request_total\{namespace="",operation="PollActivityTaskQueue"\} 5`)
	wantLine(t, body, `# TYPE temporal_request_total counter`)
}

func TestSDKHandler_Timer_IsHistogramInSeconds(t *testing.T) {
	m := NewMetrics()
	timer := m.SDKHandler().WithTags(map[string]string{"task_queue": "graft"}).Timer("temporal_activity_execution_latency")
	timer.Record(3 * time.Millisecond)
	timer.Record(2 * time.Second)

	body := scrape(t, m)
	wantLine(t, body, `# TYPE temporal_activity_execution_latency_seconds histogram`)
	wantLine(t, body, `temporal_activity_execution_latency_seconds_bucket\{task_queue="graft",le="0.0025"\} 0`)
	wantLine(t, body, `temporal_activity_execution_latency_seconds_bucket\{task_queue="graft",le="0.005"\} 1`)
	wantLine(t, body, `temporal_activity_execution_latency_seconds_bucket\{task_queue="graft",le="2.5"\} 2`)
	wantLine(t, body, `temporal_activity_execution_latency_seconds_bucket\{task_queue="graft",le="\+Inf"\} 2`)
	wantLine(t, body, `temporal_activity_execution_latency_seconds_sum\{task_queue="graft"\} 2.003`)
	wantLine(t, body, `temporal_activity_execution_latency_seconds_count\{task_queue="graft"\} 2`)
}

func TestSDKHandler_GaugeKeepsLastValue_WithTagsOverridesAndSanitises(t *testing.T) {
	m := NewMetrics()
	h := m.SDKHandler().WithTags(map[string]string{"worker_type": "ActivityWorker", "task-queue": "a"})
	h = h.WithTags(map[string]string{"task-queue": "b"})
	g := h.Gauge("temporal.num_pollers")
	g.Update(3)
	g.Update(1.5)

	body := scrape(t, m)
	wantLine(t, body, `temporal_num_pollers\{task_queue="b",worker_type="ActivityWorker"\} 1.5`)
}

func TestSDKHandler_NegativeCounterIncrement_IsIgnored(t *testing.T) {
	m := NewMetrics()
	c := m.SDKHandler().Counter("temporal_worker_start")
	c.Inc(3)
	c.Inc(-2)
	wantLine(t, scrape(t, m), `temporal_worker_start_total 3`)
}

func TestMetrics_Observer_UpdatesGraftMetrics(t *testing.T) {
	m := NewMetrics()
	body := scrape(t, m)
	// Present at zero before anything happened, so alerts can be written against them.
	wantLine(t, body, `graft_operations_total\{kind="create_branch",outcome="created"\} 0`)
	wantLine(t, body, `graft_settle_seconds_count\{kind="create_branch"\} 0`)

	m.OperationFinished("create_branch", "created")
	m.OperationFinished("create_branch", "created")
	m.OperationFinished("create_branch", "in_doubt")
	m.Settled("create_branch", 90*time.Second)

	body = scrape(t, m)
	wantLine(t, body, `graft_operations_total\{kind="create_branch",outcome="created"\} 2`)
	wantLine(t, body, `graft_operations_total\{kind="create_branch",outcome="in_doubt"\} 1`)
	wantLine(t, body, `graft_settle_seconds_bucket\{kind="create_branch",le="60"\} 0`)
	wantLine(t, body, `graft_settle_seconds_bucket\{kind="create_branch",le="120"\} 1`)
}
