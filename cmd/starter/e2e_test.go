package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"go.temporal.io/api/workflowservice/v1"
	sdkclient "go.temporal.io/sdk/client"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
	"github.com/graftworks/graft/internal/catalog/catalogtest"
	"github.com/graftworks/graft/internal/devstack"
	"github.com/graftworks/graft/internal/format"
	"github.com/graftworks/graft/internal/graph"
	"github.com/graftworks/graft/internal/testenv"
	"github.com/graftworks/graft/internal/tools"
	"github.com/graftworks/graft/storage"
	"github.com/graftworks/graft/storage/faults"
	"github.com/graftworks/graft/storage/s3"
	"github.com/graftworks/graft/workflows"
)

// devStack is a `graft dev` subprocess on free ports, a fresh ledger schema
// and a temporary store directory or a fresh bucket.
type devStack struct {
	info devStarted
	// env points graft commands at this stack.
	env      []string
	storeDir string // "" on S3
	bucket   string // the store's bucket, on S3
	// profile is where dev writes the stack's settings (GRAFT_CONFIG).
	profile string
}

// startDev starts `graft dev -o json` on a temporary store directory and
// waits for its ready object. When the test ends it sends SIGTERM and checks
// that everything stopped cleanly.
func startDev(t *testing.T, bin string) *devStack { return startDevOn(t, bin, nil) }

// startDevOn is startDev on a fresh bucket of srv, given to dev by its --s3-*
// flags and to later commands by their variables; nil is a store directory.
func startDevOn(t *testing.T, bin string, srv *testenv.S3Server) *devStack {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	if _, err := tools.Temporal.Ensure(ctx); err != nil { // a cold build is not dev's start-up time
		t.Fatal(err)
	}
	binDir, err := tools.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	ports := make([]string, 3)
	for i := range ports {
		p, err := devstack.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = fmt.Sprint(p)
	}
	schema := catalogtest.NewSchema(t) // dropped after the stack stops (cleanups run last-in first-out)
	d := &devStack{profile: filepath.Join(t.TempDir(), "graft", "config.json")}
	common := []string{"DATABASE_URL=" + catalogtest.DatabaseURL(), "GRAFT_DB_SCHEMA=" + schema, "GRAFT_CONFIG=" + d.profile}
	args := []string{"dev", "--port", ports[0], "--ui-port", ports[1], "--metrics-port", ports[2], "-o", "json"}
	if srv == nil {
		d.storeDir = filepath.Join(t.TempDir(), "store")
		common = append(common, "GRAFT_STORE_DIR="+d.storeDir)
	} else {
		d.bucket = srv.NewBucket(t)
		common = append(common, "AWS_ACCESS_KEY_ID="+srv.AccessKey, "AWS_SECRET_ACCESS_KEY="+srv.SecretKey)
		args = append(args, "--s3-endpoint", srv.Endpoint, "--s3-bucket", d.bucket, "--s3-region", srv.Region,
			"--s3-path-style", "--dev-dir", t.TempDir())
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = graftEnv(append(common, "GRAFT_BIN_DIR="+binDir)...)
	cmd.Dir = t.TempDir()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	ready := make(chan error, 1)
	go func() {
		ready <- json.NewDecoder(stdout).Decode(&d.info)
		_, _ = io.Copy(io.Discard, stdout)
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("graft dev exited with %v after SIGTERM:\n%s", err, stderr)
			} else if !strings.Contains(stderr.String(), "graft dev: stopped") {
				t.Errorf("graft dev did not report a clean stop:\n%s", stderr)
			}
		case <-time.After(90 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("graft dev did not stop within 90s of SIGTERM:\n%s", stderr)
		}
	})
	select {
	case err := <-ready:
		if err != nil {
			t.Fatalf("graft dev printed no ready object: %v\n%s", err, stderr)
		}
	case <-time.After(3 * time.Minute):
		t.Fatalf("graft dev not ready after 3 minutes:\n%s", stderr)
	}
	d.env = append(common, "GRAFT_TEMPORAL_ADDRESS="+d.info.TemporalAddress)
	if srv != nil {
		d.env = append(d.env, "GRAFT_S3_ENDPOINT="+srv.Endpoint, "GRAFT_S3_BUCKET="+d.bucket,
			"GRAFT_S3_REGION="+srv.Region, "GRAFT_S3_PATH_STYLE=true")
	}
	return d
}

// TestGraftBinary_EndToEnd_OnTheDevStack drives the built binary against
// `graft dev`: init a graph, write a table version, create a branch, list it,
// run a cleanup dry run, read the ledger, and find the create in Temporal's
// visibility by its search attributes — JSON parsed and exit codes checked
// at each step — then the error paths that need a live stack.
func TestGraftBinary_EndToEnd_OnTheDevStack(t *testing.T) {
	bin := buildGraft(t)
	d := startDev(t, bin)
	run := func(args ...string) result { return runGraft(t, bin, d.env, args...) }

	// The dev stack serves the Web UI and the worker's health.
	for _, u := range []string{d.info.UI, strings.TrimSuffix(d.info.Metrics, "/metrics") + "/healthz"} {
		resp, err := http.Get(u)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s", u, resp.Status)
		}
	}
	if !strings.Contains(d.info.TryCommand, "graph init") {
		t.Errorf("dev suggests %q as a first command", d.info.TryCommand)
	}

	if d.info.Profile != d.profile || d.info.TryCommand != "graft graph init demo" {
		t.Errorf("dev wrote profile %q (want %s) and suggests %q", d.info.Profile, d.profile, d.info.TryCommand)
	}

	const g = "e2e"
	r := run("graph", "init", g, "-o", "json")
	wantCode(t, r, 0)
	initRes := jsonOut[workflows.InitGraphResult](t, r)
	if initRes.Outcome != outcome.Done || !initRes.Created || initRes.Graph != g || !strings.HasPrefix(initRes.Main, "main.") {
		t.Fatalf("graph init result %+v", initRes)
	}

	dir := t.TempDir()
	files := []string{filepath.Join(dir, "part-0.csv"), filepath.Join(dir, "part-1.csv")}
	for i, f := range files {
		if err := os.WriteFile(f, []byte(fmt.Sprintf("id,value\n%d,x\n", i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r = run(append([]string{"table", "write", g, "main", "events", "-o", "json"}, files...)...)
	wantCode(t, r, 0)
	writeRes := jsonOut[workflows.WriteTableResult](t, r)
	if writeRes.Outcome != outcome.Done || writeRes.Objects != len(files) || writeRes.Commit == "" || writeRes.Version == "" {
		t.Fatalf("table write result %+v", writeRes)
	}

	r = run("branch", "create", g, "feature/x", "-o", "json")
	wantCode(t, r, 0)
	created := jsonOut[workflows.CreateBranchResult](t, r)
	if created.Outcome != outcome.Created || !strings.HasPrefix(created.Native, "feature/x.") || created.OpID == "" ||
		created.SourceCommit != writeRes.Commit {
		t.Fatalf("branch create result %+v; want created from main's head %s", created, writeRes.Commit)
	}

	r = run("branch", "list", g, "-o", "json")
	wantCode(t, r, 0)
	list := jsonOut[branchList](t, r)
	byName := map[string]client.BranchInfo{}
	for _, b := range list.Branches {
		byName[b.Branch] = b
	}
	if len(list.Branches) != 2 || byName["feature/x"].Head != created.Head || byName["feature/x"].Native != created.Native ||
		byName["main"].Head != writeRes.Commit || byName["feature/x"].Tables != 1 {
		t.Fatalf("branch list %+v; want main at %s and feature/x at %s", list, writeRes.Commit, created.Head)
	}
	r = run("branch", "list", g) // the text table names both
	wantStdout(t, r, "feature/x", created.Head)

	// Main holds two commits (root, write); keeping the newest one of each
	// branch makes the root garbage — a dry run reports it and deletes nothing.
	for i := 0; i < 2; i++ {
		r = run("cleanup", "run", g, "--dry-run", "--keep-newest", "1", "--wait", "-o", "json")
		wantCode(t, r, 0)
		cl := jsonOut[cleanupView](t, r)
		if cl.Outcome != outcome.Done || cl.Mode != workflows.CleanupModeDryRun || cl.Condemned.Commits != 1 ||
			cl.Deleted.Keys() != 0 || cl.Kept.Head != 2 || cl.Policy.GuardWindow != "1h0m0s" || cl.Policy.KeepNewest != 1 {
			t.Fatalf("dry run %d result %+v", i, cl)
		}
	}

	// In text mode --wait reports progress on stderr from the workflow's
	// progress query, ending with the run's final state; stderr is a pipe
	// here, so as plain lines without control characters.
	r = run("cleanup", "run", g, "--dry-run", "--keep-newest", "1", "--wait")
	wantCode(t, r, 0)
	if !strings.HasPrefix(r.stdout, "cleanup (dry_run) of "+g+": done\n") || !strings.Contains(r.stdout, "would condemn  1 commits") {
		t.Fatalf("text dry run:\n%s", r)
	}
	lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
	if strings.ContainsAny(r.stderr, "\r\x1b") || !strings.HasPrefix(lines[len(lines)-1], "done") {
		t.Fatalf("progress on a pipe: want plain lines ending in the done state, got %q", r.stderr)
	}
	// Without --wait, run returns once the run is in the ledger and prints its operation
	// id, which op show finds at once and op wait follows.
	r = run("cleanup", "run", g, "--dry-run", "--keep-newest", "1", "-o", "json")
	wantCode(t, r, 0)
	started := jsonOut[map[string]string](t, r)
	if started["op_id"] == "" {
		t.Fatalf("cleanup run without --wait: %v", started)
	}
	wantCode(t, run("op", "show", started["op_id"]), 0)
	r = run("op", "wait", started["op_id"], "-o", "json")
	wantCode(t, r, 0)
	if op := jsonOut[opView](t, r); op.Kind != "cleanup" || op.Outcome != "done" {
		t.Fatalf("op wait of the started cleanup: %+v", op)
	}

	r = run("op", "list", "--graph", g, "-o", "json")
	wantCode(t, r, 0)
	ops := jsonOut[opList](t, r)
	var kinds []string
	for _, op := range ops.Operations {
		kinds = append(kinds, op.Kind)
		if op.State != "done" || op.Graph != g {
			t.Errorf("operation %+v is not done in %s", op, g)
		}
	}
	slices.Sort(kinds)
	if want := []string{"cleanup", "cleanup", "cleanup", "cleanup", "create_branch", "init_graph", "write_table"}; !slices.Equal(kinds, want) {
		t.Fatalf("op list kinds %v, want %v", kinds, want)
	}
	r = run("op", "wait", created.OpID, "-o", "json")
	wantCode(t, r, 0)
	if op := jsonOut[opView](t, r); op.Outcome != "created" || op.WorkflowID != client.CreateBranchWorkflowID(g, "feature/x") {
		t.Fatalf("op wait %+v", op)
	}

	findInVisibility(t, d.info, g, "feature/x")

	t.Run("from another directory, the profile dev wrote is the only setting needed", func(t *testing.T) {
		only := []string{"GRAFT_CONFIG=" + d.profile} // runGraft runs in a fresh directory
		r := runGraft(t, bin, only, "branch", "list", g, "-o", "json")
		wantCode(t, r, 0)
		if list := jsonOut[branchList](t, r); len(list.Branches) != 2 {
			t.Fatalf("branch list through the profile: %+v", list)
		}
		r = runGraft(t, bin, only, "op", "list", "--graph", g, "-o", "json") // --db-schema carried over
		wantCode(t, r, 0)
		if ops := jsonOut[opList](t, r); len(ops.Operations) == 0 {
			t.Fatalf("op list through the profile found nothing")
		}
		// Without it, the CLI says which store it read and where that setting came from.
		wantText(t, runGraft(t, bin, nil, "branch", "list", g), 6, "not_found", "store directory", "--store-dir")
		empty := catalogtest.NewSchema(t)
		wantText(t, runGraft(t, bin, []string{"DATABASE_URL=" + catalogtest.DatabaseURL(), "GRAFT_DB_SCHEMA=" + empty}, "op", "show", created.OpID),
			1, "failure", "the ledger's tables are not in schema "+empty+" (from GRAFT_DB_SCHEMA)", "--db-schema")
	})

	t.Run("unknown graph is not_found (6)", func(t *testing.T) {
		r := run("branch", "create", "no-such-graph", "b", "-o", "json")
		rep := jsonErr(t, r)
		if rep.Outcome != "not_found" || r.code != 6 || rep.OpID == "" || !strings.Contains(rep.Message, `graph "no-such-graph" does not exist`) {
			t.Fatalf("report %+v\n%s", rep, r)
		}
		wantText(t, run("branch", "list", "no-such-graph"), 6, "not_found", "does not exist", "graft graph init no-such-graph")
		wantText(t, run("table", "write", "no-such-graph", "main", "events", files[0]), 6, "not_found", "does not exist")
		wantText(t, run("branch", "show", g, "no-such-branch"), 6, "not_found", "no-such-branch", "graft branch list "+g)
		wantText(t, run("op", "show", "NOPE"), 6, "not_found", "graft op list")
		wantText(t, run("cleanup", "schedule", "describe", g), 6, "not_found", "graft cleanup schedule create "+g)
		wantText(t, run("branch", "abandon", g, "feature/y"), 6, "not_found", "no create of e2e/feature/y is running")
	})
	t.Run("invalid names are invalid (2)", func(t *testing.T) {
		wantText(t, run("graph", "init", "Bad Graph"), 2, "invalid", "graph name")
		wantText(t, run("branch", "create", g, "a..b"), 2, "invalid", "branch name")
		wantText(t, run("table", "write", g, "main", "Bad.Table", files[0]), 2, "invalid", "table name")
		rep := jsonErr(t, run("branch", "create", g, "feature/x.json", "-o", "json"))
		if rep.Outcome != "invalid" || rep.ExitCode != 2 {
			t.Fatalf("report %+v", rep)
		}
	})
	t.Run("the worker scheduled the reconciler and op reconcile runs a pass now", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		tc, err := sdkclient.DialContext(ctx, sdkclient.Options{HostPort: d.info.TemporalAddress, Namespace: d.info.Namespace})
		if err != nil {
			t.Fatal(err)
		}
		defer tc.Close()
		desc, err := tc.ScheduleClient().GetHandle(ctx, workflows.ReconcileScheduleID).Describe(ctx)
		if err != nil {
			t.Fatalf("describe schedule %s: %v", workflows.ReconcileScheduleID, err)
		}
		act, ok := desc.Schedule.Action.(*sdkclient.ScheduleWorkflowAction)
		if !ok || act.Workflow != workflows.ReconcileName {
			t.Fatalf("schedule %s runs %+v, want %s", workflows.ReconcileScheduleID, desc.Schedule.Action, workflows.ReconcileName)
		}
		r := run("op", "reconcile", "-o", "json")
		wantCode(t, r, 0)
		var res struct {
			Examined int   `json:"examined"`
			Open     int   `json:"open"`
			Settled  []any `json:"settled"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
			t.Fatalf("op reconcile -o json: %v\n%s", err, r)
		}
		if len(res.Settled) != 0 { // every operation of this test ended through its own workflow
			t.Fatalf("op reconcile settled %+v, want nothing to settle", res)
		}
		r = run("op", "reconcile")
		wantStdout(t, r, "reconciled: 0 unfinished operation(s) examined")
	})
	t.Run("a graph from another operation is a conflict (5)", func(t *testing.T) {
		wantText(t, run("graph", "init", g, "--idempotency-key", ulid.Make().String()), 5, "conflict", "graft branch list "+g)
	})
}

// TestGraftBinary_Tour_OnMinIO runs the tour's operations with the built
// binary against `graft dev --s3-endpoint` on MinIO: init, a write, a
// multipart write (above a lowered threshold), a branch with an append, a
// merge, a tag, a write and a restore, a branch delete and a cleanup — each
// outcome checked — and reads the bucket as another tool would: the
// multipart object whole, in MinIO's multipart ETag form, with no upload of
// its key left; after the cleanup, every object main and the tags name.
func TestGraftBinary_Tour_OnMinIO(t *testing.T) {
	bin := buildGraft(t)
	srv := testenv.MinIO(t)
	d := startDevOn(t, bin, srv)
	run := func(args ...string) result { return runGraft(t, bin, d.env, args...) }
	ctx := t.Context()
	bucket, err := s3.New(ctx, s3.Config{Endpoint: srv.Endpoint, Region: srv.Region, Bucket: d.bucket, PathStyle: true,
		AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	if want := "s3://" + d.bucket + " at " + srv.Endpoint; d.info.Store != want {
		t.Fatalf("graft dev serves store %q, want %q", d.info.Store, want)
	}

	const g = "tour"
	dir := t.TempDir()
	write := func(branch, table, name string, body []byte, flags ...string) workflows.WriteTableResult {
		t.Helper()
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, body, 0o644); err != nil {
			t.Fatal(err)
		}
		r := run(append([]string{"table", "write", g, branch, table, f, "-o", "json"}, flags...)...)
		wantCode(t, r, 0)
		res := jsonOut[workflows.WriteTableResult](t, r)
		if res.Outcome != outcome.Done || res.Commit == "" || res.Objects != 1 || res.Bytes != int64(len(body)) {
			t.Fatalf("table write of %s on %s: %+v", name, branch, res)
		}
		return res
	}
	objects := func(ref, table string) client.TableListing {
		t.Helper()
		r := run("table", "objects", g, ref, table, "-o", "json")
		wantCode(t, r, 0)
		return jsonOut[client.TableListing](t, r)
	}
	head := func(branch string) string {
		t.Helper()
		r := run("branch", "show", g, branch, "-o", "json")
		wantCode(t, r, 0)
		return jsonOut[client.BranchDetail](t, r).Head
	}

	r := run("graph", "init", g, "-o", "json")
	wantCode(t, r, 0)
	if res := jsonOut[workflows.InitGraphResult](t, r); res.Outcome != outcome.Done || !res.Created {
		t.Fatalf("graph init result %+v", res)
	}
	write("main", "people", "people.csv", []byte("id,name\n1,ada\n"))

	// Above a 1 MiB threshold in 5 MiB parts (S3's least): two parts.
	big := make([]byte, 6<<20+123)
	for i := range big {
		big[i] = byte(i*7 + i/4093)
	}
	bigWrite := write("main", "big", "big.csv", big, "--multipart-threshold", "1048576", "--part-size", "5242880")
	bigObjects := objects("main", "big").Objects
	sum := sha256.Sum256(big)
	if len(bigObjects) != 1 || bigObjects[0].Size != int64(len(big)) || bigObjects[0].SHA256 != hex.EncodeToString(sum[:]) ||
		!strings.HasPrefix(bigObjects[0].URI, "s3://"+d.bucket+"/") {
		t.Fatalf("table objects of big: %+v; want one object of %d bytes in s3://%s", bigObjects, len(big), d.bucket)
	}
	key := bigObjects[0].Key
	if obj, err := bucket.Get(ctx, key); err != nil || !bytes.Equal(obj.Body, big) || !strings.HasSuffix(obj.ETag, `-2"`) {
		t.Fatalf("get %s: %d bytes, ETag %q, %v; want the file's bytes in two parts", key, len(obj.Body), obj.ETag, err)
	}
	if err := storage.ListKeyMultipart(ctx, bucket, key, func(u storage.Upload) error {
		return fmt.Errorf("upload %s of %s left incomplete", u.UploadID, u.Key)
	}); err != nil {
		t.Fatal(err)
	}

	r = run("branch", "create", g, "feature/x", "-o", "json")
	wantCode(t, r, 0)
	if created := jsonOut[workflows.CreateBranchResult](t, r); created.Outcome != outcome.Created || created.SourceCommit != bigWrite.Commit {
		t.Fatalf("branch create result %+v; want created from main's head %s", created, bigWrite.Commit)
	}
	appended := write("feature/x", "people", "more.csv", []byte("id,name\n2,grace\n"), "--append")
	if n := len(objects("feature/x", "people").Objects); n != 2 {
		t.Fatalf("people on feature/x after the append has %d objects, want 2", n)
	}

	r = run("merge", g, "feature/x", "--preview", "-o", "json")
	wantCode(t, r, 0)
	if preview := jsonOut[workflows.MergeResult](t, r); preview.Outcome != outcome.Adopted || preview.Commit != "" {
		t.Fatalf("merge preview %+v; want adopted, nothing written", preview)
	}
	r = run("merge", g, "feature/x", "-o", "json")
	wantCode(t, r, 0)
	merged := jsonOut[workflows.MergeResult](t, r)
	if merged.Outcome != outcome.Adopted || merged.Commit == "" || merged.SourceHead != appended.Commit || head("main") != merged.Commit {
		t.Fatalf("merge result %+v; want adopted from %s and main's head", merged, appended.Commit)
	}

	r = run("tag", "create", g, "v1", "-o", "json")
	wantCode(t, r, 0)
	if tag := jsonOut[workflows.CreateTagResult](t, r); tag.Outcome != outcome.Created || tag.Commit != merged.Commit {
		t.Fatalf("tag create result %+v; want v1 at main's head %s", tag, merged.Commit)
	}

	emptied := write("main", "people", "empty.csv", []byte("id,name\n"))
	r = run("restore", g, "main", "--tag", "v1", "-o", "json")
	wantCode(t, r, 0)
	restored := jsonOut[workflows.RestoreResult](t, r)
	if restored.Outcome != outcome.Done || restored.RestoredFrom != merged.Commit || restored.PreviousHead != emptied.Commit ||
		restored.BackupTag != "backup/main/"+emptied.Commit || head("main") != restored.Commit {
		t.Fatalf("restore result %+v; want main restored to %s, backing up %s", restored, merged.Commit, emptied.Commit)
	}
	if n := len(objects("main", "people").Objects); n != 2 {
		t.Fatalf("people on main after the restore has %d objects, want v1's 2", n)
	}

	r = run("branch", "delete", g, "feature/x", "-o", "json")
	wantCode(t, r, 0)
	if del := jsonOut[workflows.DeleteBranchResult](t, r); del.Outcome != outcome.Deleted || del.Head != appended.Commit {
		t.Fatalf("branch delete result %+v", del)
	}
	r = run("branch", "list", g, "-o", "json")
	wantCode(t, r, 0)
	if list := jsonOut[branchList](t, r); len(list.Branches) != 1 || list.Branches[0].Branch != "main" {
		t.Fatalf("branch list after the delete: %+v", list)
	}

	// A writer that crashed mid-upload: its upload record and two parts are in
	// the store, and it sent neither a complete nor an abort. MinIO lists that
	// upload only by its exact key, so cleanup finds it through the record.
	crashID := ulid.Make()
	crashKey := format.ObjectKey(g, "big", crashID)
	crashed := faults.Wrap(bucket)
	crashed.Add(faults.Rule{Name: "crash", Op: faults.OpCompleteMultipart, Mode: faults.Refuse, Status: 403})
	crashed.Add(faults.Rule{Name: "crash", Op: faults.OpAbortMultipart, Mode: faults.Refuse, Status: 403})
	if _, err := graph.UploadObject(ctx, crashed, g, "big", crashID, bytes.NewReader(big), int64(len(big)),
		graph.UploadOptions{Threshold: 1 << 20, PartSize: 5 << 20}); !errors.Is(err, storage.ErrRefused) {
		t.Fatalf("the crashing upload: %v", err)
	}
	incomplete := func() int {
		t.Helper()
		n := 0
		if err := storage.ListKeyMultipart(ctx, bucket, crashKey, func(storage.Upload) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := incomplete(); n != 1 {
		t.Fatalf("the crashed writer left %d incomplete uploads of %s, want 1", n, crashKey)
	}

	// Only main's head and the two tags' commits are kept: the older commits
	// of main and the deleted branch's go, and with them the first version of
	// people, whose one object the appended version still names.
	r = run("cleanup", "run", g, "--keep-newest", "1", "--guard-window", "0", "--wait", "-o", "json")
	wantCode(t, r, 0)
	cl := jsonOut[cleanupView](t, r)
	if cl.Outcome != outcome.Done || cl.Mode != workflows.CleanupModeSweep || cl.Deleted.Commits == 0 ||
		cl.Deleted != cl.Condemned || cl.Refused != 0 {
		t.Fatalf("cleanup result %+v; want done, every condemned key deleted", cl)
	}
	// Two records go: the crashed writer's and the completed big write's, whose
	// record stays until a cleanup (a writer never deletes).
	if cl.Objects.UploadsFound != 1 || cl.Objects.UploadsAborted != 1 || cl.Objects.UploadRecordsRemoved != 2 {
		t.Fatalf("cleanup objects %+v; want the crashed writer's upload aborted and both upload records removed", cl.Objects)
	}
	if n := incomplete(); n != 0 {
		t.Fatalf("%d incomplete uploads of %s after the cleanup", n, crashKey)
	}
	if err := storage.ListAll(ctx, bucket, format.UploadsPrefix(g), func(o storage.ObjectInfo) error {
		return fmt.Errorf("upload record %s survived the cleanup", o.Key)
	}); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"main", "v1", restored.BackupTag} {
		for _, table := range []string{"people", "big"} {
			for _, o := range objects(ref, table).Objects {
				if info, err := bucket.Head(ctx, o.Key); err != nil || info.Size != o.Size {
					t.Fatalf("after the cleanup, %s of %s on %s: %+v, %v; want %d bytes", o.Key, table, ref, info, err, o.Size)
				}
			}
		}
	}

	r = run("op", "list", "--graph", g, "-o", "json")
	wantCode(t, r, 0)
	for _, op := range jsonOut[opList](t, r).Operations {
		if op.State != "done" {
			t.Errorf("operation %+v is not done", op)
		}
	}
}

// findInVisibility polls Temporal's visibility for the create of
// graph/branch by graft's search attributes: indexing may lag a little.
func findInVisibility(t *testing.T, info devStarted, graph, branch string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tc, err := sdkclient.DialContext(ctx, sdkclient.Options{HostPort: info.TemporalAddress, Namespace: info.Namespace})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	query := fmt.Sprintf(`GraftGraph = %q AND GraftBranch = %q AND GraftOutcome = "created"`, graph, branch)
	for {
		resp, err := tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query})
		if err != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			t.Fatalf("list workflows %s: %v", query, err)
		}
		for _, e := range resp.GetExecutions() {
			if e.GetExecution().GetWorkflowId() == client.CreateBranchWorkflowID(graph, branch) &&
				e.GetType().GetName() == workflows.CreateBranchName {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no %s in visibility for %s after 30s (last answer %v)", workflows.CreateBranchName, query, resp.GetExecutions())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
