package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	sdkclient "go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/graftworks/graft/activities"
	"github.com/graftworks/graft/internal/catalog/catalogtest"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/internal/testenv"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/faults"
	"github.com/graftworks/graft/storage/localfs"
	"github.com/graftworks/graft/worker"
	"github.com/oklog/ulid/v2"
)

// inProcess runs graft commands through Execute against a worker in this
// process whose store injects faults.
type inProcess struct {
	env   map[string]string
	store *faults.Store
}

// tempFiles returns a function that writes a file of body under name in a
// directory of the test's own, and returns its path.
func tempFiles(t *testing.T) func(name, body string) string {
	dir := t.TempDir()
	return func(name, body string) string {
		t.Helper()
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}
}

// initGraph makes graph g with its main branch directly in the store.
func (p *inProcess) initGraph(t *testing.T, g string) {
	t.Helper()
	if _, err := graph.Init(context.Background(), p.store.Inner(), graph.InitParams{Graph: g, MainTree: ulid.Make(), Op: "init-" + g,
		Time: time.Now().UTC().Truncate(time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
}

func newInProcess(t *testing.T) *inProcess {
	t.Helper()
	dir := t.TempDir()
	inner, err := localfs.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return newInProcessOn(t, inner, map[string]string{"GRAFT_STORE_DIR": dir})
}

// newInProcessOn is newInProcess on the store inner, which storeEnv points the
// commands at.
func newInProcessOn(t *testing.T, inner storage.Store, storeEnv map[string]string) *inProcess {
	t.Helper()
	ts := testenv.Temporal(t)
	cat := catalogtest.Open(t)
	store := faults.Wrap(inner)
	queue := fmt.Sprintf("graft-cli-%d", time.Now().UnixNano())
	quiet := sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	tc, err := sdkclient.Dial(sdkclient.Options{HostPort: ts.HostPort, Namespace: ts.Namespace, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)
	w := worker.New(tc, queue, &activities.Activities{Store: store, Catalog: cat}, sdkworker.Options{})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	env := map[string]string{
		"GRAFT_TEMPORAL_ADDRESS": ts.HostPort, "GRAFT_NAMESPACE": ts.Namespace, "GRAFT_TASK_QUEUE": queue,
		"DATABASE_URL": catalogtest.DatabaseURL(), "GRAFT_DB_SCHEMA": cat.Schema(),
	}
	maps.Copy(env, storeEnv)
	return &inProcess{store: store, env: env}
}

func (p *inProcess) run(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return p.runCtx(ctx, t, args...)
}

func (p *inProcess) runCtx(ctx context.Context, t *testing.T, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := Execute(ctx, args, envOf(p.env), &stdout, &stderr)
	return result{args: args, stdout: stdout.String(), stderr: stderr.String(), code: code}
}

// TestBranchCreate_RefPutNeverAnswers_ExitsInDoubtWithNextSteps_AbandonSettlesUnpublished
// is the operator's in-doubt story: every live-ref put of the new branch is
// held (the store never says whether it landed), so create exits 4 with the
// operation id and the two commands that follow it; abandon fences the ref
// key and exits 3 (unpublished); op wait then reports the same outcome.
func TestBranchCreate_RefPutNeverAnswers_ExitsInDoubtWithNextSteps_AbandonSettlesUnpublished(t *testing.T) {
	p := newInProcess(t)
	wantCode(t, p.run(t, "graph", "init", "g"), 0)
	p.store.Add(faults.Rule{
		Op: faults.OpPut, KeyPrefix: format.BranchRefPrefix("g", "feature/x"), Mode: faults.Hold,
		Body: func(b []byte) bool {
			ref, err := format.DecodeBranchRef(b)
			return err == nil && ref.State == format.RefLive
		},
	})

	r := p.run(t, "branch", "create", "g", "feature/x", "-o", "json")
	rep := jsonErr(t, r)
	if rep.Outcome != "in_doubt" || r.code != 4 || rep.OpID == "" {
		t.Fatalf("report %+v\n%s", rep, r)
	}
	for _, want := range []string{"`graft op wait " + rep.OpID + "`", "`graft branch abandon g feature/x`"} {
		if !strings.Contains(rep.Next, want) {
			t.Fatalf("next step %q lacks %q", rep.Next, want)
		}
	}

	// A second create of the name, under another key, follows the running one
	// and says so.
	r = p.run(t, "branch", "create", "g", "feature/x", "--idempotency-key", "another-request")
	if r.code != 4 || !strings.Contains(r.stderr, "was already running as operation "+rep.OpID) ||
		!strings.Contains(r.stderr, "operation another-request was not started") {
		t.Fatalf("a second create under another key:\n%s", r)
	}

	// op show names the native name, the phase and what it waits for; op list
	// --stuck lists it, the same way.
	r = p.run(t, "op", "show", rep.OpID, "-o", "json")
	wantCode(t, r, 0)
	op := jsonOut[opView](t, r)
	if op.State != "in_doubt" || op.Kind != "create_branch" || !strings.HasPrefix(op.Native, "feature/x.") ||
		op.WitnessState != "in_doubt" || op.WaitsFor == "" || (op.Phase == "" && op.From != "history") {
		t.Fatalf("op show while settling: %+v", op)
	}
	r = p.run(t, "op", "show", rep.OpID)
	wantCode(t, r, 0)
	for _, want := range []string{`state\s+in_doubt for`, `native\s+` + regexp.QuoteMeta(op.Native) + ` \(in_doubt\)`, `waits for\s+\S`,
		`pending write\s+ref ` + regexp.QuoteMeta(op.Native)} {
		if !regexp.MustCompile(want).MatchString(r.stdout) {
			t.Fatalf("op show text lacks %q:\n%s", want, r.stdout)
		}
	}
	for _, raw := range []string{"fingerprint", "owner run", "eyJ"} {
		if strings.Contains(r.stdout, raw) {
			t.Fatalf("op show text shows the raw ledger column %q:\n%s", raw, r.stdout)
		}
	}
	r = p.run(t, "op", "list", "--stuck", "-o", "json")
	wantCode(t, r, 0)
	stuck := jsonOut[opList](t, r)
	if len(stuck.Operations) != 1 || stuck.Operations[0].ID != rep.OpID || stuck.Operations[0].Stuck != "in_doubt" ||
		stuck.Operations[0].Native != op.Native || stuck.Operations[0].WaitsFor == "" {
		t.Fatalf("op list --stuck: %+v", stuck)
	}
	r = p.run(t, "op", "list", "--stuck")
	wantStdout(t, r, rep.OpID, "WAITS FOR")

	// A delete while the ref put is in doubt is a conflict naming the create,
	// not not_found (docs/outcomes.md).
	wantText(t, p.run(t, "branch", "delete", "g", "feature/x"), 5, "conflict", "still settling", rep.OpID)

	wantText(t, p.run(t, "branch", "abandon", "g", "feature/x"), 3, "unpublished", "graft branch create g feature/x")

	r = p.run(t, "op", "wait", rep.OpID, "-o", "json")
	if final := jsonErr(t, r); final.Outcome != "unpublished" || final.ExitCode != 3 || final.OpID != rep.OpID {
		t.Fatalf("op wait after abandon: %+v", final)
	}
	wantText(t, p.run(t, "branch", "show", "g", "feature/x"), 6, "not_found", "feature/x")
	r = p.run(t, "op", "list", "--stuck", "-o", "json")
	wantCode(t, r, 0)
	if stuck := jsonOut[opList](t, r); len(stuck.Operations) != 0 {
		t.Fatalf("op list --stuck after the settle: %+v", stuck)
	}
	var ops opList
	r = p.run(t, "op", "list", "--kind", "create_branch", "-o", "json")
	wantCode(t, r, 0)
	if err := json.Unmarshal([]byte(r.stdout), &ops); err != nil || len(ops.Operations) != 1 || ops.Operations[0].Outcome != "unpublished" {
		t.Fatalf("op list: %v %+v", err, ops)
	}
}
