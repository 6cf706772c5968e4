package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	sdkclient "go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/internal/catalog/catalogtest"
	"github.com/graftworks/graft/internal/testenv"
	"github.com/graftworks/graft/storage/s3"
	"github.com/graftworks/graft/worker"
)

// TestStoreDown_BranchCreate_SaysOnceWhatIsUnreachable_ExitsUnavailablePromptly is
// the operator's story with the S3 server stopped (#9.2, #9.4): `graft branch create`
// says once, briefly, that the store does not answer and that it waits; when the
// create's first step gives up, the workflow fails and the command returns at once —
// exit 9, one short message naming the store, and, since nothing was recorded, a next
// step that does not point at a ledger row that does not exist.
func TestStoreDown_BranchCreate_SaysOnceWhatIsUnreachable_ExitsUnavailablePromptly(t *testing.T) {
	t.Parallel()
	ts := testenv.Temporal(t)
	cat := catalogtest.Open(t)
	dead := "http://" + closedAddr(t) // where the stopped S3 server listened
	store, err := s3.New(context.Background(), s3.Config{Endpoint: dead, Bucket: "graft", PathStyle: true,
		AccessKeyID: "k", SecretAccessKey: "s", RequestTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	quiet := sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	tc, err := sdkclient.Dial(sdkclient.Options{HostPort: ts.HostPort, Namespace: ts.Namespace, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)
	queue := fmt.Sprintf("graft-storedown-%d", time.Now().UnixNano())
	w := sdkworker.New(tc, queue, sdkworker.Options{})
	worker.Register(w, &activities.Activities{Store: store, Catalog: cat})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	p := &inProcess{env: map[string]string{
		"GRAFT_TEMPORAL_ADDRESS": ts.HostPort, "GRAFT_NAMESPACE": ts.Namespace, "GRAFT_TASK_QUEUE": queue,
		"GRAFT_S3_ENDPOINT": dead, "GRAFT_S3_BUCKET": "graft", "GRAFT_S3_PATH_STYLE": "true", "GRAFT_DIAL_TIMEOUT": "3s",
		"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s",
		"DATABASE_URL": catalogtest.DatabaseURL(), "GRAFT_DB_SCHEMA": cat.Schema(),
	}}

	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	began := time.Now()
	r := p.runCtx(ctx, t, "branch", "create", "g", "b")
	took := time.Since(began)
	if r.code != 9 {
		t.Fatalf("exit %d after %s, want 9 (unavailable)\n%s", r.code, took, r)
	}
	if n := strings.Count(r.stderr, "graft: waiting:"); n != 1 || !strings.Contains(r.stderr, "the store s3://graft at "+dead+" does not answer") {
		t.Fatalf("want the wait told once, naming the store:\n%s", r.stderr)
	}
	final := r // the report after the notice
	final.stderr = r.stderr[strings.Index(r.stderr, "graft: unavailable: "):]
	wantText(t, final, 9, "unavailable", "the worker could not reach the store", "connection refused",
		"nothing was recorded", "once the store answers the worker")
	if strings.Contains(r.stderr, "graft op list") || strings.Contains(r.stderr, "graft op show") {
		t.Fatalf("the next step points at a ledger row that does not exist:\n%s", r.stderr)
	}
	if len(r.stderr) > 1200 || strings.Count(r.stderr, "connection refused") > 1 {
		t.Fatalf("stderr is not brief (%d bytes):\n%s", len(r.stderr), r.stderr)
	}
	// The workflow gives up after its first step's budget; the command returns right
	// after, not minutes later.
	desc, err := tc.DescribeWorkflowExecution(ctx, "graft/create-branch/g/b", "")
	if err != nil {
		t.Fatal(err)
	}
	closed := desc.GetWorkflowExecutionInfo().GetCloseTime().AsTime()
	if lag := time.Since(closed); lag > 15*time.Second {
		t.Fatalf("the command returned %s after the workflow failed", lag)
	}
}
