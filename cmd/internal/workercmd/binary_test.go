package workercmd

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/graftworks/graft/internal/catalog/catalogtest"
	"github.com/graftworks/graft/internal/testenv"
)

// buildWorker builds cmd/worker into a temporary directory.
func buildWorker(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("find the go command: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "graft-worker")
	out, err := exec.Command(goBin, "build", "-o", bin, "github.com/graftworks/graft/cmd/worker").CombinedOutput()
	if err != nil {
		t.Fatalf("go build cmd/worker: %v\n%s", err, out)
	}
	return bin
}

// logLines feeds the JSON log lines of r to lines (unparseable lines are
// kept as messages) and closes it at EOF; all is every line, for failures.
func logLines(r io.Reader, lines chan<- map[string]any, all *syncBuffer) {
	defer close(lines)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		all.Write(append(sc.Bytes(), '\n'))
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) != nil {
			m = map[string]any{"msg": sc.Text()}
		}
		select {
		case lines <- m:
		default: // nobody is waiting for more
		}
	}
}

func TestBinary_ServesHealthAndMetrics_ThenSIGTERMExitsZero(t *testing.T) {
	ts := testenv.Temporal(t)
	bin := buildWorker(t)
	schema := catalogtest.NewSchema(t)

	cmd := exec.Command(bin, "run",
		"--temporal-address", ts.HostPort, "--namespace", ts.Namespace,
		"--task-queue", uniqueName("graft-test-"), "--store-dir", t.TempDir(),
		"--db-schema", schema, "--metrics-addr", "127.0.0.1:0", "--shutdown-timeout", "10s")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+catalogtest.DatabaseURL())
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// exec copies stderr into the pipe and Wait waits for that copy, so once
	// Wait returns and the pipe is closed, logLines sees every line.
	pr, pw := io.Pipe()
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		t.Fatalf("start graft-worker: %v", err)
	}
	var waitErr error
	exited := make(chan struct{})
	lines := make(chan map[string]any, 256)
	all := &syncBuffer{}
	logsDone := make(chan struct{})
	go func() { logLines(pr, lines, all); close(logsDone) }()
	go func() { waitErr = cmd.Wait(); pw.Close(); close(exited) }()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("graft-worker stderr:\n%s", all.String())
		}
	})

	// The metrics server logs the address it bound.
	var addr string
	deadline := time.After(30 * time.Second)
	for addr == "" {
		select {
		case m, ok := <-lines:
			if !ok {
				t.Fatal("graft-worker exited before serving metrics")
			}
			if m["msg"] == "serving metrics and health" {
				addr, _ = m["addr"].(string)
			}
		case <-deadline:
			t.Fatal("graft-worker did not log its metrics address within 30s")
		}
	}
	base := "http://" + addr

	// /healthz turns 200 once the worker polls and the ledger answers.
	var body string
	for code := 0; code != http.StatusOK; {
		select {
		case <-deadline:
			t.Fatalf("/healthz did not turn 200 within 30s; last %d %s", code, body)
		case <-time.After(100 * time.Millisecond):
		}
		code, body = httpGet(t, base+"/healthz")
	}
	var report healthReport
	if err := json.Unmarshal([]byte(body), &report); err != nil || report != (healthReport{"ok", "running", "ok"}) {
		t.Errorf("/healthz body %q (%v), want ok/running/ok", body, err)
	}

	code, metrics := httpGet(t, base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	for _, name := range []string{"graft_operations_total", "graft_in_doubt", "graft_settle_seconds", "graft_objects_swept_total"} {
		if !regexp.MustCompile(`(?m)^# TYPE ` + name + ` `).MatchString(metrics) {
			t.Errorf("/metrics has no %s", name)
		}
	}
	if !regexp.MustCompile(`(?m)^temporal_\w+(\{[^}]*\})? `).MatchString(metrics) {
		t.Errorf("/metrics has no temporal_ SDK metric:\n%s", metrics)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	select {
	case <-exited:
		if waitErr != nil {
			t.Errorf("graft-worker after SIGTERM: %v, want exit 0", waitErr)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("graft-worker still running 20s after SIGTERM")
	}
	if err := syscall.Kill(cmd.Process.Pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("process %d still exists after exit: kill(0) = %v", cmd.Process.Pid, err)
	}
	<-logsDone
	if !strings.Contains(all.String(), `"msg":"worker stopped"`) {
		t.Errorf("no graceful-stop log line")
	}
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read %s: %v", url, err)
	}
	return resp.StatusCode, string(b)
}
