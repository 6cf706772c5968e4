package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/graftworks/graft/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// buildGraft builds cmd/starter, the graft binary, into a temporary directory.
func buildGraft(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("find the go command: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "graft")
	out, err := exec.Command(goBin, "build", "-o", bin, "github.com/graftworks/graft/cmd/starter").CombinedOutput()
	if err != nil {
		t.Fatalf("go build cmd/starter: %v\n%s", err, out)
	}
	return bin
}

// result is one finished graft invocation.
type result struct {
	args           []string
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return "graft " + strings.Join(r.args, " ") + "\nexit " + strconv.Itoa(r.code) + "\nstdout:\n" + r.stdout + "\nstderr:\n" + r.stderr
}

// graftEnv is the environment every graft subprocess starts from: the test's,
// without any variable graft reads, and with no profile unless extra names one
// (GRAFT_CONFIG), so the developer's settings never leak in and `graft dev`
// never writes the developer's profile.
func graftEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "GRAFT_") || strings.HasPrefix(k, "AWS_") || k == "DATABASE_URL" {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "GRAFT_CONFIG=") // no profile
	return append(env, extra...)
}

// runGraft runs the binary with env (added to graftEnv) and waits for it.
func runGraft(t *testing.T, bin string, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = graftEnv(env...)
	cmd.Dir = t.TempDir()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{args: args, stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("run graft %v: %v", args, err)
	}
	return r
}

// wantCode fails the test unless r exited with code.
func wantCode(t *testing.T, r result, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("want exit %d, got:\n%s", code, r)
	}
}

// wantStdout requires exit 0 and every fragment on stdout.
func wantStdout(t *testing.T, r result, fragments ...string) {
	t.Helper()
	wantCode(t, r, 0)
	for _, f := range fragments {
		if !strings.Contains(r.stdout, f) {
			t.Fatalf("stdout lacks %q:\n%s", f, r)
		}
	}
}

// jsonOut decodes r's stdout, which must be exactly one JSON object.
func jsonOut[T any](t *testing.T, r result) T {
	t.Helper()
	var v T
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, r)
	}
	if dec.More() {
		t.Fatalf("stdout holds more than one JSON value:\n%s", r)
	}
	return v
}

// jsonErr decodes r's stderr as the CLI's JSON error object and checks that
// it agrees with the exit code.
func jsonErr(t *testing.T, r result) Report {
	t.Helper()
	var rep Report
	dec := json.NewDecoder(strings.NewReader(r.stderr))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("stderr is not the JSON error object: %v\n%s", err, r)
	}
	if rep.ExitCode != r.code {
		t.Fatalf("JSON error says exit %d, process exited %d:\n%s", rep.ExitCode, r.code, r)
	}
	if rep.Message == "" || rep.Next == "" {
		t.Fatalf("JSON error lacks a message or a next step:\n%s", r)
	}
	if r.stdout != "" {
		t.Fatalf("a failed command wrote to stdout:\n%s", r)
	}
	return rep
}

// wantText checks a text-mode failure: "graft: OUTCOME: ..." and a next step
// on stderr, each containing the given fragments, and nothing on stdout.
func wantText(t *testing.T, r result, code int, outcome string, fragments ...string) {
	t.Helper()
	wantCode(t, r, code)
	if !strings.HasPrefix(r.stderr, "graft: "+outcome+": ") || !strings.Contains(r.stderr, "\nnext: ") {
		t.Fatalf("stderr is not `graft: %s: ...` with a next step:\n%s", outcome, r)
	}
	for _, f := range fragments {
		if !strings.Contains(r.stderr, f) {
			t.Fatalf("stderr lacks %q:\n%s", f, r)
		}
	}
	if r.stdout != "" {
		t.Fatalf("a failed command wrote to stdout:\n%s", r)
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
