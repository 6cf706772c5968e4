package checks

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/graftworks/graft/client"
	"github.com/graftworks/graft/client/outcome"
)

// This test uses nothing of graft but its public packages and its binary: a check
// worker in another module sees graft exactly so.

const checkQueue = "example-checks"

// repoRoot is the graft checkout this module's replace directive points at.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// binDir holds the pinned tools, built by `go run ./cmd/buildtools` (./scripts/test.sh
// does) into $GRAFT_BIN_DIR or the checkout's .bin/; graft dev needs the Temporal CLI.
func binDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("GRAFT_BIN_DIR")
	if dir == "" {
		dir = filepath.Join(repoRoot(t), ".bin")
	}
	if _, err := os.Stat(filepath.Join(dir, "temporal-v1.5.1", "temporal")); err != nil {
		t.Fatalf("the Temporal CLI is not built (%v): run `go run ./cmd/buildtools` in %s first", err, repoRoot(t))
	}
	return dir
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// freshSchema names an empty Postgres schema for the ledger (graft dev creates it) and
// drops it after the test.
func freshSchema(t *testing.T, databaseURL string) string {
	t.Helper()
	var b [5]byte
	_, _ = rand.Read(b[:])
	schema := "graft_checks_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		ctx := context.Background()
		if conn, err := pgx.Connect(ctx, databaseURL); err == nil {
			defer conn.Close(ctx)
			_, _ = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
		}
	})
	return schema
}

// devInfo is what `graft dev -o json` prints once the stack is up.
type devInfo struct {
	TemporalAddress string `json:"temporal_address"`
	Namespace       string `json:"namespace"`
}

// stack is graft dev on a local store, and the graft CLI pointed at it by the profile
// graft dev wrote.
type stack struct {
	t        *testing.T
	bin      string
	env      []string
	storeDir string
	info     devInfo
}

// startGraftDev builds graft from the checkout and runs `graft dev` until the test ends.
func startGraftDev(t *testing.T, databaseURL, schema string) *stack {
	t.Helper()
	s := &stack{t: t, bin: filepath.Join(t.TempDir(), "graft"), storeDir: t.TempDir()}
	s.env = append(os.Environ(), "DATABASE_URL="+databaseURL, "GRAFT_BIN_DIR="+binDir(t),
		"GRAFT_CONFIG="+filepath.Join(t.TempDir(), "config.json"))
	if out, err := exec.Command("go", "build", "-C", repoRoot(t), "-o", s.bin, "./cmd/starter").CombinedOutput(); err != nil {
		t.Fatalf("build graft: %v\n%s", err, out)
	}
	cmd := exec.Command(s.bin, "dev", "-o", "json", "--dev-dir", t.TempDir(), "--store-dir", s.storeDir, "--db-schema", schema,
		"--port", fmt.Sprint(freePort(t)), "--ui-port", fmt.Sprint(freePort(t)), "--metrics-port", fmt.Sprint(freePort(t)))
	cmd.Env, cmd.Dir = s.env, t.TempDir()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready, done := make(chan error, 1), make(chan error, 1)
	go func() {
		ready <- json.NewDecoder(stdout).Decode(&s.info)
		_, _ = io.Copy(io.Discard, stdout)
		done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("graft dev did not stop within 60s of SIGTERM")
		}
	})
	select {
	case err := <-ready:
		if err != nil {
			t.Fatalf("graft dev printed no ready object: %v\n%s", err, stderr.String())
		}
	case <-time.After(3 * time.Minute):
		t.Fatalf("graft dev not ready after 3 minutes:\n%s", stderr.String())
	}
	return s
}

// graft runs the CLI and returns its stdout, stderr and exit code.
func (s *stack) graft(args ...string) (string, string, int) {
	s.t.Helper()
	cmd := exec.Command(s.bin, args...)
	cmd.Env, cmd.Dir = s.env, s.t.TempDir()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		s.t.Fatalf("graft %s: %v", strings.Join(args, " "), err)
	}
	return stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()
}

// must runs the CLI with -o json, expects exit 0 and decodes stdout into out (if set).
func (s *stack) must(out any, args ...string) {
	s.t.Helper()
	stdout, stderr, code := s.graft(append(args, "-o", "json")...)
	if code != 0 {
		s.t.Fatalf("graft %s: exit %d\n%s", strings.Join(args, " "), code, stderr)
	}
	if out != nil {
		if err := json.Unmarshal([]byte(stdout), out); err != nil {
			s.t.Fatalf("graft %s: %v\n%s", strings.Join(args, " "), err, stdout)
		}
	}
}

// file writes a CSV file for a table write.
func file(t *testing.T, name, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestNoEmptyTables_OnARealStack_MergedThenRejected runs the check worker against graft
// dev (the Temporal dev server, graft's worker, a local store, the ledger in Postgres):
// main is protected with the check on the worker's own task queue; a branch whose changed
// table has objects merges (exit 0, the check passed), and a branch that adds a table
// with no objects is rejected (exit 11) with the check's message, main's head unchanged.
func TestNoEmptyTables_OnARealStack_MergedThenRejected(t *testing.T) {
	databaseURL := os.Getenv("DATABASE_URL")
	if databaseURL == "" {
		databaseURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	schema := freshSchema(t, databaseURL)
	s := startGraftDev(t, databaseURL, schema)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	wctx, stopWorker := context.WithCancel(ctx)
	workerDone := make(chan error, 1)
	go func() {
		workerDone <- Run(wctx, Config{TemporalAddress: s.info.TemporalAddress, Namespace: s.info.Namespace,
			TaskQueue: checkQueue, StoreDir: s.storeDir})
	}()
	t.Cleanup(func() {
		stopWorker()
		if err := <-workerDone; err != nil {
			t.Errorf("check worker: %v", err)
		}
	})

	s.must(nil, "graph", "init", "shop")
	s.must(nil, "table", "write", "shop", "main", "orders", file(t, "orders.csv", "id,total\n1,10\n"))

	// The rule, through the ledger (`graft branch protect shop main --check
	// graft-example.no-empty-tables@example-checks` sets the same).
	ops, err := client.OpenOps(ctx, client.LedgerConfig{DatabaseURL: databaseURL, Schema: schema}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ops.Close()
	if _, err := ops.Protect(ctx, client.BranchRule{Graph: "shop", Branch: "main", SetBy: "checks-example",
		Checks: []client.BranchCheck{{Name: NoEmptyTablesName, TaskQueue: checkQueue}}}); err != nil {
		t.Fatalf("protect main: %v", err)
	}

	s.must(nil, "branch", "create", "shop", "feature/good")
	s.must(nil, "branch", "create", "shop", "feature/empty")

	// feature/good changes orders; main moves meanwhile, so the merge is a merge commit.
	s.must(nil, "table", "write", "shop", "feature/good", "orders", file(t, "orders.csv", "id,total\n1,10\n2,20\n"))
	s.must(nil, "table", "write", "shop", "main", "customers", file(t, "customers.csv", "id,name\n1,ada\n"))
	var merged struct {
		Outcome outcome.Outcome   `json:"outcome"`
		Wait    *client.MergeWait `json:"wait"`
	}
	s.must(&merged, "merge", "shop", "feature/good")
	if merged.Outcome != outcome.Merged || merged.Wait == nil || len(merged.Wait.Checks) != 1 || merged.Wait.Checks[0].State != "passed" {
		t.Fatalf("merge of feature/good: %+v; want merged after the check passed", merged)
	}

	// feature/empty adds a table whose version lists no objects: one write, then its
	// one entry removed.
	s.must(nil, "table", "write", "shop", "feature/empty", "returns", file(t, "returns.csv", "id\n1\n"))
	var listing client.TableListing
	s.must(&listing, "table", "objects", "shop", "feature/empty", "returns")
	if len(listing.Objects) != 1 {
		t.Fatalf("returns on feature/empty: %+v; want one object", listing)
	}
	s.must(nil, "table", "write", "shop", "feature/empty", "returns", "--remove", listing.Objects[0].ID)

	var before, after client.BranchDetail
	s.must(&before, "branch", "show", "shop", "main")
	_, stderr, code := s.graft("merge", "shop", "feature/empty", "-o", "json")
	var rejected struct {
		Outcome  string `json:"outcome"`
		ExitCode int    `json:"exit_code"`
		Message  string `json:"message"`
	}
	if err := json.Unmarshal([]byte(stderr), &rejected); err != nil {
		t.Fatalf("merge of feature/empty: exit %d, stderr not one JSON object: %v\n%s", code, err, stderr)
	}
	if code != outcome.ExitRejected || rejected.ExitCode != code || rejected.Outcome != string(outcome.Rejected) ||
		!strings.Contains(rejected.Message, "check "+NoEmptyTablesName+" failed") || !strings.Contains(rejected.Message, "table returns") {
		t.Fatalf("merge of feature/empty: exit %d, %+v; want rejected (11) with the check's message naming table returns", code, rejected)
	}
	s.must(&after, "branch", "show", "shop", "main")
	if after.Head != before.Head {
		t.Fatalf("main's head moved from %s to %s though the merge was rejected", before.Head, after.Head)
	}
	t.Logf("rejected: %s", rejected.Message)
}
